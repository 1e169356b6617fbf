"""The emulator's reference prompt cache: what a provider would read, write and bill for one request.

This is the REFERENCE model the proxy's predictions are checked against, so it is written to be
obviously right rather than fast, and independently of ``proxy/engine/index/`` and
``proxy/engine/cache_model.py``:

- ``prefix`` / ``blocks`` / ``radix`` modes (OpenAI before GPT-5.6, vLLM, SGLang, ...): every
  request's token stream is kept as a plain tuple with the time it was last sent; a new request
  reads the longest common prefix with any live stored stream (brute force), rounded down to
  ``granularity`` and zero below ``min_tokens``. A prefix stays alive while some stored stream that
  contains it was sent less than ``ttl_seconds`` ago, which is what "TTL refreshed on use" means
  for an automatic prefix cache.
- ``breakpoints`` mode (Anthropic; OpenAI GPT-5.6+): entries exist only where a request placed a
  breakpoint. An entry is keyed by a cumulative hash of the blocks (segments) up to and including
  its block; reads look back from each breakpoint (Anthropic: ``lookback`` block positions counting
  the breakpoint itself; OpenAI: the latest ``lookback`` breakpoints, exact match only).

Sizes are reported in provider units: a stream position ``n`` is ``round(n * ratio)`` tokens, the
total is ``TokenizedPrompt.count``, and ``uncached`` is whatever the total leaves after reads and
writes, so the four numbers always add up to the count the emulator reports.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from cachewarden.proxy.engine.counting import TokenizedPrompt, framing_for, provider_count
from cachewarden.proxy.engine.models import CacheRules
from cachewarden.proxy.engine.prompt import CacheControl, Prompt, Segment

# OpenAI ``prompt_cache_retention: "24h"`` (extended retention): entries live up to 24 hours.
EXTENDED_RETENTION_SECONDS = 86_400.0
# Anthropic's 1-hour TTL when the profile names no longer maximum.
DEFAULT_LONG_TTL_SECONDS = 3_600.0
# Bound on stored streams per scope in prefix mode (least recently sent dropped first).
MAX_STREAMS_PER_SCOPE = 512
# Bound on breakpoint entries per scope.
MAX_ENTRIES_PER_SCOPE = 20_000

# Anthropic parameters that invalidate the message cache but keep tools and system (caching doc §2.4:
# tool choice, thinking; the other prompt-affecting parameters of the diagnostics list are treated
# the same). Everything else in Prompt.params (speed, web search, citations) also invalidates system.
_MESSAGE_LEVEL_PARAMS = frozenset(
    {"tool_choice", "thinking", "context_management", "output_config", "output_format"}
)
# OpenAI parameters that choose the cache policy instead of changing the rendered prompt.
_OPENAI_POLICY_PARAMS = frozenset({"prompt_cache_retention", "prompt_cache_options"})


class CacheRequestError(ValueError):
    """A request the provider rejects for its cache markers (too many breakpoints, TTL order)."""


@dataclass(frozen=True, slots=True)
class ReferenceUsage:
    """Input tokens of one request by how the provider bills them, in provider units.

    ``write_5m`` holds writes at the short / default TTL (Anthropic 5 minutes, OpenAI GPT-5.6's
    ``30m``), ``write_1h`` Anthropic's 1-hour writes. ``total`` is the count the provider reports.
    """

    cached: int
    write_5m: int
    write_1h: int
    uncached: int

    @property
    def writes(self) -> int:
        return self.write_5m + self.write_1h

    @property
    def total(self) -> int:
        return self.cached + self.write_5m + self.write_1h + self.uncached


@dataclass(slots=True)
class _Stream:
    tokens: tuple[int, ...]
    last_used: float
    ttl: float


@dataclass(slots=True)
class _Entry:
    ttl: float
    last_used: float
    size: int  # provider tokens of the prefix it holds, as written


def _alive(last_used: float, ttl: float, now: float) -> bool:
    """An entry used at t is readable until t + ttl (exclusive); ttl 0 means no expiry (LRU engines)."""
    return ttl <= 0 or now - last_used < ttl


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (binary search on slice equality: C speed, obviously right)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class ReferenceCache:
    """Per-scope prefix caches; ``process`` answers and updates for one request. Thread-safe."""

    def __init__(self) -> None:
        self._streams: dict[str, list[_Stream]] = {}
        self._entries: dict[str, dict[bytes, _Entry]] = {}
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._streams.clear()
            self._entries.clear()

    def process(
        self, key: str, prompt: Prompt, tokenized: TokenizedPrompt, rules: CacheRules, now: float
    ) -> ReferenceUsage:
        """Usage of ``prompt`` sent with API key ``key`` at time ``now``; records what it writes.

        Raises CacheRequestError for breakpoint layouts the provider rejects with a 400.
        """
        scope = self._scope(key, prompt)
        with self._lock:
            if rules.mode == "breakpoints":
                return self._breakpoints(scope, prompt, tokenized, rules, now)
            return self._prefix(scope, prompt, tokenized, rules, now)

    # -- scope ----------------------------------------------------------------------------------
    @staticmethod
    def _scope(key: str, prompt: Prompt) -> str:
        """Caches are per API key (organisation) and per model; OpenAI also routes on prompt_cache_key."""
        family = "anthropic" if prompt.provider == "anthropic" else "openai"
        parts = [family, key, prompt.model]
        if family == "openai":
            parts.append(prompt.prompt_cache_key or "")
            # Reasoning effort and the like change the whole rendered prompt: a separate cache.
            parts += [f"{k}={v}" for k, v in prompt.params if k not in _OPENAI_POLICY_PARAMS]
        return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()

    # -- automatic prefix caching ---------------------------------------------------------------
    def _prefix(
        self, scope: str, prompt: Prompt, tp: TokenizedPrompt, rules: CacheRules, now: float
    ) -> ReferenceUsage:
        tokens = tuple(tp.tokens)
        streams = [s for s in self._streams.get(scope, []) if _alive(s.last_used, s.ttl, now)]
        usable = len(tokens) - 1 if rules.last_token_uncached and tokens else len(tokens)
        best = max((common_prefix(s.tokens, tokens) for s in streams), default=0)
        cached = provider_count(min(best, usable), tp.ratio)
        cached -= cached % rules.granularity
        if cached < rules.min_tokens:
            cached = 0
        cached = min(cached, tp.count)
        # Store this request's stream (an identical one is refreshed instead of duplicated).
        ttl = _openai_ttl(prompt, rules)
        streams = [s for s in streams if s.tokens != tokens]
        streams.append(_Stream(tokens, now, ttl))
        if len(streams) > MAX_STREAMS_PER_SCOPE:
            streams.sort(key=lambda s: s.last_used)
            del streams[: len(streams) - MAX_STREAMS_PER_SCOPE]
        self._streams[scope] = streams
        return ReferenceUsage(cached=cached, write_5m=0, write_1h=0, uncached=tp.count - cached)

    # -- breakpoint caching ---------------------------------------------------------------------
    def _breakpoints(
        self, scope: str, prompt: Prompt, tp: TokenizedPrompt, rules: CacheRules, now: float
    ) -> ReferenceUsage:
        segments = prompt.segments
        if not segments:
            return ReferenceUsage(0, 0, 0, tp.count)
        ends = _block_ends(prompt, tp)
        hashes = _block_hashes(prompt)
        entries = self._entries.setdefault(scope, {})
        for h in [h for h, e in entries.items() if not _alive(e.last_used, e.ttl, now)]:
            del entries[h]

        if rules.lookback_unit == "breakpoints":
            writes, candidates = _openai_breakpoints(prompt, rules)
        else:
            writes = _anthropic_breakpoints(prompt, rules)
            candidates = sorted({q for b, _ in writes for q in range(max(0, b - rules.lookback + 1), b + 1)})

        # The read: the furthest position in any breakpoint's window holding a live entry.
        hit = max((q for q in candidates if hashes[q] in entries), default=-1)
        read = 0
        if hit >= 0:
            entry = entries[hashes[hit]]
            entry.last_used = now  # a hit refreshes the entry it read
            # A read returns what was written. (The same blocks can count a framing token more or
            # less here, e.g. a message's end marker when the block closed the message back then.)
            read = min(entry.size, tp.count)

        write_5m = write_1h = 0
        done = read
        for b, ttl_name in sorted(writes):
            size = min(provider_count(ends[b], tp.ratio), tp.count)
            if size < rules.min_tokens:
                continue  # too short to cache: silently not written (no error, no charge)
            ttl = _ttl_seconds(ttl_name, rules, prompt)
            held = entries.get(hashes[b])
            if held is None:
                entries[hashes[b]] = _Entry(ttl=ttl, last_used=now, size=size)
            else:
                held.last_used, held.ttl = now, max(held.ttl, ttl)
            if b > hit and size > done:
                # The tokens between the last position already in cache and this breakpoint are
                # written at this breakpoint's TTL.
                if ttl_name == "1h":
                    write_1h += size - done
                else:
                    write_5m += size - done
                done = size
        if len(entries) > MAX_ENTRIES_PER_SCOPE:
            for h, _ in sorted(entries.items(), key=lambda kv: kv[1].last_used)[
                : len(entries) - MAX_ENTRIES_PER_SCOPE
            ]:
                del entries[h]
        return ReferenceUsage(read, write_5m, write_1h, tp.count - read - write_5m - write_1h)


def _openai_ttl(prompt: Prompt, rules: CacheRules) -> float:
    if prompt.param("prompt_cache_retention") == "24h":
        return max(rules.ttl_seconds, EXTENDED_RETENTION_SECONDS)
    return rules.ttl_seconds


def _ttl_seconds(ttl_name: str, rules: CacheRules, prompt: Prompt) -> float:
    if prompt.provider != "anthropic":
        return rules.ttl_seconds
    if ttl_name == "1h":
        return (
            max(rules.max_ttl_seconds, rules.ttl_seconds)
            if rules.max_ttl_seconds
            else DEFAULT_LONG_TTL_SECONDS
        )
    return rules.ttl_seconds


def _block_ends(prompt: Prompt, tp: TokenizedPrompt) -> list[int]:
    """Stream position after each block, never counting the reply priming at the end of the stream.

    The priming ("assistant turn starts here") is not part of any block: a breakpoint on the last
    block of this turn must cover the same tokens as that block does in the next turn. (Whether the
    counter puts the priming in the last span or after it, the last block ends before it.)
    """
    ends = [end for _, end in tp.spans]
    priming = framing_for(prompt.provider, prompt.model).reply
    if ends:
        ends[-1] = max(tp.spans[-1][0], min(ends[-1], len(tp.tokens) - priming))
    return ends


def _block_hashes(prompt: Prompt) -> list[bytes]:
    """Cumulative hash per block: equal only when every block up to and including it is equal."""
    salt_at, salt = _salt(prompt)
    h = hashlib.blake2b(digest_size=16)
    out: list[bytes] = []
    for i, seg in enumerate(prompt.segments):
        if i == salt_at and salt:
            h.update(b"\x00params\x00" + salt.encode())
        h.update(f"\x1e{seg.kind}\x1f{seg.role}\x1f{seg.digest}".encode())
        out.append(h.copy().digest())
    return out


def _salt(prompt: Prompt) -> tuple[int, str]:
    """Where cache-affecting parameters enter the hash chain, and their text."""
    segs = prompt.segments
    if prompt.provider != "anthropic":
        # OpenAI: parameters are part of the scope already (they change the whole prompt).
        return -1, ""
    first_message = next((i for i, s in enumerate(segs) if s.message_index is not None), len(segs))
    after_tools = next((i for i, s in enumerate(segs) if s.kind != "tool"), len(segs))
    system_level = [(k, v) for k, v in prompt.params if k not in _MESSAGE_LEVEL_PARAMS]
    message_level = [(k, v) for k, v in prompt.params if k in _MESSAGE_LEVEL_PARAMS]
    if system_level:
        # Both kinds together: one salt at the earlier point still separates every combination.
        return after_tools, json.dumps(system_level + message_level)
    return (first_message, json.dumps(message_level)) if message_level else (-1, "")


def _eligible(seg: Segment) -> bool:
    """Can this block carry an automatic breakpoint? (Thinking and empty text blocks cannot.)"""
    if seg.kind == "thinking":
        return False
    return not (seg.kind in ("text", "message") and not seg.text and not seg.fixed_tokens)


def _anthropic_breakpoints(prompt: Prompt, rules: CacheRules) -> list[tuple[int, str]]:
    """Breakpoints (block index, ttl name), explicit plus automatic; raises for layouts the API rejects."""
    marks: dict[int, CacheControl] = {
        i: s.cache_control for i, s in enumerate(prompt.segments) if s.cache_control is not None
    }
    if len(marks) > rules.max_breakpoints:
        raise CacheRequestError(
            f"A maximum of {rules.max_breakpoints} blocks with cache_control may be provided. "
            f"Found {len(marks)}."
        )
    auto = prompt.auto_cache
    if auto is not None:
        target = next(
            (i for i in reversed(range(len(prompt.segments))) if _eligible(prompt.segments[i])), None
        )
        if target is not None:
            existing = marks.get(target)
            if existing is not None and existing.ttl != auto.ttl:
                raise CacheRequestError(
                    "cache_control: the last block already has a cache_control with a different ttl "
                    "than the top-level cache_control"
                )
            if existing is None:
                if len(marks) >= rules.max_breakpoints:
                    raise CacheRequestError(
                        f"A maximum of {rules.max_breakpoints} blocks with cache_control may be provided: "
                        "no slot is left for the top-level (automatic) cache_control."
                    )
                marks[target] = auto
    seen_short = False
    for i in sorted(marks):
        if marks[i].ttl == "5m":
            seen_short = True
        elif seen_short:
            raise CacheRequestError(
                "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
            )
    return [(i, cc.ttl) for i, cc in sorted(marks.items())]


def _openai_breakpoints(prompt: Prompt, rules: CacheRules) -> tuple[list[tuple[int, str]], list[int]]:
    """GPT-5.6+: (breakpoints this request may write, positions it may read).

    Writes: the implicit breakpoint on the latest message (unless ``prompt_cache_options.mode`` is
    ``explicit``) plus the latest explicit ones, ``max_breakpoints`` in all. Reads: the latest
    ``lookback`` breakpoints of the conversation, exact match only. The implicit breakpoints of
    earlier turns sat on what was then the latest user / tool message, so those message ends are
    read positions too (this is how a growing conversation keeps hitting in implicit mode).
    """
    segs = prompt.segments
    explicit = [i for i, s in enumerate(segs) if s.cache_control is not None]
    implicit_mode = rules.implicit_breakpoint is not None and _openai_cache_mode(prompt) != "explicit"
    last_message = max((s.message_index for s in segs if s.message_index is not None), default=None)
    message_ends: list[int] = []
    for i, s in enumerate(segs):
        closes = i == len(segs) - 1 or segs[i + 1].message_index != s.message_index
        if s.message_index is not None and closes and s.role in ("user", "tool"):
            message_ends.append(i)
    implicit: int | None = None
    if implicit_mode and last_message is not None:
        implicit = max(i for i, s in enumerate(segs) if s.message_index == last_message)
    slots = rules.max_breakpoints - (1 if implicit is not None else 0)
    latest = explicit[-slots:] if slots > 0 else []
    writes = [(i, "5m") for i in latest]
    if implicit is not None and implicit not in latest:
        writes.append((implicit, "5m"))
    reads = set(explicit)
    if implicit_mode:
        reads.update(message_ends)
        if implicit is not None:
            reads.add(implicit)
    return writes, sorted(reads)[-rules.lookback :]


def _openai_cache_mode(prompt: Prompt) -> str | None:
    mode = (prompt.param_object("prompt_cache_options") or {}).get("mode")
    return mode if isinstance(mode, str) else None
