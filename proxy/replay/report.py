"""The replay's report: rows aggregated in bounded memory, whatever the size of the log.

``Report`` keeps sums, a per-reason table, the worst misses and a downsampled series for plots; it
never holds the rows themselves, so writers that need every row (JSON) stream them as they come.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.engine import Analysis
from cachewarden.proxy.engine.prompt import Prompt
from cachewarden.proxy.explain.attribution import Reason, find_divergence
from cachewarden.proxy.explain.textdiff import context_line

from .replayer import LOW_STABLE_SHARE, Problem, Row, Tokens


@dataclass(slots=True)
class ReasonTotal:
    requests: int = 0
    tokens_lost: int = 0
    usd_lost: float = 0.0


@dataclass(frozen=True, slots=True)
class DivergenceView:
    """Where a miss's prompt parts from the earlier one: the segment, and both lines around it."""

    segment: str
    offset: int
    previous_line: str
    previous_column: int
    next_line: str
    next_column: int


@dataclass(frozen=True, slots=True)
class Miss:
    """A request that lost cached tokens, kept among the worst ones for the reports."""

    index: int
    provider: str
    model: str
    tokens: int
    tokens_lost: int
    usd_lost: float
    reasons: tuple[Reason, ...]
    divergence: DivergenceView | None


def _segment_text(prompt: Prompt, index: int) -> tuple[str, bool]:
    """The text to show for a segment, and whether it is a stand-in (missing or non-text)."""
    if index >= len(prompt.segments):
        return "(no segment here)", True
    seg = prompt.segments[index]
    return (seg.text, False) if seg.text else (f"({seg.kind})", True)


def divergence_view(analysis: Analysis) -> DivergenceView | None:
    """The divergence of a request from the earlier one it best matches, as two context lines."""
    if analysis.previous is None:
        return None
    before, after = analysis.previous.prompt, analysis.prompt
    div = find_divergence(before, after, analysis.previous.tokenized, analysis.tokenized)
    if div is None:
        return None
    prev_text, prev_stub = _segment_text(before, div.index)
    next_text, next_stub = _segment_text(after, div.index)
    prev_line, prev_col = context_line(prev_text, 0 if prev_stub else div.previous_offset)
    next_line, next_col = context_line(next_text, 0 if next_stub else div.offset)
    return DivergenceView(div.segment, div.offset, prev_line, prev_col, next_line, next_col)


@dataclass(slots=True)
class Point:
    """One bar of the per-request plot: a request, or a run of consecutive requests once downsampled."""

    first_index: int
    last_index: int
    requests: int
    first_at: float
    last_at: float
    cached: int
    cache_write: int
    uncached: int
    reported_cached: int = 0
    reported_requests: int = 0

    def absorb(self, other: Point) -> None:
        self.last_index, self.last_at = other.last_index, other.last_at
        self.requests += other.requests
        self.cached += other.cached
        self.cache_write += other.cache_write
        self.uncached += other.uncached
        self.reported_cached += other.reported_cached
        self.reported_requests += other.reported_requests


class Series:
    """Per-request token split for plots, downsampled by halving so it never exceeds ``limit`` points."""

    def __init__(self, limit: int = 600) -> None:
        self.limit = max(2, limit)
        self.points: list[Point] = []
        self.bucket = 1  # requests per point

    def add(self, row: Row) -> None:
        point = Point(
            row.index,
            row.index,
            1,
            row.at,
            row.at,
            row.predicted.cached,
            row.predicted.cache_write,
            row.predicted.uncached,
            row.reported.cached if row.reported is not None else 0,
            1 if row.reported is not None else 0,
        )
        if self.points and self.points[-1].requests < self.bucket:
            self.points[-1].absorb(point)
        else:
            self.points.append(point)
        if len(self.points) > self.limit:
            merged: list[Point] = []
            for i in range(0, len(self.points), 2):
                head = self.points[i]
                if i + 1 < len(self.points):
                    head.absorb(self.points[i + 1])
                merged.append(head)
            self.points = merged
            self.bucket *= 2


@dataclass(slots=True)
class ErrorStats:
    """Reported minus predicted, over the requests whose usage was recorded."""

    requests: int = 0
    exact: int = 0
    cached_abs: int = 0
    cached_signed: int = 0
    write_abs: int = 0
    uncached_abs: int = 0
    input_abs: int = 0

    def add(self, predicted: Tokens, reported: Tokens) -> None:
        self.requests += 1
        self.exact += predicted.cached == reported.cached
        self.cached_abs += abs(reported.cached - predicted.cached)
        self.cached_signed += reported.cached - predicted.cached
        self.write_abs += abs(reported.cache_write - predicted.cache_write)
        self.uncached_abs += abs(reported.uncached - predicted.uncached)
        self.input_abs += abs(reported.total - predicted.total)

    def as_json(self) -> dict[str, Any]:
        n = max(1, self.requests)
        return {
            "requests": self.requests,
            "cached_tokens_mean_abs": round(self.cached_abs / n, 3),
            "cached_tokens_mean": round(self.cached_signed / n, 3),  # > 0: the provider cached more
            "cached_tokens_exact_share": round(self.exact / n, 4),
            "cache_write_tokens_mean_abs": round(self.write_abs / n, 3),
            "uncached_tokens_mean_abs": round(self.uncached_abs / n, 3),
            "input_tokens_mean_abs": round(self.input_abs / n, 3),
        }


class Report:
    """Totals of a replay, in memory bounded by ``max_misses`` and ``max_points`` (never by the log)."""

    def __init__(self, *, max_misses: int = 50, max_points: int = 600) -> None:
        self.requests = 0
        self.input_tokens = 0
        self.reusable_tokens = 0
        self.low_share_requests = 0
        self.predicted = Tokens(0, 0, 0)
        self.reported: Tokens | None = None
        self.reported_requests = 0
        self.predicted_where_reported = Tokens(0, 0, 0)
        self.errors = ErrorStats()
        self.errors_by_provider: dict[str, ErrorStats] = {}
        self.cost_usd = 0.0
        self.read_savings_usd = 0.0
        self.write_premium_usd = 0.0
        self.unpriced_requests = 0
        self.reasons: dict[str, ReasonTotal] = {}
        self.models: dict[tuple[str, str], int] = {}
        self.timestamped = False
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.bad_lines = 0
        self.skipped_lines = 0
        self.series = Series(max_points)
        self._max_misses = max_misses
        # Min-heap of the worst ``max_misses``: (usd, tokens, -index, arrival, miss); the arrival number
        # keeps entries unique when indexes repeat (several logs replayed into one report).
        self._misses: list[tuple[float, int, int, int, Miss]] = []

    # -- feeding ---------------------------------------------------------------------------------
    def add(self, row: Row) -> None:
        self.requests += 1
        self.input_tokens += row.tokens
        self.reusable_tokens += row.reusable_tokens
        if row.tokens and row.reusable_tokens / row.tokens < LOW_STABLE_SHARE:
            self.low_share_requests += 1
        self.predicted = _plus(self.predicted, row.predicted)
        if row.reported is not None:
            self.reported = _plus(self.reported or Tokens(0, 0, 0), row.reported)
            self.reported_requests += 1
            self.predicted_where_reported = _plus(self.predicted_where_reported, row.predicted)
            self.errors.add(row.predicted, row.reported)
            self.errors_by_provider.setdefault(row.provider, ErrorStats()).add(row.predicted, row.reported)
        self.cost_usd += row.cost_usd
        self.read_savings_usd += row.read_savings_usd
        self.write_premium_usd += row.write_premium_usd
        self.unpriced_requests += not row.priced
        for reason in row.reasons:
            total = self.reasons.setdefault(reason.code, ReasonTotal())
            total.requests += 1
            total.tokens_lost += reason.tokens_lost
            total.usd_lost += reason.usd_lost
        key = (row.provider, row.model)
        self.models[key] = self.models.get(key, 0) + 1
        self.timestamped = self.timestamped or row.timestamped
        self.first_at = row.at if self.first_at is None else self.first_at
        self.last_at = row.at
        self.series.add(row)
        self._keep_miss(row)

    def problem(self, problem: Problem) -> None:
        if problem.skipped:
            self.skipped_lines += 1
        else:
            self.bad_lines += 1

    def _keep_miss(self, row: Row) -> None:
        lost = row.tokens_lost
        if lost <= 0:
            return
        # Ties on dollars (no prices) fall back to tokens, then to the earlier request.
        key = (row.usd_lost, lost, -row.index)
        if len(self._misses) >= self._max_misses and key <= self._misses[0][:3]:
            return  # not among the worst: skip building its divergence view
        miss = Miss(
            row.index,
            row.provider,
            row.model,
            row.tokens,
            lost,
            row.usd_lost,
            row.reasons,
            divergence_view(row.analysis),
        )
        item = (*key, -self.requests, miss)
        if len(self._misses) >= self._max_misses:
            heapq.heapreplace(self._misses, item)
        else:
            heapq.heappush(self._misses, item)

    # -- reading ---------------------------------------------------------------------------------
    @property
    def missed_savings_usd(self) -> float:
        return sum(t.usd_lost for t in self.reasons.values())

    @property
    def savings_usd(self) -> float:
        """What caching saved, net of the write premium (negative: caching costs more than it saves)."""
        return self.read_savings_usd - self.write_premium_usd

    def hit_rate(self, tokens: Tokens | None) -> float | None:
        if tokens is None or tokens.total == 0:
            return None
        return tokens.cached / tokens.total

    @property
    def stable_prefix_share(self) -> float:
        return self.reusable_tokens / self.input_tokens if self.input_tokens else 0.0

    def worst(self, n: int | None = None) -> list[Miss]:
        """The misses that lost the most dollars (then tokens), worst first."""
        ranked = [item[4] for item in sorted(self._misses, key=lambda m: m[:4], reverse=True)]
        return ranked if n is None else ranked[:n]

    def reasons_by_cost(self) -> list[tuple[str, ReasonTotal]]:
        return sorted(self.reasons.items(), key=lambda kv: (-kv[1].usd_lost, -kv[1].tokens_lost, kv[0]))

    def totals_json(self) -> dict[str, Any]:
        reported: dict[str, Any] | None = None
        if self.reported is not None:
            reported = {**self.reported.as_json(), "requests": self.reported_requests}
        by_provider = {name: stats.as_json() for name, stats in sorted(self.errors_by_provider.items())}
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "predicted": self.predicted.as_json(),
            "reported": reported,
            "cost_usd": round(self.cost_usd, 8),
            "missed_savings_usd": round(self.missed_savings_usd, 8),
            "savings_usd": round(self.savings_usd, 8),
            "write_premium_usd": round(self.write_premium_usd, 8),
            "reusable_tokens": self.reusable_tokens,
            "stable_prefix_share": round(self.stable_prefix_share, 4),
            "prediction_error": (
                None if not self.errors.requests else {**self.errors.as_json(), "by_provider": by_provider}
            ),
            "bad_lines": self.bad_lines,
            "skipped_lines": self.skipped_lines,
        }

    def reasons_json(self) -> dict[str, dict[str, Any]]:
        return {
            code: {"requests": t.requests, "tokens_lost": t.tokens_lost, "usd_lost": round(t.usd_lost, 8)}
            for code, t in self.reasons_by_cost()
        }


def _plus(a: Tokens, b: Tokens) -> Tokens:
    return Tokens(
        a.cached + b.cached,
        a.cache_write + b.cache_write,
        a.uncached + b.uncached,
        a.cache_write_1h + b.cache_write_1h,
    )
