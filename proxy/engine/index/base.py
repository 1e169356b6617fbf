"""What every prefix index backend shares: the ``PrefixIndex`` protocol and the results it answers.

Backends: ``MemoryIndex`` (``memory``, one process), ``RedisIndex`` (``redis``, shared by replicas)
and ``ResilientIndex`` (``resilient``, a shared one that falls back to a local one). They import
their common vocabulary from here rather than from one another, so no backend depends on another's
implementation. Time is always passed in (``now``, ``ttl``): ages are differences of the caller's
timestamps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "NO_MATCH",
    "IndexStats",
    "Insert",
    "JointLookups",
    "Lookup",
    "Marks",
    "Match",
    "PrefixIndex",
    "insert_after",
    "lookup_many",
    "marks_many",
]


@dataclass(frozen=True, slots=True)
class Match:
    """Result of a lookup. Token counts are exact; ``age_seconds`` refers to the held prefix."""

    common_prefix_tokens: int
    held_prefix_tokens: int
    entry_id: str | None
    entry_tokens: int
    age_seconds: float | None


NO_MATCH = Match(0, 0, None, 0, None)


@dataclass(frozen=True, slots=True)
class IndexStats:
    entries: int
    tokens: int  # tokens held in distinct blocks
    blocks: int


class PrefixIndex(Protocol):
    """Backend interface: in memory (``MemoryIndex``) or shared by replicas (``RedisIndex``)."""

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match: ...

    def insert(
        self,
        scope: str,
        tokens: Sequence[int],
        *,
        now: float,
        entry_id: str | None = None,
        ttl: float | None = None,
    ) -> str: ...

    def mark(
        self,
        scope: str,
        tokens: Sequence[int],
        positions: Iterable[int],
        *,
        now: float,
        ttl: float | None = None,
    ) -> None: ...

    def marks(
        self, scope: str, tokens: Sequence[int], positions: Iterable[int], *, now: float, ttl: float
    ) -> dict[int, float]: ...

    def stats(self) -> IndexStats: ...

    def clear(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Insert:
    """What ``Lookup.then_insert`` inserts: ``insert(scope, tokens, now=, entry_id=, ttl=)``."""

    now: float
    entry_id: str
    ttl: float | None


@dataclass(frozen=True, slots=True)
class Lookup:
    """One of the lookups ``lookup_many`` answers together: which index, and what it is asked.
    ``then_insert``: once the lookup is answered (it never sees this insert), insert the same
    tokens in the same scope. A shared index with a local mirror then makes its local inserts
    while the shared one still works on the lookups, instead of after its answer."""

    index: PrefixIndex
    scope: str
    tokens: Sequence[int]
    ttl: float
    then_insert: Insert | None = None


@runtime_checkable
class JointLookups(Protocol):
    """A backend that can answer other indexes' lookups beside its own: ``RedisIndex`` sends those
    of every index on the same server in one round trip. It answers the lookups it cannot join
    with their own ``lookup``."""

    def lookup_many(self, queries: Sequence[Lookup], *, now: float) -> list[Match]: ...


def lookup_many(queries: Sequence[Lookup], *, now: float) -> list[Match]:
    """The answers to ``queries``, in order; the same as one ``lookup`` each, then the inserts they
    ask for (``then_insert``), in order. The engine asks its scoped and its model-blind index at
    once: two shared indexes then cost one round trip, not two (a round trip is most of a shared
    lookup's time)."""
    if queries:
        joint = getattr(queries[0].index, "lookup_many", None)
        if joint is not None:  # a JointLookups (an isinstance of the protocol costs ~20 µs)
            return joint(queries, now=now)  # type: ignore[no-any-return]
    found = [q.index.lookup(q.scope, q.tokens, now=now, ttl=q.ttl) for q in queries]
    insert_after(queries)
    return found


def insert_after(queries: Iterable[Lookup]) -> None:
    """The ``then_insert`` of each query, in order (its lookup answered)."""
    for q in queries:
        if (ins := q.then_insert) is not None:
            q.index.insert(q.scope, q.tokens, now=ins.now, entry_id=ins.entry_id, ttl=ins.ttl)


@dataclass(frozen=True, slots=True)
class Marks:
    """One of the ``marks`` calls ``marks_many`` answers together."""

    index: PrefixIndex
    scope: str
    tokens: Sequence[int]
    positions: Sequence[int]
    ttl: float


def marks_many(queries: Sequence[Marks], *, now: float) -> list[dict[int, float]]:
    """The answers to ``queries``, in order; the same as one ``marks`` each. The engine asks for the
    marks of both TTL classes of a breakpoint prompt at once: on Redis one round trip, not two."""
    if queries:
        joint = getattr(queries[0].index, "marks_many", None)
        if joint is not None:
            return joint(queries, now=now)  # type: ignore[no-any-return]
    return [q.index.marks(q.scope, q.tokens, q.positions, now=now, ttl=q.ttl) for q in queries]
