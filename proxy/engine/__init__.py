"""Request → prediction, without HTTP: adapters, tokenizers and counting, the model and price tables,
the provider cache models and the prefix index.

This layer is the bottom of ``cachewarden.proxy``: it imports nothing from ``explain``, ``server``,
``replay`` or ``cli``, nor FastAPI, Starlette, httpx, uvicorn or prometheus_client, so the linter and
the offline commands use it without the proxy's dependencies.
"""

from .adapters import parse_request
from .engine import Analysis, Engine

__all__ = ["Analysis", "Engine", "parse_request"]
