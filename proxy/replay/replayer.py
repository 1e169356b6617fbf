"""Replay a traffic log through the Engine, one request at a time, and aggregate what it predicts.

``replay`` is a lazy iterator: it reads one line, analyses it, yields its Row and forgets it, so a
log of any size replays in the Engine's bounded memory; ``report.Report`` aggregates the rows in
bounded memory too.

Time. A line's timestamp is the request's ``now``, so gaps longer than the provider's TTL expire
the cache as they would have. Without timestamps, requests are taken as back to back, one second
apart. The clock never runs backwards: a log written as responses end (the proxy's capture) can
list a request a moment before an earlier-started one, and the cache cannot be younger than that.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from cachewarden.proxy.engine.engine import Analysis, Engine
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.prompt import Prompt, Provider
from cachewarden.proxy.engine.usage import Usage
from cachewarden.proxy.explain.attribution import Reason, attribute

from .logs import LogEntry, LogLineError, SkipLine, parse_line, reported_usage

DEFAULT_TENANT = "replay"
# A prompt reusing less than this share of its tokens gains little from caching (DESIGN.md metrics).
LOW_STABLE_SHARE = 0.4
# ``unexplained``: the provider reported fewer cached tokens than predicted by more than estimation
# noise (Claude counts are estimated from o200k within a few per cent; OpenAI caches in 128-token steps).
UNEXPLAINED_MIN_TOKENS = 128
UNEXPLAINED_MIN_SHARE = 0.10


@dataclass(frozen=True, slots=True)
class Tokens:
    """Input tokens by how they are billed (``cache_write`` includes ``cache_write_1h``)."""

    cached: int
    cache_write: int
    uncached: int
    cache_write_1h: int = 0

    @property
    def total(self) -> int:
        return self.cached + self.cache_write + self.uncached

    def as_json(self) -> dict[str, int]:
        return {
            "cached_tokens": self.cached,
            "cache_write_tokens": self.cache_write,
            "uncached_tokens": self.uncached,
        }

    @classmethod
    def of_usage(cls, usage: Usage) -> Tokens:
        return cls(usage.cached, usage.cache_write, usage.uncached, usage.cache_write_1h)


@dataclass(frozen=True, slots=True)
class Row:
    """One replayed request: what the engine predicts, what was reported, and why it missed."""

    index: int  # 0-based line of the request in LOG
    provider: Provider
    model: str
    tenant: str
    at: float  # the replay clock (epoch seconds when the line has a timestamp)
    timestamped: bool  # the line had a timestamp (else ``at`` is one second after the previous request)
    tokens: int
    predicted: Tokens
    reported: Tokens | None
    reusable_tokens: int
    reasons: tuple[Reason, ...]
    priced: bool  # the price table knows the model (else every dollar figure is 0)
    cost_usd: float  # predicted input cost
    read_savings_usd: float  # cached tokens at the read price instead of the input price
    write_premium_usd: float  # cache writes above the input price (negative never)
    analysis: Analysis = field(repr=False, compare=False)  # for the divergence view; not in the JSON

    @property
    def tokens_lost(self) -> int:
        return sum(r.tokens_lost for r in self.reasons)

    @property
    def usd_lost(self) -> float:
        return sum(r.usd_lost for r in self.reasons)

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "provider": self.provider,
            "model": self.model,
            "tokens": self.tokens,
            "predicted": self.predicted.as_json(),
            "reported": None if self.reported is None else self.reported.as_json(),
            "reasons": [
                {
                    "code": r.code,
                    "segment": r.segment,
                    "tokens_lost": r.tokens_lost,
                    "usd_lost": round(r.usd_lost, 8),
                    "detail": r.detail,
                }
                for r in self.reasons
            ],
        }


@dataclass(frozen=True, slots=True)
class Problem:
    """A line that was not replayed: bad (counted as an error) or skipped (valid, not a cached prompt)."""

    index: int
    message: str
    skipped: bool = False


# ---------------------------------------------------------------------------------------------------
# Replaying


class _Clock:
    def __init__(self) -> None:
        self.last: float | None = None

    def tick(self, timestamp: float | None) -> float:
        if timestamp is None:
            now = 0.0 if self.last is None else self.last + 1.0
        else:
            now = timestamp if self.last is None else max(timestamp, self.last)
        self.last = now
        return now


def _unexplained(engine: Engine, prompt: Prompt, predicted: Tokens, reported: Tokens | None) -> Reason | None:
    if reported is None:
        return None
    lost = predicted.cached - reported.cached
    if lost <= max(UNEXPLAINED_MIN_TOKENS, UNEXPLAINED_MIN_SHARE * predicted.cached):
        return None
    usd = engine.prices.missed_savings(prompt.model, prompt.provider, lost)
    detail = f"predicted {predicted.cached} cached tokens, the provider reported {reported.cached}"
    return Reason("unexplained", None, None, lost, usd, detail)


def analyse_entry(
    engine: Engine, entry: LogEntry, index: int, now: float, prompt: Prompt, tenant: str
) -> Row:
    analysis = engine.analyse(prompt, tenant=tenant, now=now)
    p = analysis.prediction
    predicted = Tokens(p.cached_tokens, p.cache_write_tokens, p.uncached_tokens, p.cache_write_1h_tokens)
    usage = reported_usage(prompt.provider, entry.usage)
    reported = None if usage is None else Tokens.of_usage(usage)
    reasons = attribute(analysis, engine.prices)
    extra = _unexplained(engine, prompt, predicted, reported)
    if extra is not None:
        reasons = [*reasons, extra]
    price = engine.prices.price(prompt.model, prompt.provider)
    read_savings = write_premium = 0.0
    if price is not None:
        read_savings = predicted.cached * max(0.0, price.input - price.cache_read)
        write_5m = predicted.cache_write - predicted.cache_write_1h
        write_premium = max(0.0, write_5m * (price.cache_write_5m - price.input)) + max(
            0.0, predicted.cache_write_1h * (price.cache_write_1h - price.input)
        )
    return Row(
        index=index,
        provider=prompt.provider,
        model=prompt.model,
        tenant=tenant,
        at=now,
        timestamped=entry.timestamp is not None,
        tokens=analysis.tokenized.count,
        predicted=predicted,
        reported=reported,
        reusable_tokens=min(p.reusable_tokens, analysis.tokenized.count),
        reasons=tuple(reasons),
        priced=analysis.cost is not None,
        cost_usd=0.0 if analysis.cost is None else analysis.cost.total_usd,
        read_savings_usd=read_savings,
        write_premium_usd=write_premium,
        analysis=analysis,
    )


# A log written as responses end (the proxy's capture) lists a request after later-started ones
# whose responses ended first (analysis hooks run on several workers). The replay puts timestamped
# lines back in request order within this many lines, so it compares each request with the one the
# live proxy compared it with; memory stays bounded.
REORDER_WINDOW = 256


@dataclass(frozen=True, slots=True)
class _Parsed:
    index: int
    entry: LogEntry | None = None
    problem: Problem | None = None


def _parsed(lines: Iterable[str]) -> Iterator[_Parsed]:
    for index, line in enumerate(lines):
        try:
            entry = parse_line(line)
        except SkipLine as exc:
            yield _Parsed(index, problem=Problem(index, str(exc), skipped=True))
            continue
        except LogLineError as exc:
            yield _Parsed(index, problem=Problem(index, str(exc)))
            continue
        except Exception as exc:  # a bug on one line must not lose a replay of a large log
            yield _Parsed(index, problem=Problem(index, f"internal error ({type(exc).__name__}: {exc})"))
            continue
        if entry is not None:
            yield _Parsed(index, entry)


def _in_time_order(parsed: Iterable[_Parsed], window: int) -> Iterator[_Parsed]:
    """Timestamped entries by (timestamp, line) within ``window`` lines; an entry without a timestamp
    (and every problem) flushes what is held first, so untimed logs keep their line order."""
    held: list[tuple[float, int, _Parsed]] = []
    for item in parsed:
        timestamp = item.entry.timestamp if item.entry is not None else None
        if timestamp is None:
            while held:
                yield heapq.heappop(held)[2]
            yield item
            continue
        heapq.heappush(held, (timestamp, item.index, item))
        if len(held) > window:
            yield heapq.heappop(held)[2]
    while held:
        yield heapq.heappop(held)[2]


def replay(
    lines: Iterable[str],
    *,
    provider: Provider | None = None,
    model: str | None = None,
    engine: Engine | None = None,
    tenant: str = DEFAULT_TENANT,
    on_problem: Callable[[Problem], None] | None = None,
) -> Iterator[Row]:
    """Rows of a LOG, lazily, in request order. ``lines`` are the LOG's lines (index = position,
    0-based); timestamped lines are put back in time order within ``REORDER_WINDOW`` lines.

    ``provider`` forces the request format and ``model`` the model of every request. A line that
    cannot be replayed goes to ``on_problem`` and the replay goes on.
    """
    from cachewarden.proxy.engine.reading import ConversationReader

    engine = engine or Engine()
    # Each body read from where it parts from its conversation's previous one (the same Prompt).
    reader = ConversationReader()
    clock = _Clock()
    for item in _in_time_order(_parsed(lines), REORDER_WINDOW):
        if item.problem is not None or item.entry is None:
            if on_problem is not None and item.problem is not None:
                on_problem(item.problem)
            continue
        entry, index = item.entry, item.index
        try:
            prompt = reader.parse(
                entry.body, provider or entry.provider, tenant=entry.tenant or tenant, model=entry.model
            )
            if model:
                prompt = prompt.with_model(model)
            now = clock.tick(entry.timestamp)
            row = analyse_entry(engine, entry, index, now, prompt, entry.tenant or tenant)
        except SkipLine as exc:
            if on_problem is not None:
                on_problem(Problem(index, str(exc), skipped=True))
            continue
        except (LogLineError, CachewardenError) as exc:
            if on_problem is not None:
                on_problem(Problem(index, str(exc)))
            continue
        except Exception as exc:  # a bug on one line must not lose a replay of a large log
            if on_problem is not None:
                on_problem(Problem(index, f"internal error ({type(exc).__name__}: {exc})"))
            continue
        yield row
