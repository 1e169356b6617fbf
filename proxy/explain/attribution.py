"""Miss attribution: why the cache does not reach further into a request than it does, and what it costs.

Two entry points:

- ``attribute(analysis, prices)`` explains one request the Engine analysed: ``cold`` when nothing
  earlier was there, the content / model / parameter changes against the earlier request it best
  matches (``analysis.previous``), ``expired``, and the cache model's own limits
  (``below-minimum``, ``no-breakpoint``, ``breakpoint-too-far``).
- ``attribute_pair(previous, previous_tp, next, next_tp)`` compares two prompts only (the content,
  model and parameter reasons); replay and the proxy can call it on any pair.

The reasons come from one module per family, and this one puts them together and costs them:

- ``structure``: the area-by-area comparison (``Pair``) and the tools and system / schema blocks;
- ``history``: the messages (history-edited, history-truncated);
- ``model_params``: model-changed, params-changed and images;
- ``values``: a segment changed in place, classified region by region (timestamp, unique-id,
  key-order, whitespace);
- ``cache_limits``: cold, expired and the cache model's limits.

Tokens lost. Each reason sits at a position of the previous prompt's token stream: where, because
of it, the cache stops matching. The previous prompt's tokens that the next one still contains
("shared": the common prefix, segments that reappear later, the unchanged head and tail of a segment
edited in place) are what a cache could have served. A reason's ``tokens_lost`` is the shared
tokens from its position to the position of the next reason (or to the end): what the next request
would have reused had this change alone not happened. The reasons of one pair therefore add up to
the shared tokens past the first break and never count a token twice, which keeps the
per-reason metrics and replay totals additive. Stream tokens are converted to provider units with
the tokenizer ratio; dollars are the read discount on those tokens (``PriceTable.missed_savings``).
The model's limits (below-minimum, no-breakpoint, breakpoint-too-far) cost the reusable tokens
that were not cached, and ``expired`` the prefix that was held but older than the TTL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cachewarden.proxy.engine.cache_model import TokenStream
from cachewarden.proxy.engine.prompt import Prompt

from .cache_limits import COLD_DETAIL, expired_prefix, folds_into_change, is_cold, limit_detail, model_limits
from .formats import comparable, rendering_divergence
from .history import history_findings
from .model_params import image_finding, model_and_param_findings
from .structure import Finding, Pair, block_findings, next_index, tool_findings
from .textdiff import common_prefix
from .values import json_same, shared_chars, text_regions

if TYPE_CHECKING:
    from cachewarden.proxy.engine.engine import Analysis
    from cachewarden.proxy.engine.pricing import PriceTable

# What other modules and the tests import from here: json_same, shared_chars and text_regions live
# in ``values`` and are re-exported so that callers need not know the split.
__all__ = [
    "FIXES",
    "Divergence",
    "Reason",
    "attribute",
    "attribute_pair",
    "find_divergence",
    "json_same",
    "shared_chars",
    "text_regions",
]

# One line per reason code: what to do about it (the diff text format, replay and the docs).
FIXES: dict[str, str] = {
    "cold": "nothing to do: the first request of a scope always writes the cache",
    "expired": "keep the prefix warm, or use a longer TTL (1h, extended retention)",
    "model-changed": "keep one model per conversation: the cache is per model",
    "params-changed": "keep tool_choice, thinking, reasoning effort and images stable within a conversation",
    "tools-changed": "keep the tool list fixed; add new tools at the end and change definitions rarely",
    "tools-reordered": "send tools in a fixed order (for example sorted by name)",
    "key-order": "serialise JSON deterministically (sorted keys, fixed separators and escaping)",
    "whitespace": "normalise whitespace and line endings in templates and inputs",
    "timestamp": "move the timestamp after the last cached block or drop its seconds",
    "unique-id": "move per-request ids out of the prompt (into metadata) or after the last cached block",
    "system-changed": "keep the system prompt fixed; put per-request context in the latest message",
    "history-edited": "append to the conversation; never rewrite, reorder or remove earlier turns",
    "history-truncated": "trim or compact rarely and in large steps, so each new prefix is reused many times",
    "below-minimum": "grow the stable prefix above the model's minimum cacheable length",
    "no-breakpoint": "add cache_control on the last stable block (or top-level automatic caching)",
    "breakpoint-too-far": "add a breakpoint within the 20-block lookback (for example on the latest turn)",
    "content-changed": "keep the cached part of the prompt byte-identical between requests",
    "unexplained": "nothing in the request: the provider evicted the entry or routed to another machine",
}


@dataclass(frozen=True, slots=True)
class Reason:
    """One explained cache miss: a DESIGN.md reason code, where it is, and what it costs."""

    code: str
    segment: str | None  # segment path (the next request's, or the previous one's for a removal)
    offset: int | None  # character offset of the change in that segment's text
    tokens_lost: int  # provider tokens the next request would have reused without this change
    usd_lost: float
    detail: str


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where two prompts first differ: segments before ``index`` are equal in both."""

    index: int
    segment: str  # the next prompt's path at ``index`` (the previous one's when next has none)
    offset: int  # first differing character in that segment's text (0 when added, removed or binary)
    previous_offset: int  # the same position in the previous segment's text (equal to ``offset``)


# ---------------------------------------------------------------------------------------------------
# Divergence


def find_divergence(
    previous: Prompt,
    next: Prompt,
    previous_tp: TokenStream | None = None,
    next_tp: TokenStream | None = None,
) -> Divergence | None:
    """The first segment (in cache order) whose content or presence differs; None when one prompt's
    segments are a prefix of the other's (an appended turn, a moved breakpoint, an identical request).

    With both token streams, two request formats of one provider (Chat and Responses) are compared
    on what they render (``formats.comparable``).
    """
    rendered = None
    if previous_tp is not None and next_tp is not None:
        rendered = rendering_divergence(previous, previous_tp, next, next_tp)
        previous, next = comparable(previous, previous_tp, next, next_tp)
    prev, cur = previous.segments, next.segments
    n = min(len(prev), len(cur))
    index = next_index(prev, cur)
    if rendered is not None and rendered.index < min(index, n):
        # Same content, rendered differently by the two endpoints from this segment on.
        path = cur[rendered.index].path if rendered.index < len(cur) else prev[rendered.index].path
        return Divergence(index=rendered.index, segment=path, offset=0, previous_offset=0)
    if index >= n:
        return None
    a, b = prev[index], cur[index]
    offset = 0
    if a.kind == b.kind and a.role == b.role:
        offset = common_prefix(a.text, b.text)
    return Divergence(index=index, segment=b.path, offset=offset, previous_offset=offset)


# ---------------------------------------------------------------------------------------------------
# Costing


def _shared_intervals(pair: Pair, d: int) -> list[tuple[int, int]]:
    """Previous-stream intervals the next prompt still contains (see the module doc)."""
    prev, cur = pair.prev.segments, pair.cur.segments
    spans = pair.ptp.spans
    out: list[tuple[int, int]] = []
    if d > 0:
        out.append((0, spans[d - 1][1] if d - 1 < len(spans) else pair.n_prev))
    remaining = Counter(s.digest for s in cur[d:])
    by_path = {s.path: s for s in cur[d:]}
    for i in range(d, min(len(prev), len(spans))):
        seg = prev[i]
        s, e = spans[i]
        if remaining[seg.digest] > 0:
            remaining[seg.digest] -= 1
            out.append((s, e))
            continue
        other = by_path.get(seg.path)
        n = len(seg.text)
        if other is None or other.kind != seg.kind or n == 0:
            continue
        out.extend(
            (s + (e - s) * lo // n, s + (e - s) * hi // n) for lo, hi in shared_chars(seg.text, other.text)
        )
    return out


def _measure(intervals: Sequence[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


def _units(stream_tokens: int, ratio: float) -> int:
    return stream_tokens if ratio == 1.0 else round(stream_tokens * ratio)


def _cost(
    findings: Sequence[Finding], shared: Sequence[tuple[int, int]], end: int, ratio: float
) -> list[int]:
    """Stream tokens lost per finding: shared tokens from its position to the next finding's."""
    order = sorted(range(len(findings)), key=lambda k: (findings[k].position, k))
    lost = [0] * len(findings)
    positions = sorted({f.position for f in findings})
    bounds = dict(zip(positions, [*positions[1:], end], strict=True))
    charged: set[int] = set()
    for k in order:
        pos = findings[k].position
        if pos in charged:
            continue  # the first finding at a position carries its interval
        charged.add(pos)
        lost[k] = _units(_measure(shared, pos, bounds[pos]), ratio)
    return lost


def _merge(findings: Sequence[Finding], lost: Sequence[int]) -> list[tuple[Finding, int]]:
    """One reason per code: the first occurrence, with the tokens of all and a count in the detail."""
    first: dict[str, int] = {}
    total: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for k, f in enumerate(findings):
        first.setdefault(f.code, k)
        total[f.code] += lost[k]
        count[f.code] += 1
    out = []
    for code, k in first.items():
        f = findings[k]
        more = count[code] - 1
        detail = f.detail + (f" (and {more} more like it)" if more else "")
        out.append((Finding(f.code, f.segment, f.offset, f.position, detail), total[code]))
    return out


def _priced(prices: PriceTable | None, prompt: Prompt, tokens: int) -> float:
    if prices is None or tokens <= 0:
        return 0.0
    return prices.missed_savings(prompt.model, prompt.provider, tokens)


# ---------------------------------------------------------------------------------------------------
# Entry points


def _findings(pair: Pair) -> list[Finding]:
    """Every content / model / parameter finding of a pair, the one at the divergence first."""
    images = image_finding(pair)
    content: list[Finding] = []
    if find_divergence(pair.prev, pair.cur) is not None:
        # One prompt's segments a prefix of the other's: an extension, whatever area it grew in.
        content += tool_findings(pair)
        content += block_findings(pair, "schema", "content-changed", "output schema")
        content += block_findings(pair, "system", "system-changed", "system")
        content += history_findings(pair, images_explained=images is not None)
    others = model_and_param_findings(pair)
    if images is not None:
        params = next_match(others, lambda f: f.code == "params-changed")
        if params is None:
            others.append(images)
        else:
            merged = Finding(
                params.code,
                params.segment,
                params.offset,
                min(params.position, images.position),
                f"{params.detail}; {images.detail}",
            )
            others = [merged if f is params else f for f in others]
    everything = content + others
    rendered = rendering_divergence(pair.prev, pair.ptp, pair.cur, pair.ntp)
    if rendered is not None and not any(f.position <= rendered.position for f in everything):
        # Chat vs Responses: the one real difference is how the endpoints render the same content.
        segment = pair.cur.segments[rendered.index] if rendered.index < len(pair.cur.segments) else None
        path = segment.path if segment is not None else pair.prev.segments[rendered.index].path
        everything.insert(0, Finding("content-changed", path, 0, rendered.position, rendered.detail))
    if not everything:
        return []
    by_position = sorted(everything, key=lambda f: f.position)
    div = find_divergence(pair.prev, pair.cur)
    primary: Finding | None = None
    if div is not None:
        # The reason at the divergence point: the first one found on the diverging segment.
        at = div.segment
        primary = next_match(everything, lambda f: f.segment == at)
        if primary is None and content:
            primary = content[0]
    if primary is None:
        primary = by_position[0]
    elif div is not None and primary.segment == div.segment and primary.offset == 0 and div.offset:
        # A structural finding (a tool moved in) sits where the texts first differ, like the divergence.
        fixed = Finding(primary.code, primary.segment, div.offset, primary.position, primary.detail)
        by_position = [fixed if f is primary else f for f in by_position]
        primary = fixed
    return [primary, *(f for f in by_position if f is not primary)]


def next_match(items: Sequence[Finding], test: Callable[[Finding], bool]) -> Finding | None:
    for item in items:
        if test(item):
            return item
    return None


@dataclass(frozen=True, slots=True)
class _PairResult:
    previous: Prompt
    reasons: list[Reason]
    first_position: int  # previous-stream position of the earliest reason
    divergence_index: int


def _explain_pair(
    previous: Prompt, previous_tp: TokenStream, next: Prompt, next_tp: TokenStream, prices: PriceTable | None
) -> _PairResult:
    previous_c, next_c = comparable(previous, previous_tp, next, next_tp)
    pair = Pair(previous_c, previous_tp, next_c, next_tp)
    d = next_index(previous_c.segments, next_c.segments)
    findings = _findings(pair)
    if not findings:
        return _PairResult(previous, [], pair.n_prev, d)
    shared = _shared_intervals(pair, d)
    lost = _cost(findings, shared, pair.n_prev, previous_tp.ratio)
    reasons = [
        Reason(f.code, f.segment, f.offset, tokens, _priced(prices, next, tokens), f.detail)
        for f, tokens in _merge(findings, lost)
    ]
    return _PairResult(previous, reasons, min(f.position for f in findings), d)


def attribute_pair(
    previous: Prompt,
    previous_tp: TokenStream,
    next: Prompt,
    next_tp: TokenStream,
    *,
    prices: PriceTable | None = None,
) -> list[Reason]:
    """Why ``next`` cannot reuse more of ``previous`` than their common prefix: content, model and
    parameter reasons, the one at the divergence point first (empty when nothing was lost).

    ``previous_tp`` / ``next_tp`` are the prompts' token streams (``counting.TokenizedPrompt``).
    Without ``prices`` the dollar amounts are 0.
    """
    return _explain_pair(previous, previous_tp, next, next_tp, prices).reasons


def attribute(analysis: Analysis, prices: PriceTable) -> list[Reason]:
    """Every reason the Engine's analysis of one request supports, the one at the divergence first.

    ``cold``: no earlier request of the tenant to compare with. Content / model / parameter reasons
    against ``analysis.previous``. ``expired``: the index held a longer prefix than it still serves.
    Then the cache model's limits, costing the reusable tokens that were not cached.

    A limit that only exists because of a change is folded into the change: when the common prefix
    is below the minimum, or reaches past the last entry the earlier request wrote, because the
    prompts diverge early, the reason at the divergence carries those tokens too (had the change
    not happened, they would have been read).
    """
    prompt = analysis.prompt
    ratio = analysis.tokenized.ratio
    reasons: list[Reason] = []
    pair: _PairResult | None = None
    if is_cold(analysis):
        reasons.append(Reason("cold", None, None, 0, 0.0, COLD_DETAIL))
    elif analysis.previous is not None:
        earlier = analysis.previous
        pair = _explain_pair(earlier.prompt, earlier.tokenized, prompt, analysis.tokenized, prices)
        reasons += pair.reasons
    held = expired_prefix(analysis)
    if held is not None:
        tokens = _units(held[0], ratio)
        reasons.append(Reason("expired", None, None, tokens, _priced(prices, prompt, tokens), held[1]))
    missed, limits = model_limits(analysis)
    if pair is not None and pair.reasons:
        lost = sum(r.tokens_lost for r in pair.reasons)
        if folds_into_change(analysis, limits, pair.previous, pair.divergence_index, lost):
            first = pair.reasons[0]
            # Only the uncached tokens before the first reason: what lies past it is already its cost.
            tokens = first.tokens_lost + min(missed, _units(pair.first_position, ratio))
            reasons[0] = replace(first, tokens_lost=tokens, usd_lost=_priced(prices, prompt, tokens))
            limits = limits[1:]
            missed = 0
    for n, code in enumerate(limits):
        tokens = missed if n == 0 else 0
        reasons.append(
            Reason(code, None, None, tokens, _priced(prices, prompt, tokens), limit_detail(code, analysis))
        )
    return reasons
