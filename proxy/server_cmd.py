"""`cachewarden proxy`: run the reverse proxy with uvicorn.

Exit 0 after a clean shutdown, 2 on a bad configuration (one line on stderr). On SIGTERM / SIGINT
``/readyz`` turns 503 at once, new connections are refused and streams in flight get
``graceful_timeout`` seconds to finish (uvicorn's graceful shutdown).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from .app import Proxy, create_app
from .config import Settings, load_settings
from .errors import ConfigError
from .hooks import Analyzer, default_analyzers
from .metrics import Metrics


class _DrainingServer(uvicorn.Server):
    """Marks the proxy as draining the moment a shutdown signal arrives, before connections close."""

    def __init__(self, config: uvicorn.Config, proxy: Proxy) -> None:
        super().__init__(config)
        self.proxy = proxy

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.proxy.draining = True
        super().handle_exit(sig, frame)


def build_analyzers(settings: Settings, metrics: Metrics) -> list[Analyzer]:
    """The analyzers of a running proxy (the engine's analyzer is added here once it exists)."""
    return default_analyzers(metrics)


def _check_files(settings: Settings) -> None:
    for flag, path in (("--models", settings.models), ("--prices", settings.prices)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{flag} {path}: no such file")
    for upstream in settings.upstreams.values():
        if upstream.tokenizer is not None and not Path(upstream.tokenizer).is_file():
            raise ConfigError(f"upstreams.{upstream.name}.tokenizer {upstream.tokenizer}: no such file")


def build(settings: Settings) -> Starlette:
    metrics = Metrics(settings.max_model_labels)
    try:
        return create_app(settings, analyzers=build_analyzers(settings, metrics), metrics=metrics)
    except OSError as exc:  # --access-log / --capture opened at start-up
        raise ConfigError(f"cannot open {exc.filename}: {exc.strerror}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = load_settings(sys.argv[1:] if argv is None else argv)
        _check_files(settings)
        app = build(settings)
    except ConfigError as exc:
        print(f"cachewarden proxy: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        http="h11",
        log_level=settings.log_level,
        # Observe mode relays the upstream's response headers unchanged: no second Date or Server.
        server_header=False,
        date_header=False,
        # Our own access log is opt-in and leaves out query strings; uvicorn's would print them.
        access_log=False,
        proxy_headers=False,
        timeout_graceful_shutdown=int(settings.graceful_timeout),
    )
    server = _DrainingServer(config, app.state.proxy)
    server.run()
    return 0 if server.started else 1


if __name__ == "__main__":
    raise SystemExit(main())
