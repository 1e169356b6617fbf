"""The LOG formats ``cachewarden replay`` reads, recognised line by line: one JSON object per line.

- a bare request body (OpenAI Chat / Responses, Anthropic Messages);
- a record ``{"request": body, "timestamp": …, "usage": …}``, optionally with ``route`` (a URL path
  such as ``/v1/messages`` or the proxy's route label such as ``anthropic-messages``), ``provider``
  (a request format name), ``tenant`` (scopes the cache like the proxy does), ``model`` (a fallback
  for bodies without one: Azure and Bedrock put it in the URL) and ``status``; the proxy's
  ``--capture`` file is such a record per line;
- an OpenAI batch input line ``{"custom_id", "method", "url", "body"}``;
- an Anthropic batch line ``{"custom_id", "params"}``.

Each format is recognised per line, so logs can be concatenated. Timestamps are epoch seconds,
epoch milliseconds, ISO 8601 or an HTTP date. Recorded usage is read with the proxy's own usage parsers
(``usage.py``), so replay and the proxy count cached tokens the same way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import IO, Any

import orjson
from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.engine.prompt import PROVIDERS, Provider
from cachewarden.proxy.engine.usage import Usage, normalise

# A line longer than this is skipped without being held in memory (the adapters' body limit).
MAX_LINE_BYTES = 64 * 2**20
# Epoch numbers above this are milliseconds: 1e11 seconds is the year 5138, 1e11 ms is 1973.
_MILLISECONDS_FROM = 1e11

# The proxy's route labels (hooks.Flow.route) that carry a prompt the provider caches.
_ROUTE_LABELS: dict[str, Provider] = {
    "openai-chat": "openai-chat",
    "openai-responses": "openai-responses",
    "anthropic-messages": "anthropic",
}
# Routes that reach the provider without filling its prompt cache.
_UNCACHED_ROUTES = frozenset({"anthropic-count-tokens", "passthrough"})


class LogLineError(RequestError):
    """A LOG line that cannot be replayed; the message is one line, for ``line N: <message>``."""


class SkipLine(Exception):
    """A valid line that is not a prompt the provider caches (count_tokens, pass-through, error status)."""


class OversizedLine(str):
    """Stands for a line longer than MAX_LINE_BYTES that the reader dropped without keeping it."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One replayable line: the body and what the line says about where and when it was sent."""

    body: Mapping[str, Any]
    kind: str  # body | record | openai-batch | anthropic-batch
    provider: Provider | None  # from the line (route, url, provider field, batch kind), else None
    route: str | None
    timestamp: float | None
    tenant: str | None
    model: str | None  # fallback model for bodies without one
    usage: Mapping[str, Any] | None


# ---------------------------------------------------------------------------------------------------
# Reading lines


def read_lines(stream: IO[bytes], progress: list[int] | None = None) -> Iterator[str]:
    """The lines of a binary stream as text, one at a time (never the whole file).

    Invalid UTF-8 is kept as lone surrogates so that the line fails to parse with its own message
    instead of stopping the replay. ``progress[0]`` (when given) counts the bytes read so far.
    """
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if progress is not None:
            progress[0] += len(raw)
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            # Drain the rest of the line in bounded chunks: a runaway line must not fill memory.
            while True:
                more = stream.readline(MAX_LINE_BYTES)
                if progress is not None:
                    progress[0] += len(more)
                if not more or more.endswith(b"\n"):
                    break
            yield OversizedLine()
            continue
        yield raw.decode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------------------------------
# Recognising a line


def parse_timestamp(value: Any) -> float | None:
    """Epoch seconds of a timestamp: a number (seconds or milliseconds) or an ISO 8601 string."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise LogLineError(f"timestamp must be a number or an ISO 8601 string, not {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            moment = _date(text)
            if moment is None:
                raise LogLineError(
                    f"timestamp {value!r} is not epoch seconds, ISO 8601 or an HTTP date"
                ) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
    else:
        raise LogLineError(f"timestamp must be a number or an ISO 8601 string, not {type(value).__name__}")
    if seconds != seconds or seconds in (float("inf"), float("-inf")) or seconds < 0:
        raise LogLineError(f"timestamp {value!r} is not a time")
    return seconds / 1000.0 if seconds >= _MILLISECONDS_FROM else seconds


def _date(text: str) -> datetime | None:
    try:
        # Python 3.11 reads "Z", offsets and fractions; a naive time is taken as UTC.
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    try:
        # HTTP ``Date`` headers (RFC 9110 / 2822), as recorded by HTTP cassettes and access logs.
        return parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None


def route_provider(route: str) -> Provider | None:
    """The request format a route names: a URL path (``/v1/messages``) or a proxy route label."""
    if route in _ROUTE_LABELS:
        return _ROUTE_LABELS[route]
    path = route.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "openai-chat"
    if path.endswith("/responses"):
        return "openai-responses"
    if path.endswith("/messages"):
        return "anthropic"
    return None


def _uncached_route(route: str) -> bool:
    return route in _UNCACHED_ROUTES or route.split("?", 1)[0].rstrip("/").endswith("/count_tokens")


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise LogLineError(f"{what} must be a JSON object")
    return value


def _text(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise LogLineError(f"{key!r} must be a string")
    return value


def _failed_status(status: Any) -> bool:
    """An HTTP error status: the provider rejected the request before it reached the cache."""
    text = str(status) if isinstance(status, int | str) and not isinstance(status, bool) else ""
    return text.isdigit() and int(text) >= 400


def _record(obj: Mapping[str, Any]) -> LogEntry:
    route = _text(obj, "route")
    if route is not None and _uncached_route(route):
        raise SkipLine(f"route {route} does not fill the prompt cache")
    if _failed_status(obj.get("status")):
        raise SkipLine(f"status {obj['status']}: the provider did not run the request")
    provider = route_provider(route) if route is not None else None
    named = _text(obj, "provider")
    if provider is None and named is not None:
        if named not in PROVIDERS:
            raise LogLineError(f"unknown provider {named!r} (expected one of {', '.join(PROVIDERS)})")
        provider = named
    usage = obj.get("usage")
    if usage is not None and not isinstance(usage, Mapping):
        raise LogLineError("'usage' must be a JSON object or null")
    tenant = obj.get("tenant")
    return LogEntry(
        body=_object(obj["request"], "'request'"),
        kind="record",
        provider=provider,
        route=route,
        timestamp=parse_timestamp(obj.get("timestamp")),
        tenant=None if tenant is None else str(tenant),
        model=_text(obj, "model"),
        usage=usage,
    )


def parse_line(line: str) -> LogEntry | None:
    """The entry on one LOG line; None for a blank line. Raises LogLineError or SkipLine."""
    if isinstance(line, OversizedLine):
        raise LogLineError(f"line is longer than {MAX_LINE_BYTES // 2**20} MiB")
    if not line.strip():
        return None
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        reason = str(exc).split(":", 1)[0] if "surrogates" not in str(exc) else "not valid UTF-8"
        raise LogLineError(f"not valid JSON ({reason})") from None
    if not isinstance(obj, dict):
        raise LogLineError(f"a LOG line must be a JSON object, not {type(obj).__name__}")
    if "request" in obj:
        return _record(obj)
    if "custom_id" in obj and "params" in obj:
        body = _object(obj["params"], "'params'")
        return LogEntry(body, "anthropic-batch", "anthropic", None, None, None, None, None)
    if "custom_id" in obj and "body" in obj:
        url = _text(obj, "url")
        provider = route_provider(url) if url is not None else None
        if url is not None and provider is None:
            raise SkipLine(f"batch url {url} is not a cached prompt route")
        body = _object(obj["body"], "'body'")
        return LogEntry(body, "openai-batch", provider, url, None, None, None, None)
    return LogEntry(obj, "body", None, None, None, None, None, None)


# ---------------------------------------------------------------------------------------------------
# Usage


def reported_usage(provider: Provider, usage: Mapping[str, Any] | None) -> Usage | None:
    """Recorded usage in the normal form: the provider's own block (OpenAI counts cached tokens
    inside the prompt count, Anthropic beside it: ``usage.py`` keeps either from double counting),
    or a block already normalised (``Usage`` fields, or the replay contract's ``*_tokens`` keys)."""
    if not usage:
        return None
    if "uncached_tokens" in usage and "cached_tokens" in usage:
        cached, write = _count(usage.get("cached_tokens")), _count(usage.get("cache_write_tokens"))
        uncached = _count(usage.get("uncached_tokens"))
        write_1h = _count(usage.get("cache_write_1h_tokens"))
        return Usage(cached + write + uncached, cached, write, min(write_1h, write), uncached, 0)
    if "input_total" in usage and "uncached" in usage:
        cached, write = _count(usage.get("cached")), _count(usage.get("cache_write"))
        uncached = _count(usage.get("uncached"))
        write_1h = _count(usage.get("cache_write_1h"))
        output = _count(usage.get("output"))
        return Usage(cached + write + uncached, cached, write, min(write_1h, write), uncached, output)
    return normalise(provider, usage)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
