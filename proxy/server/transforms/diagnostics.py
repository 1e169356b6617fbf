"""``--anthropic-diagnostics``: the proxy asks Anthropic why a request missed, and hides the answer.

Anthropic explains a cache miss when the request carries ``diagnostics: {"previous_message_id": …}``
(provider-caching.md §2.7). The proxy knows the previous message of each conversation (per tenant,
keyed by its first message, so that an edited system prompt, tools or model still find it; else the
tenant's latest message), from the responses it relayed, so it can add the field itself
(``DiagnosticsInjector``, in the rewriter). The analysis then reads the diagnosis (``analysis.py``),
and the client gets the response it would have had without the field: ``diagnostics`` is removed
from the JSON body, or from ``message_start`` when streamed (``diagnostics_editor``). Only
uncompressed bodies are edited (the proxy asks for ``identity``); an upstream that compresses anyway
is relayed as is, diagnostics included (the SDKs accept the field).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.prompt import Prompt
from cachewarden.proxy.server.hooks import Flow

from .usage_stream import MAX_EVENT_BYTES, _split_event

STRIP_DIAGNOSTICS: Final = "strip_diagnostics"  # flow.metadata flag the relay honours
SCOPE_KEY: Final = "diagnostics_scope"  # flow.metadata: the scope whose previous message was used
TRANSFORM: Final = "anthropic-diagnostics"
# A non-streamed body larger than this is relayed unedited.
MAX_BODY_BYTES = 8 * MAX_EVENT_BYTES


def conversation_key(prompt: Prompt) -> str:
    """The conversation a request belongs to: the digests of its first message (empty: none)."""
    return "\x00".join(s.digest for s in prompt.segments if s.message_index == 0)


class PreviousMessages:
    """The last Anthropic message id per (tenant, conversation) and per tenant, bounded (LRU)."""

    def __init__(self, max_entries: int = 20_000) -> None:
        self._max = max_entries
        self._data: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, tenant: str, scope: str, message_id: str) -> None:
        with self._lock:
            for key in ((tenant, scope), (tenant, "")):
                self._data[key] = message_id
                self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)

    def get(self, tenant: str, scope: str) -> str | None:
        with self._lock:
            return self._data.get((tenant, scope)) or self._data.get((tenant, ""))


# One store per engine: the rewriter (before forwarding) and the analyzer (after the response) of
# one proxy share it without a global.
_STORES: weakref.WeakKeyDictionary[Engine, PreviousMessages] = weakref.WeakKeyDictionary()
_STORES_LOCK = threading.Lock()


def previous_messages(engine: Engine) -> PreviousMessages:
    with _STORES_LOCK:
        store = _STORES.get(engine)
        if store is None:
            store = _STORES[engine] = PreviousMessages()
        return store


class DiagnosticsInjector:
    """Adds ``diagnostics`` to Anthropic Messages requests that do not carry it (see module doc)."""

    def __init__(self, engine: Engine) -> None:
        self.previous = previous_messages(engine)

    def apply(self, body: dict[str, Any], flow: Flow) -> list[str]:
        if flow.provider != "anthropic" or "diagnostics" in body or flow.path.endswith("/count_tokens"):
            return []
        try:
            scope = conversation_key(parse_request(body, provider="anthropic"))
        except CachewardenError:
            return []
        body["diagnostics"] = {"previous_message_id": self.previous.get(flow.tenant, scope)}
        flow.metadata[STRIP_DIAGNOSTICS] = True
        flow.metadata[SCOPE_KEY] = scope
        return [TRANSFORM]


def _without_diagnostics(text: str, streamed: bool) -> str | None:
    """The JSON text without the diagnostics member (streamed: of message_start's message)."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    holder = obj.get("message") if streamed and obj.get("type") == "message_start" else obj
    if not isinstance(holder, dict) or "diagnostics" not in holder:
        return None
    del holder["diagnostics"]
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class _EventEditor:
    """message_start without ``diagnostics``; every other event passes unchanged."""

    def __init__(self) -> None:
        self._buffer = b""
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        if self._done:
            return chunk
        self._buffer += chunk
        out: list[bytes] = []
        while not self._done and (split := _split_event(self._buffer)) is not None:
            event, self._buffer = split
            out.append(self._edit(event))
        if self._done or len(self._buffer) > MAX_EVENT_BYTES:
            self._done = True
            out.append(self._buffer)
            self._buffer = b""
        return b"".join(out)

    def _edit(self, event: bytes) -> bytes:
        lines = event.splitlines(keepends=True)
        for n, line in enumerate(lines):
            if line.startswith(b"data:") and b"message_start" in line:
                self._done = True  # only the first message_start carries it
                body = line[5:].rstrip(b"\r\n")
                lead = b" " if body.startswith(b" ") else b""
                edited = _without_diagnostics(body[len(lead) :].decode("utf-8", "replace"), True)
                if edited is not None:
                    end = line[len(line.rstrip(b"\r\n")) :]
                    lines[n] = b"data:" + lead + edited.encode("utf-8") + end
                return b"".join(lines)
        return event

    def flush(self) -> bytes:
        rest, self._buffer = self._buffer, b""
        return rest


class _BodyEditor:
    """The whole JSON body, held (bounded) and released without ``diagnostics`` at the end."""

    drops_length = True  # the relay must not forward the upstream's Content-Length

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._over = False

    def feed(self, chunk: bytes) -> bytes:
        if self._over:
            return chunk
        self._buffer += chunk
        if len(self._buffer) > MAX_BODY_BYTES:
            self._over = True
            out, self._buffer = bytes(self._buffer), bytearray()
            return out
        return b""

    def flush(self) -> bytes:
        data, self._buffer = bytes(self._buffer), bytearray()
        if self._over or not data:
            return data
        edited = _without_diagnostics(data.decode("utf-8", "replace"), False)
        return data if edited is None else edited.encode("utf-8")


Editor = _EventEditor | _BodyEditor


def diagnostics_editor(flow: Flow, status: int, headers: Mapping[str, str]) -> Editor | None:
    """The editor that hides the diagnostics the proxy asked for, or None (see module doc)."""
    if not flow.metadata.get(STRIP_DIAGNOSTICS) or status != 200:
        return None
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if headers.get("content-encoding", "identity").strip().lower() != "identity":
        return None
    if media == "text/event-stream":
        return _EventEditor()
    if media == "application/json":
        return _BodyEditor()
    return None
