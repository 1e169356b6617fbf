"""Error responses in each provider's JSON shape (what the official SDKs turn into typed exceptions).

OpenAI: ``{"error": {"message", "type", "param", "code"}}``.
Anthropic: ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from starlette.responses import JSONResponse

from .bodies import new_id

Family = Literal["openai", "anthropic"]

_OPENAI_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    409: ("invalid_request_error", "conflict"),
    422: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_DEFAULT_MESSAGES = {
    400: "Invalid request.",
    401: "Invalid API key.",
    404: "Not found.",
    429: "Rate limit reached (emulated).",
    500: "The server had an error while processing your request (emulated).",
    503: "The service is temporarily unavailable (emulated).",
    529: "Overloaded (emulated).",
}


def error_body(
    family: Family, status: int, message: str | None = None, param: str | None = None
) -> dict[str, object]:
    text = message or _DEFAULT_MESSAGES.get(status, f"Error {status} (emulated).")
    if family == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": text}}
    kind, code = _OPENAI_TYPES.get(status, ("server_error", None))
    return {"error": {"message": text, "type": kind, "param": param, "code": code}}


def request_id_header(family: Family) -> dict[str, str]:
    """The request-id header each SDK reads into ``_request_id`` / ``request_id``."""
    return {"request-id": new_id("req_")} if family == "anthropic" else {"x-request-id": new_id("req_")}


def error_response(
    family: Family,
    status: int,
    message: str | None = None,
    *,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    all_headers = {**request_id_header(family), **(headers or {})}
    return JSONResponse(error_body(family, status, message, param), status_code=status, headers=all_headers)
