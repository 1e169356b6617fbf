"""The usage a provider reports, read from every response shape, streamed or not, as the bytes pass by.

One normal form, ``Usage``, because the providers count differently:

- OpenAI (Chat ``usage.prompt_tokens``, Responses ``usage.input_tokens``) counts cached tokens
  *inside* the prompt count: ``uncached = prompt - cached - cache_write``.
- Anthropic counts ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` *beside*
  ``input_tokens``: ``input_total = input + cache_read + cache_creation``.

Streams: OpenAI Chat sends a last chunk with ``usage`` only with ``stream_options.include_usage``;
Responses puts it on the terminal ``response.completed`` / ``.incomplete`` / ``.failed`` event;
Anthropic puts it on ``message_start.message.usage`` and then on each ``message_delta.usage``,
which is *cumulative*: the last one overlays the start, never summed.

``UsageTracker`` is fed the raw (possibly compressed) response chunks and never changes them.
This module does not import any HTTP framework.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from .decoding import Decoder, decoder

UsageState = Literal["reported", "missing", "unparsed"]
Provider = Literal["openai-chat", "openai-responses", "anthropic"]

_RESPONSES_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_RESPONSES_TERMINAL_QUOTED = tuple(f'"{t}"'.encode() for t in _RESPONSES_TERMINAL)
# A usage-bearing body or SSE event larger than this is not parsed (the bytes still pass through).
DEFAULT_PARSE_LIMIT = 16 * 2**20


@dataclass(frozen=True, slots=True)
class Usage:
    """Input tokens split by how the provider billed them; ``cache_write`` includes ``cache_write_1h``.

    ``cached + cache_write + uncached == input_total`` for every provider.
    """

    input_total: int
    cached: int
    cache_write: int
    cache_write_1h: int
    uncached: int
    output: int


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _details(usage: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    found = usage.get(key)
    return found if isinstance(found, Mapping) else {}


def usage_from_openai(usage: Mapping[str, Any]) -> Usage | None:
    """Chat (``prompt_tokens``) or Responses (``input_tokens``) usage; None when neither is present."""
    if "prompt_tokens" in usage:
        total, details, output = (
            usage["prompt_tokens"],
            _details(usage, "prompt_tokens_details"),
            "completion_tokens",
        )
    elif "input_tokens" in usage:
        total, details, output = (
            usage["input_tokens"],
            _details(usage, "input_tokens_details"),
            "output_tokens",
        )
    else:
        return None
    total = _int(total)
    # DeepSeek reports prompt_cache_hit_tokens beside (and equal to) prompt_tokens_details.cached_tokens.
    cached = min(_int(details.get("cached_tokens")) or _int(usage.get("prompt_cache_hit_tokens")), total)
    # GPT-5.6+ reports writes in cache_write_tokens (OpenRouter: same name); they are part of the prompt.
    write = min(
        _int(details.get("cache_write_tokens")) or _int(usage.get("cache_write_tokens")), total - cached
    )
    return Usage(total, cached, write, 0, total - cached - write, _int(usage.get(output)))


def usage_from_anthropic(usage: Mapping[str, Any]) -> Usage | None:
    if not any(
        k in usage for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    ):
        return None
    uncached = _int(usage.get("input_tokens"))
    cached = _int(usage.get("cache_read_input_tokens"))
    creation = _details(usage, "cache_creation")
    write = _int(usage.get("cache_creation_input_tokens")) or (
        _int(creation.get("ephemeral_5m_input_tokens")) + _int(creation.get("ephemeral_1h_input_tokens"))
    )
    write_1h = min(_int(creation.get("ephemeral_1h_input_tokens")), write)
    return Usage(
        uncached + cached + write, cached, write, write_1h, uncached, _int(usage.get("output_tokens"))
    )


def normalise(provider: Provider, usage: Mapping[str, Any]) -> Usage | None:
    return usage_from_anthropic(usage) if provider == "anthropic" else usage_from_openai(usage)


# -- Server-sent events -----------------------------------------------------------------------------


class SseParser:
    """Incremental ``text/event-stream`` parser (WHATWG rules): feed bytes, get ``(event, data)``.

    Lines end in LF, CRLF or CR, possibly split across chunks. An event whose data grows beyond
    ``limit`` bytes is dropped whole and counted in ``oversized``.
    """

    def __init__(self, limit: int = DEFAULT_PARSE_LIMIT) -> None:
        self._buffer = b""
        self._event: str | None = None
        self._data: list[bytes] = []
        self._size = 0
        self._limit = limit
        self.oversized = 0

    def feed(self, chunk: bytes) -> Iterator[tuple[str | None, bytes]]:
        buffer = self._buffer + chunk
        # A CR at the very end may be the first half of a CRLF: keep it for the next chunk.
        held = b"\r" if buffer.endswith(b"\r") else b""
        if held:
            buffer = buffer[:-1]
        lines = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        self._buffer = lines.pop() + held
        if len(self._buffer) > self._limit:
            self._buffer, self._size = b"", self._limit + 1
        for line in lines:
            event = self._line(line)
            if event is not None:
                yield event

    def _line(self, line: bytes) -> tuple[str | None, bytes] | None:
        if not line:
            event, data, size = self._event, self._data, self._size
            self._event, self._data, self._size = None, [], 0
            if size > self._limit:
                self.oversized += 1
                return None
            return (event, b"\n".join(data)) if data else None
        if line.startswith(b":"):
            return None
        name, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if name == b"data":
            self._size += len(value) + 1
            if self._size <= self._limit:
                self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        return None


# -- the tracker ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UsageReport:
    """What a response said about usage: the normal form, the provider's own block, the model."""

    state: UsageState
    usage: Usage | None = None
    raw: Mapping[str, Any] | None = None
    model: str | None = None
    # Why the usage is missing or unparsed ("compressed", "too-large", "malformed", "no-usage", ...).
    detail: str | None = None
    # The Responses API's response id and output items: a later request's ``previous_response_id``
    # makes the provider put them in front of its input.
    response_id: str | None = None
    output_items: Sequence[Any] | None = None
    # Anthropic: the message id, and the cache ``diagnostics`` when the response carries the field
    # (empty: absent; else its one value, None for null) — provider-caching.md §2.7.
    message_id: str | None = None
    diagnostics: tuple[Any, ...] = ()


def _load(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except ValueError:
        return None


class UsageTracker:
    """Reads usage from one response as its raw chunks pass through (``feed``), then ``finish``.

    Never raises from ``feed`` for any input, so the caller's relay loop cannot break on a parse
    problem. gzip / deflate, br and zstd bodies, streamed or not, are decompressed on a side copy
    (bounded by ``limit``; ``decoding``); another coding, or one whose package is not installed,
    ends as ``unparsed``.
    """

    def __init__(
        self,
        provider: Provider,
        content_type: str | None,
        content_encoding: str | None = None,
        limit: int = DEFAULT_PARSE_LIMIT,
    ) -> None:
        self.provider = provider
        media = (content_type or "").split(";", 1)[0].strip().lower()
        self._sse = media == "text/event-stream"
        self._json = media == "application/json" or media.endswith("+json")
        self._limit = limit
        self._failed: str | None = None if self._sse or self._json else f"content-type {media or 'none'}"
        encoding = (content_encoding or "identity").strip().lower()
        self._inflate: Any = None
        self._other: Decoder | None = None
        if encoding in ("gzip", "x-gzip", "deflate"):
            # wbits 32+15 detects the gzip or zlib header; raw deflate is tried in _decode on failure.
            self._inflate = zlib.decompressobj(32 + zlib.MAX_WBITS)
        elif encoding != "identity":
            self._other = decoder(encoding, limit)
            if self._other is None:
                self._failed = self._failed or f"compressed ({encoding})"
        self._inflated = 0
        self._body = bytearray()
        self._sse_parser = SseParser(limit)
        self._raw: dict[str, Any] | None = None
        self._model: str | None = None
        self._response_id: str | None = None
        self._output_items: list[Any] | None = None
        self._message_id: str | None = None
        self._diagnostics: tuple[Any, ...] = ()
        self._seen_usage = False
        self._ended = False

    @property
    def unparsed(self) -> bool:
        return self._failed is not None

    @property
    def stream_ended(self) -> bool:
        """The stream's own last event went by (Chat ``[DONE]``, Anthropic ``message_stop``, a
        Responses terminal event): a client may hang up from here on without losing anything."""
        return self._ended

    def feed(self, chunk: bytes) -> None:
        if self._failed is not None or not chunk:
            return
        try:
            data = self._decode(chunk)
            if self._sse:
                for event, payload in self._sse_parser.feed(data):
                    self._on_event(event, payload)
            elif len(self._body) + len(data) > self._limit:
                self._failed, self._body = "too-large", bytearray()
            else:
                self._body += data
        except Exception as exc:  # a parser bug must never reach the relay loop
            self._failed = f"parser error: {type(exc).__name__}"

    def _decode(self, chunk: bytes) -> bytes:
        if self._other is not None:
            return self._other.feed(chunk)
        if self._inflate is None:
            return chunk
        try:
            data: bytes = self._inflate.decompress(chunk, self._limit + 1 - self._inflated)
        except zlib.error:
            if self._inflated:
                raise
            # "deflate" is sometimes sent raw, without the zlib header.
            self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            data = self._inflate.decompress(chunk, self._limit + 1)
        self._inflated += len(data)
        if self._inflated > self._limit:
            raise ValueError("decompressed body beyond the parse limit")
        return data

    def _on_event(self, event: str | None, payload: bytes) -> None:
        if self._is_last_event(event, payload):
            self._ended = True
        if self.provider == "openai-responses":
            # Only the terminal event carries usage; skip parsing the many delta events.
            if event is not None and event not in _RESPONSES_TERMINAL:
                return
            if event is None and b'"response.' not in payload:
                return
        elif b'"usage"' not in payload and b'"model"' not in payload:
            return
        obj = _load(payload)
        if isinstance(obj, Mapping):
            self._on_object(obj)

    def _is_last_event(self, event: str | None, payload: bytes) -> bool:
        if self.provider == "openai-responses":
            return event in _RESPONSES_TERMINAL or (
                event is None and any(quoted in payload for quoted in _RESPONSES_TERMINAL_QUOTED)
            )
        if self.provider == "anthropic":
            return event == "message_stop" or (event is None and b'"message_stop"' in payload)
        return payload.strip() == b"[DONE]"

    def _on_object(self, obj: Mapping[str, Any]) -> None:
        kind = obj.get("type")
        if self.provider == "openai-responses":
            if kind in _RESPONSES_TERMINAL and isinstance(obj.get("response"), Mapping):
                self._take(obj["response"])
        elif self.provider == "anthropic":
            if kind == "message_start" and isinstance(obj.get("message"), Mapping):
                self._take(obj["message"])
            elif kind == "message_delta" and isinstance(obj.get("usage"), Mapping):
                # Cumulative: each field's latest value wins; never add deltas up.
                self._raw = {**(self._raw or {}), **{k: v for k, v in obj["usage"].items() if v is not None}}
                self._seen_usage = True
        else:
            # Chat chunks: `usage` is null on all but the last one (with include_usage).
            self._take(obj)

    def _take(self, obj: Mapping[str, Any]) -> None:
        if self._model is None and isinstance(obj.get("model"), str):
            self._model = obj["model"]
        if self.provider == "openai-responses" and isinstance(obj.get("id"), str):
            self._response_id = obj["id"]
            if isinstance(obj.get("output"), list):
                self._output_items = obj["output"]
        if self.provider == "anthropic":
            if isinstance(obj.get("id"), str):
                self._message_id = obj["id"]
            if "diagnostics" in obj:
                self._diagnostics = (obj["diagnostics"],)
        usage = obj.get("usage")
        if isinstance(usage, Mapping):
            self._raw = dict(usage)
            self._seen_usage = True

    def finish(self) -> UsageReport:
        if self._failed is not None:
            return UsageReport("unparsed", detail=self._failed)
        if self._sse and self._sse_parser.oversized and not self._seen_usage:
            return UsageReport("unparsed", model=self._model, detail="too-large")
        if self._json:
            obj = _load(bytes(self._body))
            self._body = bytearray()
            if not isinstance(obj, Mapping):
                return UsageReport("unparsed", detail="malformed")
            self._take(obj)
        chain: dict[str, Any] = {
            "response_id": self._response_id,
            "output_items": self._output_items,
            "message_id": self._message_id,
            "diagnostics": self._diagnostics,
        }
        if self._raw is None:
            return UsageReport("missing", model=self._model, detail="no-usage", **chain)
        usage = normalise(self.provider, self._raw)
        if usage is None:
            return UsageReport("missing", raw=self._raw, model=self._model, detail="no-token-counts", **chain)
        return UsageReport("reported", usage, self._raw, self._model, **chain)
