"""Data shared by the linter and the proxy: rule files, the model table and the pricing snapshot."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable


def data_file(name: str) -> Traversable:
    """A file shipped in this package (``models.yaml``, ``pricing.json``, a rule file)."""
    return files(__name__).joinpath(name)
