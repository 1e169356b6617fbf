"""Requests as the proxy hands them to its analyzers, for the tests that drive an analyzer directly."""

from __future__ import annotations

import time
from typing import Any

from cachewarden.proxy.server.hooks import Flow, Timings

_PROVIDERS = {
    "openai-chat": ("openai-chat", "openai", "/v1/chat/completions"),
    "anthropic": ("anthropic-messages", "anthropic", "/v1/messages"),
}


def request_flow(
    body: bytes, n: int, provider: str = "openai-chat", tenant: str = "t", **fields: Any
) -> Flow:
    """Request ``n`` of a tenant, received now and answered 200; ``fields`` set the rest (usage, ...)."""
    route, upstream, path = _PROVIDERS[provider]
    given: dict[str, Any] = {
        "id": f"f{n}",
        "route": route,
        "provider": provider,
        "upstream": upstream,
        "method": "POST",
        "path": path,
        "request_body": body,
        "request_headers": (),
        "key_hash": "k",
        "tenant": tenant,
        "timings": Timings(received=time.perf_counter()),
        "status": 200,
    }
    return Flow(**{**given, **fields})
