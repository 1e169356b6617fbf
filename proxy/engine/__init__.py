"""Request → prediction, without HTTP: adapters, tokenizers and counting, the model and price tables,
the provider cache models and the prefix index.

This layer is the bottom of ``cachewarden.proxy``: it imports nothing from ``explain``, ``server``,
``replay`` or ``cli``, nor FastAPI, Starlette, httpx, uvicorn or prometheus_client, so the linter and
the offline commands use it without the proxy's dependencies.

The names below are loaded on first use: the linter imports ``engine.errors``, ``models`` and
``tokenizers`` only, and importing the adapters and the engine with them cost every lint run (a
pre-commit hook's included) ~0.1 s.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapters import parse_request
    from .engine import Analysis, Engine

__all__ = ["Analysis", "Engine", "parse_request"]

_HOMES = {"Analysis": ".engine", "Engine": ".engine", "parse_request": ".adapters"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home, __name__), name)
