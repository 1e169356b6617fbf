"""Provider cache models: how much of one request a provider reads from cache, writes and bills uncached.

``predict`` is a pure function of the request (its Prompt and token stream), the model's CacheRules
(``rules/models.yaml``), what the prefix index matched, and the index's marks of earlier cache writes.
It does no I/O and runs on every request, so it touches each segment a constant number of times.

Two unit systems meet here. Stream positions index ``tp.tokens`` (the stream the index matches on);
provider units are what the provider bills and reports. They differ when the tokenizer is an estimate
(Claude: o200k × ratio). Minimums and granularities are provider facts, so they are applied in provider
units; breakpoints, marks and the read position are stream positions, because the caller feeds them back
into the index.

Modes (``CacheRules.mode``):

- ``prefix``: any earlier prefix is cached automatically, in ``granularity`` steps, once the
  prompt and the hit reach ``min_tokens`` (OpenAI before GPT-5.6, Mistral, DeepSeek 2024, Gemini).
- ``blocks`` / ``radix``: full blocks (pages) of ``granularity`` tokens; the last prompt token is
  always recomputed to get logits (vLLM, SGLang, generic engines).
- ``breakpoints``: entries are written only at breakpoints and read back only where an earlier
  request wrote one, within a lookback window (Anthropic; OpenAI GPT-5.6+).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Protocol

from .markers import MARKED
from .models import CacheRules
from .prompt import CacheTTL, Prompt, Segment

# Stream positions -> age (seconds) of a live earlier cache write of exactly tokens[:position].
MarkLookup = Callable[[Sequence[int]], Mapping[int, float]]

# DESIGN.md reason codes a cache model can explain by itself, most important first: a prefix below
# the minimum can never be cached, a missing breakpoint is a fix in the request, a too-far entry is a
# fix in breakpoint placement, and expiry is a matter of traffic timing.
LIMIT_ORDER: tuple[str, ...] = ("below-minimum", "no-breakpoint", "breakpoint-too-far", "expired")

# The request parameter (Prompt.params) that turns off OpenAI's implicit breakpoint on the latest
# message (``prompt_cache_options: {"mode": "explicit"}``, GPT-5.6+).
EXPLICIT_MODE_PARAM = "prompt_cache_options.mode"


class TokenStream(Protocol):
    """What the model reads from ``counting.TokenizedPrompt`` (structural, so either side can evolve)."""

    @property
    def tokens(self) -> Sequence[int]: ...
    @property
    def spans(self) -> tuple[tuple[int, int], ...]: ...
    @property
    def ratio(self) -> float: ...
    @property
    def count(self) -> int: ...


class PrefixMatch(Protocol):
    """What the model reads from ``index.Match``."""

    @property
    def common_prefix_tokens(self) -> int: ...
    @property
    def held_prefix_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the provider is predicted to bill for one request's input.

    Token counts are provider units and add up: ``cached + cache_write + uncached == tp.count``.
    ``cache_write_tokens`` includes ``cache_write_1h_tokens``. Positions are stream positions.
    """

    cached_tokens: int
    cache_write_tokens: int
    cache_write_1h_tokens: int
    uncached_tokens: int
    # Common prefix with a live earlier prompt, before minimum / granularity / breakpoint rules
    # (at least the cached amount: a live mark is itself proof of such a prompt).
    reusable_tokens: int
    # Reason codes (LIMIT_ORDER) explaining why cached_tokens < reusable_tokens.
    limits: tuple[str, ...]
    # Positions this request writes, with their TTL; the caller marks them in the index.
    write_positions: tuple[tuple[int, str], ...]
    # Position up to which this request reads from cache (0: none); the caller refreshes that entry.
    read_position: int
    # This request's breakpoints at or before the read, with their TTL: each is used again, so the
    # caller refreshes (or creates, at no charge) the entry there, as the provider does at every
    # breakpoint of a request ("refreshed ... each time the cached content is used").
    refresh_positions: tuple[tuple[int, str], ...] = ()

    @property
    def cache_write_5m_tokens(self) -> int:
        return self.cache_write_tokens - self.cache_write_1h_tokens


@dataclass(frozen=True, slots=True)
class _Units:
    """Stream position -> provider units: monotone, 0 at 0, and the whole stream is exactly ``count``.

    ``preamble``: provider units of hidden system content at the head of the stream, which count
    toward no cache minimum (``counting.TokenizedPrompt.preamble``).
    """

    n: int
    ratio: float
    count: int
    preamble: int = 0

    def countable(self, pos: int) -> int:
        """Provider units of ``tokens[:pos]`` that count toward a cache minimum."""
        return max(0, self.of(pos) - self.preamble)

    def of(self, pos: int) -> int:
        if pos <= 0:
            return 0
        if pos >= self.n:
            return self.count
        return min(self.count, round(pos * self.ratio))

    def position(self, units: int, limit: int) -> int:
        """The largest stream position <= ``limit`` whose prefix is at most ``units`` provider units."""
        limit = min(limit, self.n)
        if units <= 0 or limit <= 0:
            return 0
        pos = min(limit, int(units / self.ratio)) if self.ratio > 0 else limit
        # The estimate is off by at most a token or two either way (rounding); walk to the exact spot.
        while pos < limit and self.of(pos + 1) <= units:
            pos += 1
        while pos > 0 and self.of(pos) > units:
            pos -= 1
        return pos


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(value, high))


def _sorted_limits(found: set[str]) -> tuple[str, ...]:
    return tuple(code for code in LIMIT_ORDER if code in found)


# ---------------------------------------------------------------------------------------------------
# Breakpoints


def _cacheable(seg: Segment) -> bool:
    # Anthropic: thinking blocks and empty text blocks cannot carry the automatic breakpoint.
    if seg.kind == "thinking":
        return False
    return not (seg.kind in ("text", "message") and not seg.text and seg.fixed_tokens == 0)


def _auto_position(prompt: Prompt, tp: TokenStream) -> int | None:
    """Anthropic automatic caching: the end of the last cacheable block (walking back silently)."""
    for i in range(min(len(prompt.segments), len(tp.spans)) - 1, -1, -1):
        if _cacheable(prompt.segments[i]):
            return tp.spans[i][1]
    return None


def _message_ends(prompt: Prompt, tp: TokenStream) -> dict[int, int]:
    """message_index -> stream position at the end of that message, for user / tool / system messages.

    OpenAI's implicit breakpoint sits "near the latest user or tool message"; assistant output blocks
    cannot carry a breakpoint, so assistant messages are left out.
    """
    ends: dict[int, int] = {}
    for seg, (_, end) in zip(prompt.segments, tp.spans, strict=False):
        if seg.message_index is None or seg.role == "assistant":
            continue
        ends[seg.message_index] = max(end, ends.get(seg.message_index, 0))
    return ends


def _implicit_active(prompt: Prompt, rules: CacheRules) -> bool:
    return rules.implicit_breakpoint == "latest-message" and _cache_mode(prompt) != "explicit"


def _cache_mode(prompt: Prompt) -> str | None:
    """``prompt_cache_options.mode`` (GPT-5.6+); the adapters keep the options as canonical JSON."""
    if prompt.param("prompt_cache_options") is None:
        return prompt.param(EXPLICIT_MODE_PARAM)
    mode = (prompt.param_object("prompt_cache_options") or {}).get("mode")
    return mode if isinstance(mode, str) else None


def breakpoint_positions(prompt: Prompt, tp: TokenStream, rules: CacheRules) -> list[tuple[int, str]]:
    """Effective breakpoints as (stream position at the end of the marked segment, ttl), by position.

    Explicit ``cache_control`` markers first; then Anthropic automatic caching (``auto_cache``: the
    last cacheable block; a no-op when that block already carries a marker); then OpenAI's implicit
    breakpoint on the latest message (GPT-5.6+, unless the request asks for explicit mode).
    """
    marked: dict[int, CacheTTL] = {}
    segs, spans = prompt.segments, tp.spans
    for i in MARKED.of(prompt):
        if i >= len(spans):
            break
        control = segs[i].cache_control
        assert control is not None
        marked.setdefault(spans[i][1], control.ttl)
    if prompt.auto_cache is not None:
        auto = _auto_position(prompt, tp)
        if auto is not None:
            marked.setdefault(auto, prompt.auto_cache.ttl)
    if _implicit_active(prompt, rules):
        ends = _message_ends(prompt, tp)
        # No message at all (only instructions / tools): the prompt's end is the latest content.
        latest = ends[max(ends)] if ends else (tp.spans[-1][1] if tp.spans else 0)
        marked.setdefault(latest, "5m")
    return sorted((pos, ttl) for pos, ttl in marked.items() if pos > 0)


_END = itemgetter(1)


def _boundaries(tp: TokenStream) -> list[int]:
    """Block boundaries (segment ends) in stream positions, ascending, without repeats. At C speed
    (they are as many as the segments): sorted (a framing correction may end a segment before the
    one ahead of it; otherwise they are in order already, which the sort only checks), deduplicated
    in order, and cut to the positions inside the stream."""
    ends = list(dict.fromkeys(sorted(map(_END, tp.spans))))
    return ends[bisect_right(ends, 0) : bisect_right(ends, len(tp.tokens))]


def _read_windows(
    prompt: Prompt, tp: TokenStream, rules: CacheRules, bps: list[tuple[int, str]], bounds: list[int]
) -> list[list[int]]:
    """For each breakpoint, the positions a read checks for an earlier write (``bounds``: the
    prompt's ``_boundaries``)."""
    if not bps:
        return []
    lookback = max(1, rules.lookback)
    if rules.lookback_unit == "breakpoints":
        # OpenAI GPT-5.6+: the latest `lookback` breakpoints of the conversation, no block limit.
        # Earlier turns' implicit breakpoints sat at the ends of their latest messages, so every
        # user / tool message end is a breakpoint the service may have written.
        points = {pos for pos, _ in bps}
        if _implicit_active(prompt, rules):
            points.update(_message_ends(prompt, tp).values())
        return [sorted(points)[-lookback:]]
    # Anthropic: walk back one block at a time from each breakpoint, counting it as the first.
    windows = []
    for pos, _ in bps:
        below = bisect_left(bounds, pos)
        windows.append([pos, *bounds[max(0, below - (lookback - 1)) : below]])
    return windows


def _predict_breakpoints(
    prompt: Prompt, tp: TokenStream, rules: CacheRules, match: PrefixMatch, marks: MarkLookup, units: _Units
) -> Prediction:
    live = _clamp(match.common_prefix_tokens, 0, units.n)
    bps = breakpoint_positions(prompt, tp, rules)
    bounds = _boundaries(tp)
    windows = _read_windows(prompt, tp, rules, bps, bounds)
    in_window = {p for window in windows for p in window}
    found = marks(sorted(in_window)) if in_window else {}

    def readable(pos: int) -> bool:
        # Prefixes below the minimum are never written, so never read either.
        return pos in found and units.countable(pos) >= rules.min_tokens

    hit = max((p for p in in_window if readable(p)), default=0)
    last_bp = bps[-1][0] if bps else 0

    def too_far() -> bool:
        # "Too far" is an entry some breakpoint's lookback walks past: at a block boundary inside
        # the reusable prefix, past the read and at or before a breakpoint (an entry past the last
        # breakpoint, which moved to an earlier block, is covered by none: "no-breakpoint"). No
        # window asked about those boundaries (a window's readable entries are at or before the
        # read), so they are asked for here, only when a miss needs its reason: a request that
        # reads all it could reuse never asks the index about its whole history.
        above = bounds[bisect_right(bounds, hit) : bisect_right(bounds, min(live, last_bp))]
        asked = [b for b in above if b not in in_window and units.countable(b) >= rules.min_tokens]
        beyond = marks(asked) if asked else {}
        return any(b in beyond for b in asked)

    newest = bps[-rules.max_breakpoints :] if rules.max_breakpoints > 0 else bps
    cacheable = [(p, ttl) for p, ttl in newest if units.countable(p) >= rules.min_tokens]
    writes = tuple((p, ttl) for p, ttl in cacheable if p > hit)
    refreshes = tuple((p, ttl) for p, ttl in cacheable if p <= hit)

    cached = units.of(hit)
    write = units.of(writes[-1][0]) - cached if writes else 0
    # 1h entries must come before 5m ones (Anthropic), so the 1h part runs from the read position
    # to the last 1h breakpoint written.
    last_1h = max((p for p, ttl in writes if ttl == "1h"), default=0)
    write_1h = units.of(last_1h) - cached if last_1h else 0

    reusable = max(units.of(live), cached)
    limits: set[str] = set()
    if cached < reusable:
        covered = bisect_right(bounds, live)
        last_bound = bounds[covered - 1] if covered else 0
        if units.countable(live) < rules.min_tokens:
            limits.add("below-minimum")
        elif not bps:
            limits.add("no-breakpoint")
        elif too_far():
            limits.add("breakpoint-too-far")
        elif hit < last_bound:
            # Reusable whole blocks that no earlier request wrote an entry for.
            limits.add("no-breakpoint")
    if match.held_prefix_tokens > match.common_prefix_tokens:
        limits.add("expired")
    return Prediction(
        cached_tokens=cached,
        cache_write_tokens=write,
        cache_write_1h_tokens=write_1h,
        uncached_tokens=units.count - cached - write,
        reusable_tokens=reusable,
        limits=_sorted_limits(limits),
        write_positions=writes,
        read_position=hit,
        refresh_positions=refreshes,
    )


# ---------------------------------------------------------------------------------------------------
# Automatic prefix caching (prefix, blocks, radix)


def _predict_prefix(rules: CacheRules, match: PrefixMatch, units: _Units) -> Prediction:
    live = _clamp(match.common_prefix_tokens, 0, units.n)
    reusable = units.of(live)
    # Engines recompute the last prompt token to get logits; OpenAI-style APIs may serve it all.
    keep_last = rules.last_token_uncached or rules.mode in ("blocks", "radix")
    cap = max(0, units.count - 1) if keep_last else units.count
    step = max(1, rules.granularity)
    cached = min(reusable, cap) // step * step
    limits: set[str] = set()
    # The shared prefix and the prompt must reach the minimum without the provider's hidden system
    # content (none but OpenAI's harmony preamble); the cached blocks, once read, include it.
    shared = min(reusable, cap) - units.preamble
    prompt = units.count - units.preamble
    if rules.min_tokens > 0 and min(cached, shared, prompt) < rules.min_tokens:
        if reusable > 0:
            limits.add("below-minimum")
        cached = 0
    if match.held_prefix_tokens > match.common_prefix_tokens:
        limits.add("expired")
    # No writes are billed in these modes and the index holds every prefix, so nothing to mark.
    return Prediction(
        cached_tokens=cached,
        cache_write_tokens=0,
        cache_write_1h_tokens=0,
        uncached_tokens=units.count - cached,
        reusable_tokens=reusable,
        limits=_sorted_limits(limits),
        write_positions=(),
        read_position=units.position(cached, live),
    )


_WALL_CLOCK = 1e9  # 2001-09-09, epoch seconds


@dataclass(frozen=True, slots=True)
class _NoMatch:
    common_prefix_tokens: int = 0
    held_prefix_tokens: int = 0


def _no_marks(_: Sequence[int]) -> Mapping[int, float]:
    return {}


def predict(
    prompt: Prompt,
    tp: TokenStream,
    rules: CacheRules,
    match: PrefixMatch,
    marks: MarkLookup,
    *,
    now: float | None = None,
) -> Prediction:
    """Predict cached / cache-write / uncached input tokens for one request (pure, no I/O).

    ``now`` (epoch seconds) is the request's time: before the provider's caching start date
    (``CacheRules.since``) nothing is read, whatever an earlier request shared.
    """
    units = _Units(n=len(tp.tokens), ratio=tp.ratio, count=max(0, tp.count))
    # Stream objects without a preamble (test doubles, other tokenizers) have none.
    head: int = getattr(tp, "preamble", 0)
    if head:
        units = replace(units, preamble=units.of(head))
    # A clock before 2001 is no wall clock (a replay of a log without timestamps counts from 0).
    if now is not None and now >= _WALL_CLOCK and rules.since and now < rules.since_epoch:
        match, marks = _NoMatch(), _no_marks
    if rules.mode == "breakpoints":
        return _predict_breakpoints(prompt, tp, rules, match, marks, units)
    return _predict_prefix(rules, match, units)
