"""ResilientIndex with a scripted primary (no Redis needed): fallback, counting, backoff, merge."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from cachewarden.proxy.engine.index.base import IndexStats, Match
from cachewarden.proxy.engine.index.memory import MemoryIndex
from cachewarden.proxy.engine.index.resilient import ResilientIndex


class Flaky:
    """A shared index that fails on demand (like Redis going away) and counts its calls."""

    def __init__(self) -> None:
        self.store = MemoryIndex(block_size=4)
        self.down = False
        self.calls = 0
        self.ttls: list[float | None] = []

    def _gate(self) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("redis is away")

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match:
        self._gate()
        return self.store.lookup(scope, tokens, now=now, ttl=ttl)

    def insert(
        self,
        scope: str,
        tokens: Sequence[int],
        *,
        now: float,
        entry_id: str | None = None,
        ttl: float | None = None,
    ) -> str:
        self._gate()
        self.ttls.append(ttl)
        return self.store.insert(scope, tokens, now=now, entry_id=entry_id)

    def mark(
        self,
        scope: str,
        tokens: Sequence[int],
        positions: Iterable[int],
        *,
        now: float,
        ttl: float | None = None,
    ) -> None:
        self._gate()
        self.store.mark(scope, tokens, positions, now=now)

    def marks(
        self, scope: str, tokens: Sequence[int], positions: Iterable[int], *, now: float, ttl: float
    ) -> dict[int, float]:
        self._gate()
        return self.store.marks(scope, tokens, positions, now=now, ttl=ttl)

    def stats(self) -> IndexStats:
        self._gate()
        return self.store.stats()

    def clear(self) -> None:
        self._gate()
        self.store.clear()


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def setup() -> tuple[ResilientIndex, Flaky, Clock, list[str]]:
    primary, clock, stages = Flaky(), Clock(), []
    index = ResilientIndex(
        primary,
        MemoryIndex(block_size=4),
        on_outage=stages.append,
        retry_seconds=1,
        max_retry_seconds=4,
        clock=clock,
    )
    return index, primary, clock, stages


TOKS = list(range(10))


def test_answers_from_the_shared_store_when_healthy(
    setup: tuple[ResilientIndex, Flaky, Clock, list[str]],
) -> None:
    index, primary, _, _ = setup
    primary.store.insert("s", TOKS, now=0, entry_id="other-replica")
    m = index.lookup("s", [*TOKS, 5], now=1, ttl=10)
    assert (m.held_prefix_tokens, m.entry_id) == (10, "other-replica")
    assert index.healthy and index.outages_total == 0


def test_outage_falls_back_counts_and_backs_off(
    setup: tuple[ResilientIndex, Flaky, Clock, list[str]],
) -> None:
    index, primary, clock, stages = setup
    eid = index.insert("s", TOKS, now=0, ttl=300)
    assert primary.ttls == [300]  # the scope's TTL reaches the shared store
    primary.down = True
    # Writes still land locally, so the fallback answers warm.
    index.insert("s", [*TOKS, 11], now=1)
    m = index.lookup("s", [*TOKS, 11], now=2, ttl=10)
    assert (m.held_prefix_tokens, index.healthy, index.outages_total, stages) == (11, False, 1, ["insert"])
    assert m.entry_id != eid
    calls = primary.calls
    for _ in range(20):  # no retry due: the primary is not touched, nothing waits on a timeout
        index.lookup("s", TOKS, now=2, ttl=10)
        index.mark("s", TOKS, [4], now=2)
        assert index.marks("s", TOKS, [4], now=2, ttl=10) == {4: 0.0}
    assert primary.calls == calls and index.errors_total == 1
    clock.t = 1.0  # retry due: one probe, still down, the delay doubles
    index.lookup("s", TOKS, now=3, ttl=10)
    index.lookup("s", TOKS, now=3, ttl=10)
    assert primary.calls == calls + 1 and index.errors_total == 2 and index.outages_total == 1
    clock.t = 2.5
    index.lookup("s", TOKS, now=3, ttl=10)
    assert primary.calls == calls + 1  # 1 + 2 s
    clock.t = 3.0
    index.lookup("s", TOKS, now=3, ttl=10)
    assert stages == ["insert", "lookup", "lookup"] and index.errors_total == 3
    clock.t = 100.0
    index.lookup("s", TOKS, now=3, ttl=10)
    assert index.errors_total == 4
    clock.t = 104.0  # capped at max_retry_seconds
    primary.down = False
    m = index.lookup("s", [*TOKS, 11], now=4, ttl=10)
    assert index.healthy and index.outages_total == 1
    # The shared store missed the write made during the outage; the merge still finds it.
    assert m.held_prefix_tokens == 11
    primary.down = True
    index.lookup("s", TOKS, now=5, ttl=10)
    assert index.outages_total == 2 and index.errors_total == 5


def test_merge_takes_the_longer_and_the_newer(setup: tuple[ResilientIndex, Flaky, Clock, list[str]]) -> None:
    index, primary, _, _ = setup
    index.fallback.insert("s", TOKS[:6], now=10, entry_id="mine")
    primary.store.insert("s", TOKS, now=0, entry_id="theirs")
    m = index.lookup("s", TOKS, now=20, ttl=15)
    # Held: 10 tokens from the shared store (20 s old, expired); live: 6 from the local one.
    assert m == Match(6, 10, "theirs", 10, 20.0)
    primary.store.insert("s", TOKS[:6], now=12, entry_id="theirs-newer")
    m = index.lookup("s", TOKS[:6], now=20, ttl=15)
    assert (m.entry_id, m.age_seconds) == ("theirs-newer", 8.0)
    index.fallback.mark("s", TOKS, [4], now=19)
    primary.store.mark("s", TOKS, [4, 8], now=15)
    assert index.marks("s", TOKS, [4, 8], now=20, ttl=10) == {4: 1.0, 8: 5.0}


def test_callback_errors_never_escape(setup: tuple[ResilientIndex, Flaky, Clock, list[str]]) -> None:
    _, primary, clock, _ = setup

    def broken(stage: str) -> None:
        raise RuntimeError("metrics down too")

    index = ResilientIndex(primary, MemoryIndex(), on_outage=broken, clock=clock)
    primary.down = True
    assert index.lookup("s", TOKS, now=0, ttl=0).held_prefix_tokens == 0
    assert index.outages_total == 1


def test_ids_are_shared_and_unique(setup: tuple[ResilientIndex, Flaky, Clock, list[str]]) -> None:
    index, primary, _, _ = setup
    a, b = index.insert("s", TOKS, now=0), index.insert("s", [1, *TOKS], now=0)
    assert a != b and len(a) == 32  # uuid hex: replicas never mint the same id
    assert primary.store.lookup("s", TOKS, now=0, ttl=0).entry_id == a
    assert index.fallback.lookup("s", TOKS, now=0, ttl=0).entry_id == a
    assert index.insert("s", [], now=0, entry_id="e") == "e"
    assert index.stats() == index.fallback.stats()  # local: cheap enough for every request
    index.clear()
    assert index.fallback.stats().tokens == 0 and primary.store.stats().tokens == 0


def test_joint_lookups_fall_back_and_count_each_outage() -> None:
    # The engine's two indexes are asked together (lookup_many): a shared store that fails
    # answers both from their local indexes, and each counts its outage.
    from cachewarden.proxy.engine.index.base import Lookup, lookup_many

    primaries = [Flaky(), Flaky()]
    stages: list[str] = []
    indexes = []
    for primary in primaries:
        index = ResilientIndex(primary, MemoryIndex(block_size=4), on_outage=stages.append, clock=Clock())
        primary.store.insert("s", TOKS, now=0, entry_id="other-replica")
        index.fallback.insert("s", TOKS[:6], now=1, entry_id="mine")
        indexes.append(index)
    queries = [Lookup(index, "s", TOKS, 0) for index in indexes]
    got = lookup_many(queries, now=2)
    assert [(m.held_prefix_tokens, m.entry_id) for m in got] == [(10, "other-replica")] * 2
    for primary in primaries:
        primary.down = True
    got = lookup_many(queries, now=2)
    assert [(m.held_prefix_tokens, m.entry_id) for m in got] == [(6, "mine")] * 2
    assert stages == ["lookup", "lookup"] and all(i.outages_total == 1 and not i.healthy for i in indexes)


class Overlapping(Flaky):
    """A primary that, like RedisIndex, runs ``meanwhile`` between sending its lookups and reading
    the replies; it logs the order, and can fail after sending (a connection lost mid-call)."""

    answers_meanwhile = True

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log
        self.fail_after_send = False

    def lookup_many(self, queries: Sequence[Any], *, now: float, meanwhile: Any = None) -> list[Match]:
        self.log.append("sent")
        if meanwhile is not None:
            meanwhile()
        if self.fail_after_send:
            raise ConnectionError("connection lost")
        self.log.append("read")
        return [self.store.lookup(q.scope, q.tokens, now=now, ttl=q.ttl) for q in queries]


class LoggedMemory(MemoryIndex):
    def __init__(self, log: list[str]) -> None:
        super().__init__(block_size=4)
        self.log = log

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match:
        self.log.append("local")
        return super().lookup(scope, tokens, now=now, ttl=ttl)


def test_local_lookups_run_while_the_shared_ones_are_on_their_way() -> None:
    from cachewarden.proxy.engine.index.base import Lookup, lookup_many

    log: list[str] = []
    primary = Overlapping(log)
    index = ResilientIndex(primary, LoggedMemory(log), clock=Clock())
    primary.store.insert("s", TOKS, now=0, entry_id="other-replica")
    index.fallback.insert("s", TOKS[:6], now=1, entry_id="mine")
    got = lookup_many([Lookup(index, "s", TOKS, 0), Lookup(index, "s", TOKS[:6], 0)], now=2)
    assert log == ["sent", "local", "local", "read"]
    # The longer prefix from the shared store; on a tie the newer entry (this replica's).
    assert [(m.held_prefix_tokens, m.entry_id) for m in got] == [(10, "other-replica"), (6, "mine")]
    # Lost after the send: the local answers stand (computed once), and the outage is counted.
    log.clear()
    primary.fail_after_send = True
    got = lookup_many([Lookup(index, "s", TOKS, 0)], now=2)
    assert log == ["sent", "local"] and got[0].entry_id == "mine" and index.outages_total == 1


class LoggedInserts(LoggedMemory):
    def insert(self, scope: str, tokens: Sequence[int], **kw: Any) -> str:
        self.log.append("local insert")
        return super().insert(scope, tokens, **kw)


def test_inserts_asked_with_the_lookups_are_made_locally_while_the_shared_ones_are_on_their_way() -> None:
    # Lookup.then_insert: the local insert follows the local lookup inside the wait for the shared
    # store; the shared insert follows its answer; neither lookup sees the insert of its request.
    from cachewarden.proxy.engine.index.base import Insert, Lookup, lookup_many

    log: list[str] = []
    primary = Overlapping(log)
    index = ResilientIndex(primary, LoggedInserts(log), clock=Clock())
    wide = LoggedInserts(log)
    index.fallback.insert("s", TOKS[:6], now=1, entry_id="mine")
    log.clear()
    then = Insert(now=2, entry_id="this-request", ttl=None)
    got = lookup_many([Lookup(index, "s", TOKS, 0, then), Lookup(wide, "w", TOKS, 0, then)], now=2)
    assert log == ["sent", "local", "local", "local insert", "local insert", "read"]
    assert [(m.held_prefix_tokens, m.entry_id) for m in got] == [(6, "mine"), (0, None)]
    for store in (primary.store, index.fallback):
        assert store.lookup("s", TOKS, now=3, ttl=0).entry_id == "this-request"
    assert wide.lookup("w", TOKS, now=3, ttl=0).entry_id == "this-request"
    # The shared store away: the local insert is still made, the shared one is not tried.
    primary.fail_after_send = True
    got = lookup_many([Lookup(index, "t", TOKS, 0, then)], now=4)
    assert index.fallback.lookup("t", TOKS, now=5, ttl=0).entry_id == "this-request"
    assert primary.store.lookup("t", TOKS, now=5, ttl=0).held_prefix_tokens == 0
    assert index.outages_total == 1


def test_an_index_without_joint_lookups_inserts_after_its_lookup() -> None:
    from cachewarden.proxy.engine.index.base import Insert, Lookup, lookup_many

    index = MemoryIndex(block_size=4)
    index.insert("s", TOKS[:6], now=0, entry_id="before")
    (got,) = lookup_many([Lookup(index, "s", TOKS, 0, Insert(now=1, entry_id="now", ttl=None))], now=1)
    assert (got.held_prefix_tokens, got.entry_id) == (6, "before")
    assert index.lookup("s", TOKS, now=2, ttl=0).entry_id == "now"


class Early(Overlapping):
    """A primary that, like RedisIndex on a channel, may send a prompt's insert while its lookup is
    on its way (``insert_during_lookup``): sends it, declines, or fails, as told."""

    def __init__(self, log: list[str], early: str) -> None:
        super().__init__(log)
        self.early = early

    def insert_during_lookup(self, scope: str, tokens: Sequence[int], local: Match, ins: Any) -> bool:
        self.log.append(f"early {self.early}")
        if self.early == "fails":
            raise ConnectionError("connection lost")
        if self.early == "sends":
            self.store.insert(scope, tokens, now=ins.now, entry_id=ins.entry_id)
            return True
        return False


@pytest.mark.parametrize("early", ["sends", "declines", "fails"])
def test_the_shared_insert_goes_during_the_lookup_or_after_it_once(early: str) -> None:
    # Sent during the lookup: not sent again after. Declined: sent after the answer. Failed: an
    # outage of the insert stage, counted once, and not tried again after.
    from cachewarden.proxy.engine.index.base import Insert, Lookup, lookup_many

    log: list[str] = []
    primary = Early(log, early)
    stages: list[str] = []
    index = ResilientIndex(primary, LoggedMemory(log), clock=Clock(), on_outage=stages.append)
    then = Insert(now=2, entry_id="this-request", ttl=None)
    lookup_many([Lookup(index, "s", TOKS, 0, then)], now=2)
    inserted = primary.store.lookup("s", TOKS, now=3, ttl=0).entry_id
    assert log[:3] == ["sent", "local", f"early {early}"]
    if early == "fails":
        assert (inserted, stages, index.errors_total, primary.calls) == (None, ["insert"], 1, 0)
    else:
        assert inserted == "this-request" and stages == [] and index.errors_total == 0
        assert primary.calls == (1 if early == "declines" else 0)  # the insert after the answer
