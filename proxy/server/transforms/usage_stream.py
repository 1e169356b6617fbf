"""The response side of optimize mode's ``stream-usage``: the client gets the stream it asked for.

When the proxy added ``stream_options.include_usage`` to a Chat request (``optimize``), the upstream
adds a usage chunk and a ``"usage": null`` member to every other chunk; ``UsageChunkStripper``
removes both with minimal edits of each chunk's JSON text, after the usage tracker has read them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from cachewarden.proxy.server.hooks import Flow

from .optimize import STRIP_USAGE_CHUNK

# An SSE event larger than this without its end is not edited: the stream passes through unchanged.
MAX_EVENT_BYTES = 1 << 20


def identity_encoding(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Request headers asking for an uncompressed response, so that the relay can edit the stream."""
    kept = [(k, v) for k, v in headers if k.lower() != b"accept-encoding"]
    return [*kept, (b"accept-encoding", b"identity")]


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _members(text: str) -> Iterator[tuple[str, int, int, Any]]:
    """The top-level members of a JSON object text: (key, start of key, end of value, value)."""
    decoder = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if text[i : i + 1] != "{":
        raise ValueError("not an object")
    i = _skip_ws(text, i + 1)
    if text[i : i + 1] == "}":
        return
    while True:
        key, after_key = decoder.raw_decode(text, i)
        colon = _skip_ws(text, after_key)
        if not isinstance(key, str) or text[colon : colon + 1] != ":":
            raise ValueError("malformed member")
        value, end = decoder.raw_decode(text, _skip_ws(text, colon + 1))
        yield key, i, end, value
        i = _skip_ws(text, end)
        if text[i : i + 1] == "}":
            return
        if text[i : i + 1] != ",":
            raise ValueError("malformed object")
        i = _skip_ws(text, i + 1)


def drop_null_usage(text: str) -> str | None:
    """The object text without its top-level ``"usage": null`` member (and one comma), else None."""
    members = list(_members(text))
    at = next((n for n, m in enumerate(members) if m[0] == "usage" and m[3] is None), None)
    if at is None:
        return None
    start, end = members[at][1], members[at][2]
    if at + 1 < len(members):
        end = members[at + 1][1]  # up to the next key: takes the comma after the member
    elif at > 0:
        start = members[at - 1][2]  # from the previous value: takes the comma before it
    return text[:start] + text[end:]


_EVENT_ENDS = (b"\r\n\r\n", b"\n\n", b"\r\r")


def _split_event(buffer: bytes) -> tuple[bytes, bytes] | None:
    """(first complete event with its blank line, rest), or None while the event is incomplete."""
    found = [(i, len(end)) for end in _EVENT_ENDS if (i := buffer.find(end)) >= 0]
    if not found:
        return None
    i, n = min(found)
    return buffer[: i + n], buffer[i + n :]


def edit_chat_event(event: bytes) -> bytes:
    """One SSE event as the client sees it: b"" for the usage chunk, minus ``"usage": null``, or as is."""
    lines = event.splitlines(keepends=True)
    data = [n for n, line in enumerate(lines) if line.startswith(b"data:")]
    if len(data) != 1:
        return event
    line = lines[data[0]]
    body = line[5:].rstrip(b"\r\n")
    lead = b" " if body.startswith(b" ") else b""
    try:
        text = body[len(lead) :].decode("utf-8")
        obj = json.loads(text)
    except ValueError:
        return event  # [DONE], or not JSON: not ours to touch
    if not isinstance(obj, Mapping) or "usage" not in obj:
        return event
    if obj.get("choices") == [] and isinstance(obj["usage"], Mapping):
        return b""  # the chunk the proxy asked for
    try:
        edited = drop_null_usage(text)
    except ValueError:
        return event
    if edited is None:
        return event
    lines[data[0]] = b"data:" + lead + edited.encode("utf-8") + line[len(line.rstrip(b"\r\n")) :]
    return b"".join(lines)


class UsageChunkStripper:
    """Edits a Chat SSE stream chunk by chunk (``feed``, then ``flush``); see ``edit_chat_event``.

    Complete events are passed on as soon as their blank line arrives; a partial event waits for
    the rest. An event over ``limit`` bytes turns the editor off: the rest passes through as is.
    """

    def __init__(self, limit: int = MAX_EVENT_BYTES) -> None:
        self._buffer = b""
        self._limit = limit
        self._off = False

    def feed(self, chunk: bytes) -> bytes:
        if self._off:
            return chunk
        self._buffer += chunk
        out: list[bytes] = []
        while (split := _split_event(self._buffer)) is not None:
            event, self._buffer = split
            out.append(edit_chat_event(event))
        if len(self._buffer) > self._limit:
            self._off = True
            out.append(self._buffer)
            self._buffer = b""
        return b"".join(out)

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest


def stream_editor(flow: Flow, status: int, headers: Mapping[str, str]) -> UsageChunkStripper | None:
    """The editor for this response, when the proxy asked for usage the client did not.

    Only an uncompressed event stream without Content-Length is edited (the proxy asked for
    ``identity``); an upstream that compresses anyway gets its bytes relayed as they are, and the
    client then sees the usage chunk (the official SDKs accept it).
    """
    if not flow.metadata.get(STRIP_USAGE_CHUNK) or status != 200:
        return None
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if media != "text/event-stream" or encoding != "identity" or "content-length" in headers:
        return None
    return UsageChunkStripper()
