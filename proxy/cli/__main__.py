"""``python -m cachewarden.proxy.cli``: the ``cachewarden`` command."""

from . import main

raise SystemExit(main())
