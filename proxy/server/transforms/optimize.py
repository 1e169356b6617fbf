"""Optimize mode: what the proxy adds to a request so that the provider caches it, and its side effects.

Three rewrites, each only where the client left the choice open:

``cache-breakpoint`` (Anthropic). Anthropic caches only at breakpoints (``cache_control``); a
request without one is never cached. A 5-minute write costs 1.25x the input price and a read 0.1x
(provider-caching.md §2.5), so a breakpoint pays off when its prefix is read again at least
``0.25 / 0.9 ~ 0.28`` times on average; one reuse already repays it (two sends cost 1.25 + 0.1 =
1.35 instead of 2). The rule: place a breakpoint when the expected number of further reuses is at
least 1, estimated from the observed reuse rate: a prefix this tenant has already sent once within
the TTL (so this request is at least its second sighting, each within the TTL of the one before,
as the cache's own TTL is refreshed on every read) is expected to come again. Then, only when the
request has no ``cache_control`` at all (top level or any block) and the prefix is at least the
model's minimum cacheable length (model table ``min_tokens``, counted with the engine's counter):

- tools + system reused          -> a block breakpoint on the last system block (or the last tool):
                                    shared by every conversation that starts with that prefix;
- tools + system + history reused (an earlier request of the tenant is a prefix of this one at a
  message boundary: a conversation going on, or a retry)
                                 -> top-level ``cache_control`` (automatic caching: the breakpoint
                                    follows the last block, one slot).

At most two of Anthropic's four slots, and only when the client used none. The first sighting of a
prefix never gets a breakpoint: a prefix sent once is not known to repay its write.

``prompt-cache-key`` (OpenAI). OpenAI routes on a hash of the prefix combined with
``prompt_cache_key``; GPT-5.6+ needs the key for its better matching (§1.2). When the body has
none, the proxy sets a stable hash of the tenant (and of the session header value when one is
configured). The tenant is a configured name or a salted hash of the API key, never the key, and
the key sent upstream is a hash of it again.

``stream-usage`` (OpenAI Chat). A stream reports usage only with ``stream_options.include_usage``.
The proxy asks for it when the client did not, and then gives the client the stream it asked for:
``usage_stream.UsageChunkStripper`` drops the extra usage chunk (``"choices": []`` with a ``usage`` object,
before ``data: [DONE]``) and removes the ``"usage": null`` member that the option adds to every
other chunk, editing the chunk's JSON text minimally (every other byte is the upstream's). The
usage tracker reads the stream before that edit, so the metrics get the usage.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import framing_for, provider_count
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.server.hooks import Flow

Body = dict[str, Any]

STRIP_USAGE_CHUNK: Final = "strip_usage_chunk"  # flow.metadata flag the relay honours
EPHEMERAL: Final = {"type": "ephemeral"}
# A prefix is worth a breakpoint from its second sighting on (see the module docstring).
MIN_SIGHTINGS = 2
# Prefix digests remembered for reuse counting (least recently seen dropped first).
MAX_PREFIXES = 100_000


# -- reuse counting --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Sighting:
    count: int
    last: float


class ReuseCounter:
    """Sightings of prefix digests, each within ``ttl`` of the one before. Bounded LRU; thread-safe."""

    def __init__(self, max_entries: int = MAX_PREFIXES) -> None:
        self._entries: OrderedDict[str, _Sighting] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def seen(self, key: str, now: float, ttl: float) -> int:
        """Sightings so far in the current run (0 when never seen or the run has lapsed)."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.count if entry is not None and now - entry.last < ttl else 0

    def sight(self, key: str, now: float, ttl: float) -> int:
        """Records a sighting; returns the run's length including this one."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or now - entry.last >= ttl:
                entry = _Sighting(0, now)
                self._entries[key] = entry
            entry.count += 1
            entry.last = now
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
            return entry.count


# -- Anthropic breakpoints -------------------------------------------------------------------------

# Request fields that invalidate the message cache (provider-caching.md §2.4, §2.7): part of the
# history digest, so a conversation that changes them does not count as reused.
_MESSAGE_PARAMS = ("tool_choice", "thinking", "context_management", "output_config", "output_format")


def _text(value: Any) -> bytes:
    # Compact, in the body's order: the provider renders in that order, so the digest must see it.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def _without_marks(value: Any) -> Any:
    """The value without ``cache_control`` at any level: a breakpoint is not content."""
    if isinstance(value, dict):
        return {k: _without_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_marks(v) for v in value]
    return value


def _as_blocks(content: Any) -> Any:
    # A string is one text block to the provider: the digest must not tell them apart.
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def prefix_digests(body: Body, tenant: str) -> tuple[str, list[str]]:
    """The digest of tools + system, and of tools + system + messages[:i+1] for every message i."""
    h = hashlib.blake2b(digest_size=16)
    h.update(_text([tenant, body.get("model")]))
    h.update(_text(_without_marks(body.get("tools"))))
    h.update(_text(_without_marks(_as_blocks(body.get("system")))))
    system = h.hexdigest()
    h.update(_text([body.get(k) for k in _MESSAGE_PARAMS]))
    history: list[str] = []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict):
            message = {**message, "content": _as_blocks(message.get("content"))}
        h.update(b"\x1e" + _text(_without_marks(message)))
        history.append(h.hexdigest())
    return system, history


def has_cache_control(body: Body) -> bool:
    """Whether the client placed any breakpoint: top level, tools, system, messages, nested blocks."""

    def marked(items: Any) -> bool:
        return isinstance(items, list) and any(isinstance(i, dict) and "cache_control" in i for i in items)

    if "cache_control" in body or marked(body.get("tools")) or marked(body.get("system")):
        return True
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        if marked(content):
            return True
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and marked(block.get("content")):
                return True
    return False


def _prefix_target(body: Body) -> tuple[str, dict[str, Any] | None] | None:
    """Where a tools + system breakpoint goes: (segment path, block to mark; None = the system string)."""
    system = body.get("system")
    if isinstance(system, str) and system:
        return "system", None
    if isinstance(system, list) and system:
        last = system[-1]
        if isinstance(last, dict) and last.get("type") == "text" and last.get("text"):
            return f"system[{len(system) - 1}]", last
        return None  # an image or empty block closes the system: leave it to the client
    tools = body.get("tools")
    if not system and isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        return f"tools[{len(tools) - 1}]", tools[-1]
    return None


class BreakpointPlanner:
    """Adds Anthropic breakpoints where reuse repays the write premium (see the module docstring)."""

    def __init__(self, engine: Engine, counter: ReuseCounter | None = None) -> None:
        self.engine = engine
        self.counter = counter or ReuseCounter()

    def apply(self, body: Body, tenant: str, now: float) -> bool:
        model = body.get("model")
        if not isinstance(model, str):
            return False
        rules = self.engine.table.lookup(model, "anthropic").cache
        if rules.mode != "breakpoints":
            return False
        ttl = rules.ttl_seconds
        system_key, history = prefix_digests(body, tenant)
        # Every request counts as a sighting, also those the client marked itself.
        system_count = self.counter.sight("s" + system_key, now, ttl)
        history_reused = any(self.counter.seen("h" + h, now, ttl) for h in history)
        if history:
            self.counter.sight("h" + history[-1], now, ttl)
        if has_cache_control(body):
            return False
        target = _prefix_target(body)
        want_prefix = system_count >= MIN_SIGHTINGS and target is not None
        if not (want_prefix or history_reused):
            return False
        try:
            prompt = parse_request(body, provider="anthropic")
        except RequestError:
            return False  # the provider will reject it anyway
        tp = self.engine.counter.tokenize(prompt)
        if not tp.spans:
            return False
        minimum = rules.min_tokens
        changed = False
        if want_prefix and target is not None:
            path, block = target
            index = next((i for i, s in enumerate(prompt.segments) if s.path == path), None)
            if index is not None and provider_count(tp.spans[index][1], tp.ratio) >= minimum:
                if block is None:
                    text = body["system"]
                    body["system"] = [{"type": "text", "text": text, "cache_control": dict(EPHEMERAL)}]
                else:
                    block["cache_control"] = dict(EPHEMERAL)
                changed = True
        if history_reused:
            # The automatic breakpoint covers the last block, but not the reply priming after it.
            start, end = tp.spans[-1]
            last = max(start, min(end, len(tp.tokens) - framing_for(prompt.provider, prompt.model).reply))
            if provider_count(last, tp.ratio) >= minimum:
                body["cache_control"] = dict(EPHEMERAL)
                changed = True
        return changed


# -- OpenAI ----------------------------------------------------------------------------------------


def cache_key_for(tenant: str, session: str | None = None) -> str:
    """A stable ``prompt_cache_key`` for a tenant (and session): a hash, never the tenant's text."""
    material = tenant if session is None else f"{tenant}\x1f{session}"
    digest = hashlib.blake2b(material.encode("utf-8", "surrogatepass"), digest_size=16, person=b"cw-pck")
    return "cw-" + digest.hexdigest()


def set_prompt_cache_key(body: Body, tenant: str, session: str | None) -> bool:
    if body.get("prompt_cache_key") is not None:
        return False  # the client's own routing choice wins
    body["prompt_cache_key"] = cache_key_for(tenant, session)
    return True


def request_stream_usage(body: Body) -> bool:
    """Asks a Chat stream for its usage chunk; True when the client had not (the relay strips it)."""
    if body.get("stream") is not True:
        return False
    options = body.get("stream_options")
    if options is None:
        body["stream_options"] = {"include_usage": True}
        return True
    if not isinstance(options, dict) or options.get("include_usage") is True:
        return False
    options["include_usage"] = True
    return True


# -- the combination -------------------------------------------------------------------------------


def _header(headers: Sequence[tuple[str, str]], name: str | None) -> str | None:
    if name is None:
        return None
    value = next((v.strip() for k, v in headers if k == name and v.strip()), None)
    return value[:256] if value else None


class Optimizer:
    """The optimize-mode rewrites of one request body, in place; returns the names of those applied.

    Only for the providers' own upstreams: an OpenAI-compatible server (``upstreams:``) may reject
    fields it does not know.
    """

    def __init__(self, engine: Engine, *, session_header: str | None = None) -> None:
        self.breakpoints = BreakpointPlanner(engine)
        self.session_header = session_header

    def apply(self, body: Body, flow: Flow) -> list[str]:
        applied: list[str] = []
        if flow.provider == "anthropic" and flow.upstream == "anthropic":
            if self.breakpoints.apply(body, flow.tenant, flow.timings.received_at):
                applied.append("cache-breakpoint")
        elif flow.provider in ("openai-chat", "openai-responses") and flow.upstream == "openai":
            session = _header(flow.request_headers, self.session_header)
            if set_prompt_cache_key(body, flow.tenant, session):
                applied.append("prompt-cache-key")
            if flow.provider == "openai-chat" and request_stream_usage(body):
                applied.append("stream-usage")
        return applied
