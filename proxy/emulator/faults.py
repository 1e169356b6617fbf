"""Fault injection chosen per request by the ``x-emulator-fault`` header.

Syntax: ``key=value`` pairs separated by ``;`` (or ``,``), for example
``status=500``, ``status=429;retry-after=2``, ``delay=1.5``, ``disconnect=3``, ``delay=0.2;status=529``.

- ``status=N``: answer N with the provider's error JSON instead of processing the request (no cache
  effect); ``message=TEXT`` sets the error message, ``retry-after=S`` the Retry-After header.
- ``delay=S``: wait S seconds before the first byte of the response (error or not).
- ``disconnect=N``: process the request, then drop the connection after N SSE events (streamed) or
  after part of the body (not streamed, any N).
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER = "x-emulator-fault"


class FaultSyntaxError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Fault:
    status: int | None = None
    retry_after: str | None = None
    message: str | None = None
    delay: float = 0.0
    disconnect: int | None = None

    @property
    def retry_headers(self) -> dict[str, str]:
        return {"retry-after": self.retry_after} if self.retry_after is not None else {}


def _number(key: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise FaultSyntaxError(f"{HEADER}: {key} must be a number, got {value!r}") from None
    if number < 0:
        raise FaultSyntaxError(f"{HEADER}: {key} must not be negative")
    return number


def parse_fault(header: str | None) -> Fault | None:
    """The fault a request asks for, None without the header; FaultSyntaxError when malformed."""
    if header is None or not header.strip():
        return None
    fields: dict[str, str] = {}
    for part in header.replace(",", ";").split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise FaultSyntaxError(f"{HEADER}: expected key=value, got {part.strip()!r}")
        fields[key.strip().lower()] = value.strip()
    unknown = set(fields) - {"status", "retry-after", "message", "delay", "disconnect"}
    if unknown:
        raise FaultSyntaxError(f"{HEADER}: unknown key(s) {', '.join(sorted(unknown))}")
    status = None
    if "status" in fields:
        status = int(_number("status", fields["status"]))
        if not 400 <= status <= 599:
            raise FaultSyntaxError(f"{HEADER}: status must be 400-599")
    retry_after = fields.get("retry-after")
    if retry_after is not None:
        _number("retry-after", retry_after)
    disconnect = int(_number("disconnect", fields["disconnect"])) if "disconnect" in fields else None
    return Fault(
        status=status,
        retry_after=retry_after,
        message=fields.get("message"),
        delay=_number("delay", fields["delay"]) if "delay" in fields else 0.0,
        disconnect=disconnect,
    )
