"""A shared prefix index that never takes the proxy down with it.

``ResilientIndex(primary=RedisIndex, fallback=MemoryIndex)``: every write goes to the local index
first (always, so that its answers are warm when they are needed) and then to the shared one.
Reads come from both and are merged: each is a subset of all the requests ever inserted, so the
longer prefix of the two is still a prefix some earlier request shared. This also covers the
requests this replica saw while the shared store was away and the store therefore lacks.

When the primary raises (Redis down, a 50 ms socket timeout, anything), the call answers from
the local index, the error is counted (``errors_total``, ``on_outage(stage)``), and the primary
is left alone until a retry is due: at most one attempt per ``retry_seconds``, doubling up to
``max_retry_seconds`` while it keeps failing. The first call that succeeds makes it healthy again.
Analysis never fails a request, so every exception of the primary is an outage, not a crash.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from .base import (
    NO_MATCH,
    IndexStats,
    Insert,
    Lookup,
    Marks,
    Match,
    PrefixIndex,
    insert_after,
    lookup_many,
    marks_many,
)
from .rope import as_tokens

__all__ = ["ResilientIndex"]

_T = TypeVar("_T")


def _better(a: Match, b: Match) -> Match:
    """The union of two partial views: longest live and held prefix; the entry behind the held one."""
    if b.held_prefix_tokens > a.held_prefix_tokens or (
        b.held_prefix_tokens == a.held_prefix_tokens
        and b.age_seconds is not None
        and (a.age_seconds is None or b.age_seconds < a.age_seconds)
    ):
        a, b = b, a
    common = max(a.common_prefix_tokens, b.common_prefix_tokens)
    return a if common == a.common_prefix_tokens else Match(common, *_tail(a))


def _tail(m: Match) -> tuple[int, str | None, int, float | None]:
    return m.held_prefix_tokens, m.entry_id, m.entry_tokens, m.age_seconds


def _ask(queries: Sequence[Lookup], now: float, meanwhile: Callable[[], None]) -> list[Match]:
    """``lookup_many`` of the primaries, with ``meanwhile`` run while a Redis works on them (a
    backend without that hook answers first, then ``meanwhile`` runs)."""
    index = queries[0].index
    if getattr(index, "answers_meanwhile", False):
        return index.lookup_many(queries, now=now, meanwhile=meanwhile)  # type: ignore[attr-defined, no-any-return]
    return lookup_many(queries, now=now)


def _sent_early(write: tuple[int, ResilientIndex, Lookup, Insert], local: Match | None) -> bool:
    """Whether the shared insert of ``write`` went out while its lookup is on its way
    (``RedisIndex.insert_during_lookup``, told the local answer); a failure is an outage, as after."""
    _, index, w, ins = write
    early = getattr(w.index, "insert_during_lookup", None)
    if early is None or local is None or not index.healthy:
        return False
    ok, sent = index._call("insert", functools.partial(early, w.scope, w.tokens, local, ins))
    return not ok or bool(sent)  # an insert sent or failed is not sent again


class ResilientIndex:
    """Shared primary, local fallback; see the module doc. Thread-safe if both indexes are."""

    def __init__(
        self,
        primary: PrefixIndex,
        fallback: PrefixIndex,
        *,
        on_outage: Callable[[str], None] | None = None,
        retry_seconds: float = 1.0,
        max_retry_seconds: float = 8.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.on_outage = on_outage
        self.healthy = True
        self.outages_total = 0  # healthy -> failing transitions
        self.errors_total = 0  # failed calls to the primary (each also reported to on_outage)
        self._retry = retry_seconds
        self._max_retry = max(max_retry_seconds, retry_seconds)
        self._delay = retry_seconds
        self._next_try = 0.0
        self._clock = clock
        self._lock = threading.Lock()

    # -- health -------------------------------------------------------------------------------------

    def _due(self) -> bool:
        """Whether to call the primary now. While failing, only one caller per interval probes it."""
        with self._lock:
            if self.healthy:
                return True
            now = self._clock()
            if now < self._next_try:
                return False
            self._next_try = now + self._delay
            return True

    def _call(self, stage: str, fn: Callable[[], _T]) -> tuple[bool, _T | None]:
        if not self._due():
            return False, None
        try:
            result = fn()
        except Exception:
            self._failed(stage)
            return False, None
        self._succeeded()
        return True, result

    def _succeeded(self) -> None:
        if not self.healthy:
            with self._lock:
                self.healthy, self._delay = True, self._retry

    def _failed(self, stage: str) -> None:
        with self._lock:
            self.errors_total += 1
            if self.healthy:
                self.healthy = False
                self.outages_total += 1
                self._delay = self._retry
            else:
                self._delay = min(self._delay * 2, self._max_retry)
            self._next_try = self._clock() + self._delay
        if self.on_outage is not None:
            # A metrics callback must not turn an outage into a failed request.
            with contextlib.suppress(Exception):
                self.on_outage(stage)

    # -- PrefixIndex --------------------------------------------------------------------------------

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match:
        return self.lookup_many([Lookup(self, scope, tokens, ttl)], now=now)[0]

    def lookup_many(self, queries: Sequence[Lookup], *, now: float) -> list[Match]:
        """``JointLookups``: the primaries of the ``ResilientIndex`` queries are asked together
        (one round trip when they share a Redis), each merged with its local answer. The local
        lookups run while that round trip is on its way (``meanwhile``), when the primary can.
        A failure of that call is an outage of each of them."""
        out: list[Match | None] = [None] * len(queries)
        asked: list[tuple[int, ResilientIndex]] = []
        shared: list[Lookup] = []
        local: list[Lookup] = []  # one per query, in order: what answers it here
        # Shared inserts (query, index, its shared lookup, the insert), once the lookups are answered.
        writes: list[tuple[int, ResilientIndex, Lookup, Insert]] = []
        for i, q in enumerate(queries):
            index = q.index
            if not isinstance(index, ResilientIndex):
                local.append(q)
                continue
            toks = as_tokens(q.tokens)
            local.append(Lookup(index.fallback, q.scope, toks, q.ttl, q.then_insert))
            theirs = Lookup(index.primary, q.scope, toks, q.ttl)
            if q.then_insert is not None:
                writes.append((i, index, theirs, q.then_insert))
            if index._due():
                asked.append((i, index))
                shared.append(theirs)
        pending = True

        def answer_locally() -> None:
            # The local lookups, then the local inserts: all while the shared index works. The shared
            # insert of a query that can go before its lookup's answer goes right after that query's
            # local lookup, while Redis is most likely still on the lookup (see _sent_early).
            nonlocal pending
            if pending:
                pending = False
                early = {w[0]: w for w in writes} if shared else {}
                for i, q in enumerate(local):
                    out[i] = q.index.lookup(q.scope, q.tokens, now=now, ttl=q.ttl)
                    if i in early and _sent_early(early[i], out[i]):
                        writes.remove(early[i])
                insert_after(local)

        if shared:
            try:
                got = _ask(shared, now, answer_locally)
            except Exception:
                for _, index in asked:
                    index._failed("lookup")
            else:
                answer_locally()
                for (i, index), match in zip(asked, got, strict=True):
                    index._succeeded()
                    mine = out[i]
                    out[i] = match if mine is None else _better(match, mine)
        answer_locally()
        for _, index, w, ins in writes:
            then = Lookup(w.index, w.scope, w.tokens, w.ttl, ins)
            index._call("insert", functools.partial(insert_after, [then]))
        return [m if m is not None else NO_MATCH for m in out]

    def insert(
        self,
        scope: str,
        tokens: Sequence[int],
        *,
        now: float,
        entry_id: str | None = None,
        ttl: float | None = None,
    ) -> str:
        toks = as_tokens(tokens)
        # One id for both stores, unique across replicas (MemoryIndex's own ids are per process).
        eid = entry_id if entry_id is not None else uuid.uuid4().hex
        # The shared write first: a Redis runs it while the local one is made (neither waits).
        self._call("insert", lambda: self.primary.insert(scope, toks, now=now, entry_id=eid, ttl=ttl))
        self.fallback.insert(scope, toks, now=now, entry_id=eid)
        return eid

    def mark(
        self,
        scope: str,
        tokens: Sequence[int],
        positions: Iterable[int],
        *,
        now: float,
        ttl: float | None = None,
    ) -> None:
        toks = as_tokens(tokens)
        where = list(positions)
        self.fallback.mark(scope, toks, where, now=now)
        self._call("mark", lambda: self.primary.mark(scope, toks, where, now=now, ttl=ttl))

    def marks(
        self, scope: str, tokens: Sequence[int], positions: Iterable[int], *, now: float, ttl: float
    ) -> dict[int, float]:
        return self.marks_many([Marks(self, scope, tokens, list(positions), ttl)], now=now)[0]

    def marks_many(self, queries: Sequence[Marks], *, now: float) -> list[dict[int, float]]:
        """Joint ``marks``: each local answer, merged (the newest mark of a position) with the
        primaries' answers, which are asked together (one round trip on one Redis)."""
        out: list[dict[int, float]] = []
        asked: list[tuple[int, ResilientIndex]] = []
        shared: list[Marks] = []
        for i, q in enumerate(queries):
            index = q.index
            if not isinstance(index, ResilientIndex):
                out.append(index.marks(q.scope, q.tokens, q.positions, now=now, ttl=q.ttl))
                continue
            toks = as_tokens(q.tokens)
            out.append(index.fallback.marks(q.scope, toks, q.positions, now=now, ttl=q.ttl))
            if index._due():
                asked.append((i, index))
                shared.append(Marks(index.primary, q.scope, toks, q.positions, q.ttl))
        if shared:
            try:
                got = marks_many(shared, now=now)
            except Exception:
                for _, index in asked:
                    index._failed("marks")
            else:
                for (i, index), theirs in zip(asked, got, strict=True):
                    index._succeeded()
                    found = out[i]
                    for p, age in theirs.items():
                        if p not in found or age < found[p]:
                            found[p] = age
        return out

    def stats(self) -> IndexStats:
        """The local index's: cheap enough for every request, and what this replica holds."""
        return self.fallback.stats()

    def clear(self) -> None:
        self.fallback.clear()
        self._call("clear", self.primary.clear)
