"""Adapters from a provider request body to a Prompt.

``load_body`` parses bytes safely, ``detect_provider`` names the request format from the route or
the body's shape, ``parse_request`` does both and dispatches to the provider's adapter. Every
failure is a RequestError naming the path; nothing else escapes for any JSON input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.engine.prompt import Prompt, Provider

from ._body import DEFAULT_MAX_DEPTH, CheckedBody, check_depth, load_body
from ._items import ItemRun, Resume
from .anthropic import parse_anthropic
from .openai_chat import parse_chat
from .openai_responses import parse_responses

__all__ = ["ItemRun", "Resume", "detect_provider", "load_body", "parse_request"]

_PARSERS: dict[Provider, Callable[[Mapping[str, Any], str | None, Resume | None], Prompt]] = {
    "openai-chat": parse_chat,
    "openai-responses": parse_responses,
    "anthropic": parse_anthropic,
}

# Content-block types only the Anthropic Messages API uses (Chat parts are text/image_url/input_audio/
# file/refusal; an Anthropic image has a ``source``, a Chat one an ``image_url``).
_ANTHROPIC_BLOCKS = frozenset(
    {
        "image",
        "document",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "search_result",
        "container_upload",
        "mcp_tool_use",
        "mcp_tool_result",
    }
)


# Top-level fields only a Messages request has (``context_management`` is shared with Responses,
# which the presence of ``input`` already decided).
_ANTHROPIC_FIELDS = frozenset(
    {
        "anthropic_version",
        "system",
        "cache_control",
        "thinking",
        "stop_sequences",
        "top_k",
        "output_config",
        "output_format",
        "mcp_servers",
        "container",
    }
)


def _route_provider(route: str) -> Provider | None:
    path = route.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "openai-chat"
    if path.endswith("/responses"):
        return "openai-responses"
    if path.endswith(("/messages", "/messages/count_tokens")):
        return "anthropic"
    return None


def _has_anthropic_blocks(messages: Any) -> bool:
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if "cache_control" in block or (
                isinstance(kind, str) and (kind in _ANTHROPIC_BLOCKS or kind.endswith("_tool_result"))
            ):
                return True
    return False


def detect_provider(body: Mapping[str, Any], route: str | None = None) -> Provider:
    """The request format: from the route when it names one, else from the body's shape."""
    if route is not None:
        by_route = _route_provider(route)
        if by_route is not None:
            return by_route
    if not isinstance(body, Mapping):
        raise RequestError("body must be a JSON object")
    if "input" in body or "instructions" in body:
        return "openai-responses"
    if any(key in body for key in _ANTHROPIC_FIELDS):
        return "anthropic"
    messages = body.get("messages")
    tools = body.get("tools")
    if isinstance(tools, list) and any(isinstance(t, Mapping) and "input_schema" in t for t in tools):
        return "anthropic"
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") in ("auto", "any", "tool", "none"):
        return "anthropic"
    if _has_anthropic_blocks(messages):
        return "anthropic"
    model = body.get("model")
    # Last resort for plain-text turns, which both formats share: Messages requires max_tokens, and
    # Chat bodies rarely send it (it is deprecated there) - together with a Claude model name.
    if "max_tokens" in body and isinstance(model, str) and "claude" in model.lower():
        return "anthropic"
    if messages is not None:
        return "openai-chat"
    raise RequestError("cannot tell the request format: no messages or input (pass --provider)")


def parse_request(
    body: bytes | str | Mapping[str, Any],
    provider: Provider | None = None,
    route: str | None = None,
    *,
    model: str | None = None,
    resume: Resume | None = None,
) -> Prompt:
    """Read a request body into a Prompt.

    ``model`` is only a fallback for bodies that carry none (Azure deployments and Bedrock put the
    model in the URL); a body's own ``model`` always wins. ``resume`` carries the previous body of the
    conversation in (``resume.previous``) and this one out (``resume.run``): the messages / input
    items it shares with the previous body are not read again (the Prompt is the same either way).
    """
    data: Mapping[str, Any]
    if type(body) is CheckedBody:
        data = body  # load_body checked it
    elif isinstance(body, Mapping):
        # Bodies built in Python skip load_body: give them the same depth guard.
        check_depth(body, DEFAULT_MAX_DEPTH)
        data = body
    elif isinstance(body, bytes | bytearray | memoryview | str):
        data = load_body(body)
    else:
        raise RequestError(f"body must be bytes, str or a mapping, not {type(body).__name__}")
    chosen = provider if provider is not None else detect_provider(data, route)
    parser = _PARSERS.get(chosen)
    if parser is None:
        raise RequestError(f"unknown provider {chosen!r} (expected one of {', '.join(_PARSERS)})")
    return parser(data, model, resume)
