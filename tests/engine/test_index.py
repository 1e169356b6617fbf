"""The prefix index against a brute-force reference, plus unit tests of its edges."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import cachewarden.proxy.engine.index.trie as trie_mod
import pytest
from cachewarden.proxy.engine.index.base import IndexStats, Match, PrefixIndex
from cachewarden.proxy.engine.index.memory import MemoryIndex
from cachewarden.proxy.engine.index.query import _query
from hypothesis import given, settings
from hypothesis import strategies as st

# -- reference ---------------------------------------------------------------------------------------


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class RefResult:
    live: int
    held: int
    entry_ids: set[str]  # any of these is a correct "best earlier prompt" (ties in time)
    age: float | None


@dataclass
class Reference:
    """Every insert kept forever. A prefix of length k of a new prompt is held if some insert of the
    scope shares it, live if such an insert happened within ttl; its age is since the latest one."""

    inserts: list[tuple[str, tuple[int, ...], float, str]] = field(default_factory=list)
    mark_log: list[tuple[str, tuple[int, ...], float]] = field(default_factory=list)
    lengths: dict[str, int] = field(default_factory=dict)

    def insert(self, scope: str, tokens: Sequence[int], now: float, entry_id: str) -> None:
        self.inserts.append((scope, tuple(tokens), now, entry_id))
        self.lengths[entry_id] = len(tokens)

    def lookup(self, scope: str, tokens: Sequence[int], now: float, ttl: float) -> RefResult:
        mine = [(_lcp(t, tokens), when, eid) for s, t, when, eid in self.inserts if s == scope]
        held = max((n for n, _, _ in mine), default=0)
        live = max((n for n, when, _ in mine if ttl <= 0 or now - when <= ttl), default=0)
        if held == 0:
            return RefResult(live, 0, set(), None)
        latest = max(when for n, when, _ in mine if n >= held)
        ids = {eid for n, when, eid in mine if n >= held and when == latest}
        return RefResult(live, held, ids, now - latest)

    def mark(self, scope: str, tokens: Sequence[int], positions: Sequence[int], now: float) -> None:
        for p in positions:
            if 0 < p <= len(tokens):
                self.mark_log.append((scope, tuple(tokens[:p]), now))

    def marks(
        self, scope: str, tokens: Sequence[int], positions: Sequence[int], now: float, ttl: float
    ) -> dict[int, float]:
        out: dict[int, float] = {}
        for p in positions:
            if not 0 < p <= len(tokens):
                continue
            whens = [w for s, pre, w in self.mark_log if s == scope and pre == tuple(tokens[:p])]
            if whens and (ttl <= 0 or now - max(whens) <= ttl):
                out[p] = now - max(whens)
        return out


@contextmanager
def fan_out(n: int) -> Iterator[None]:
    """Force the children tries to split early so that the split paths get exercised."""
    # Patched where _fan_add reads it: the trie module, not memory (which does not re-export it).
    old = trie_mod._FAN_OUT
    trie_mod._FAN_OUT = n
    try:
        yield
    finally:
        trie_mod._FAN_OUT = old


# -- random workloads --------------------------------------------------------------------------------

SCOPES = ("a", "b", "c")
# Prompts are a cut of one of a few shared "system prompts" plus a short random tail, so that long
# common prefixes, mid-block divergences and exact repeats are all frequent.
BASES = ((0, 1, 2, 0, 1, 2, 0, 1, 2, 0), (0, 1, 2, 0, 2, 2, 1, 1, 0, 0), (1, 1, 1, 1, 1, 1, 1, 1))
tokens_st = st.builds(
    lambda base, cut, tail: [*base[:cut], *tail],
    st.sampled_from(BASES),
    st.integers(0, 10),
    st.lists(st.sampled_from([0, 1, 2, -1]), max_size=4),
)
op_st = st.one_of(
    st.tuples(st.just("insert"), st.sampled_from(SCOPES), tokens_st),
    st.tuples(st.just("lookup"), st.sampled_from(SCOPES), tokens_st, st.sampled_from([0, 5, 20, 100])),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 3, 10, 30])),
    st.tuples(st.just("mark"), st.sampled_from(SCOPES), st.integers(0, 30), st.lists(st.integers(0, 13))),
    st.tuples(st.just("marks"), st.sampled_from(SCOPES), tokens_st, st.sampled_from([0, 5, 20])),
)
workload_st = st.lists(op_st, max_size=60)


def _run(
    index: MemoryIndex, ops: list[tuple[object, ...]], *, exact: bool, caps: tuple[int, int] | None = None
) -> None:
    ref = Reference()
    now = 0.0
    inserted: dict[str, list[Sequence[int]]] = {s: [] for s in SCOPES}
    for op in ops:
        kind = op[0]
        if kind == "advance":
            now += float(op[1])  # type: ignore[arg-type]
        elif kind == "insert":
            scope, toks = op[1], op[2]
            assert isinstance(scope, str) and isinstance(toks, list | tuple)
            eid = index.insert(scope, toks, now=now)
            ref.insert(scope, toks, now, eid)
            if toks:
                inserted[scope].append(toks)
            if caps is not None:
                stats = index.stats()
                assert stats.tokens <= caps[0] and stats.entries <= caps[1]
        elif kind == "lookup":
            scope, toks, ttl = op[1], op[2], op[3]
            assert isinstance(scope, str) and isinstance(toks, list | tuple) and isinstance(ttl, int)
            got = index.lookup(scope, toks, now=now, ttl=ttl)
            want = ref.lookup(scope, toks, now, ttl)
            assert got.common_prefix_tokens <= got.held_prefix_tokens
            if exact:
                assert (got.common_prefix_tokens, got.held_prefix_tokens) == (want.live, want.held)
                if want.held:
                    assert got.entry_id in want.entry_ids
                    assert got.entry_tokens == ref.lengths[got.entry_id]
                    assert got.age_seconds == want.age
                else:
                    assert got == Match(0, 0, None, 0, None)
            else:
                assert got.common_prefix_tokens <= want.live
                assert got.held_prefix_tokens <= want.held
        elif kind == "mark":
            # Marks follow inserts in the proxy: mark a prompt this scope actually stored.
            scope, pick, positions = op[1], op[2], op[3]
            assert isinstance(scope, str) and isinstance(pick, int) and isinstance(positions, list)
            if inserted[scope]:
                toks = inserted[scope][pick % len(inserted[scope])]
                index.mark(scope, toks, positions, now=now)
                ref.mark(scope, toks, positions, now)
        elif kind == "marks":
            scope, toks, ttl = op[1], op[2], op[3]
            assert isinstance(scope, str) and isinstance(toks, list | tuple) and isinstance(ttl, int)
            positions = list(range(len(toks) + 2))
            got_marks = index.marks(scope, toks, positions, now=now, ttl=ttl)
            want_marks = ref.marks(scope, toks, positions, now, ttl)
            if exact:
                assert got_marks == want_marks
            else:
                assert set(got_marks) <= set(want_marks)
    index._assert_consistent()


@settings(max_examples=300, deadline=None)
@given(ops=workload_st, block_size=st.sampled_from([1, 2, 3, 4, 16]), fan=st.sampled_from([1, 2, 8]))
def test_agrees_with_reference(ops: list[tuple[object, ...]], block_size: int, fan: int) -> None:
    with fan_out(fan):
        _run(MemoryIndex(block_size=block_size), ops, exact=True)


def _as_tuples(ops: list[tuple[object, ...]], repeat: bool) -> list[tuple[object, ...]]:
    """The workload with tuple prompts (the index reuses its work on a tuple between calls); with
    ``repeat`` every lookup's tuple is looked up again by the same object after an insert of it."""
    out: list[tuple[object, ...]] = []
    for op in ops:
        if op[0] in ("insert", "lookup", "marks"):
            toks = tuple(op[2])  # type: ignore[arg-type]
            out.append((*op[:2], toks, *op[3:]))
            if repeat and op[0] == "lookup":
                out.append(("insert", op[1], toks))
                out.append(("marks", op[1], toks, op[3]))
        else:
            out.append(op)
    return out


@settings(max_examples=300, deadline=None)
@given(
    ops=workload_st,
    block_size=st.sampled_from([1, 2, 3, 4, 16]),
    fan=st.sampled_from([1, 2, 8]),
    repeat=st.booleans(),
)
def test_agrees_with_reference_on_tuples(
    ops: list[tuple[object, ...]], block_size: int, fan: int, repeat: bool
) -> None:
    with fan_out(fan):
        _run(MemoryIndex(block_size=block_size), _as_tuples(ops, repeat), exact=True)


@settings(max_examples=200, deadline=None)
@given(
    ops=workload_st,
    block_size=st.sampled_from([1, 2, 4]),
    max_tokens=st.integers(0, 30),
    max_entries=st.integers(1, 6),
    max_age=st.sampled_from([5.0, 40.0, 1e9]),
    repeat=st.booleans(),
)
def test_bounded_index_never_overclaims_on_tuples(
    ops: list[tuple[object, ...]],
    block_size: int,
    max_tokens: int,
    max_entries: int,
    max_age: float,
    repeat: bool,
) -> None:
    # Evictions between the calls on one tuple: remembered walks must notice them.
    index = MemoryIndex(
        block_size=block_size, max_tokens=max_tokens, max_entries=max_entries, max_age_seconds=max_age
    )
    _run(index, _as_tuples(ops, repeat), exact=False, caps=(max_tokens, max_entries))


def test_a_conversation_of_tuples_reuses_the_previous_walk() -> None:
    # Each prompt extends the previous one (the agent case): adopted walks must give exact answers.
    index = MemoryIndex(block_size=4)
    prompt: tuple[int, ...] = tuple(range(30))
    for turn in range(12):
        longer = (*prompt[:-2], *range(100 * turn, 100 * turn + 9))
        m = index.lookup("s", longer, now=float(turn), ttl=0)
        assert m.held_prefix_tokens == (len(prompt) - 2 if turn else 0)
        index.insert("s", longer, now=float(turn))
        index.mark("s", longer, [8, len(longer)], now=float(turn))
        assert index.marks("s", longer, [8, len(longer)], now=float(turn), ttl=0) == {
            8: 0.0,
            len(longer): 0.0,
        }
        prompt = longer
    index._assert_consistent()


@settings(max_examples=150, deadline=None)
@given(ops=workload_st, block_size=st.sampled_from([1, 4]), max_entries=st.integers(1, 4))
def test_entry_cap_never_changes_prefixes(
    ops: list[tuple[object, ...]], block_size: int, max_entries: int
) -> None:
    # Dropping entry metadata forgets names, not blocks: the token counts stay exact.
    index = MemoryIndex(block_size=block_size, max_entries=max_entries)
    ref = Reference()
    now = 0.0
    for op in ops:
        if op[0] == "advance":
            now += float(op[1])  # type: ignore[arg-type]
        elif op[0] == "insert":
            eid = index.insert(op[1], op[2], now=now)  # type: ignore[arg-type]
            ref.insert(op[1], op[2], now, eid)  # type: ignore[arg-type]
            assert index.stats().entries <= max_entries
        elif op[0] == "lookup":
            got = index.lookup(op[1], op[2], now=now, ttl=op[3])  # type: ignore[arg-type]
            want = ref.lookup(op[1], op[2], now, op[3])  # type: ignore[arg-type]
            assert (got.common_prefix_tokens, got.held_prefix_tokens) == (want.live, want.held)
    index._assert_consistent()


@settings(max_examples=300, deadline=None)
@given(
    ops=workload_st,
    block_size=st.sampled_from([1, 2, 4]),
    max_tokens=st.integers(0, 30),
    max_entries=st.integers(1, 6),
    max_age=st.sampled_from([5.0, 40.0, 1e9]),
    fan=st.sampled_from([1, 8]),
)
def test_bounded_index_never_overclaims(
    ops: list[tuple[object, ...]],
    block_size: int,
    max_tokens: int,
    max_entries: int,
    max_age: float,
    fan: int,
) -> None:
    index = MemoryIndex(
        block_size=block_size, max_tokens=max_tokens, max_entries=max_entries, max_age_seconds=max_age
    )
    with fan_out(fan):
        _run(index, ops, exact=False, caps=(max_tokens, max_entries))


# -- unit tests --------------------------------------------------------------------------------------


def test_protocol_is_satisfied() -> None:
    index: PrefixIndex = MemoryIndex()
    assert index.stats() == IndexStats(entries=0, tokens=0, blocks=0)


def test_exact_lcp_inside_a_partial_block() -> None:
    index = MemoryIndex(block_size=16)
    stored = list(range(100, 120))  # one full block + a partial block of 4
    eid = index.insert("s", stored, now=0)
    assert index.stats() == IndexStats(entries=1, tokens=20, blocks=2)
    assert index.lookup("s", [*stored[:18], 7, 7], now=1, ttl=10).common_prefix_tokens == 18
    assert index.lookup("s", stored[:17], now=1, ttl=10).common_prefix_tokens == 17
    assert index.lookup("s", [*stored[:5], 7], now=1, ttl=10).common_prefix_tokens == 5
    m = index.lookup("s", [*stored, 1, 2, 3], now=1, ttl=10)
    assert m == Match(20, 20, eid, 20, 1.0)
    assert index.lookup("s", [9, *stored], now=1, ttl=10) == Match(0, 0, None, 0, None)


def test_scopes_are_isolated() -> None:
    index = MemoryIndex(block_size=4)
    toks = list(range(10))
    index.insert("tenant-a|openai|gpt", toks, now=0)
    index.mark("tenant-a|openai|gpt", toks, [4, 6], now=0)
    assert index.lookup("tenant-b|openai|gpt", toks, now=0, ttl=0) == Match(0, 0, None, 0, None)
    assert index.marks("tenant-b|openai|gpt", toks, [4, 6], now=0, ttl=0) == {}
    index.insert("tenant-b|openai|gpt", toks[:3], now=1)
    assert index.lookup("tenant-b|openai|gpt", toks, now=1, ttl=0).held_prefix_tokens == 3
    assert index.lookup("tenant-a|openai|gpt", toks, now=1, ttl=0).held_prefix_tokens == 10


def test_marks_are_exact() -> None:
    index = MemoryIndex(block_size=4)
    toks = list(range(20, 34))
    index.insert("s", toks, now=0)
    index.mark("s", toks, [6, 8], now=10)
    assert index.marks("s", toks, range(15), now=12, ttl=5) == {6: 2.0, 8: 2.0}
    # Same prefix, different tail: still found; differs before p: not found.
    assert index.marks("s", [*toks[:8], 0, 0], [6, 8], now=12, ttl=5) == {6: 2.0, 8: 2.0}
    assert index.marks("s", [*toks[:7], 0, 0, 0], [6, 8], now=12, ttl=5) == {6: 2.0}
    assert index.marks("s", [0, *toks[1:]], [6, 8], now=12, ttl=5) == {}
    assert index.marks("s", toks[:6], [6, 8], now=12, ttl=5) == {6: 2.0}  # p beyond the prompt is ignored
    assert index.marks("s", toks, [6, 8], now=16, ttl=5) == {}  # expired
    assert index.marks("s", toks, [6, 8], now=16, ttl=0) == {6: 6.0, 8: 6.0}  # ttl <= 0: no expiry
    index.mark("s", toks, [6], now=20)
    assert index.marks("s", toks, [6, 8], now=21, ttl=5) == {6: 1.0}


def test_marks_need_held_blocks_and_die_with_them() -> None:
    index = MemoryIndex(block_size=4, max_tokens=8)
    index.mark("s", [1, 2, 3, 4, 5], [5], now=0)  # nothing stored in this scope: nothing to mark
    assert index.marks("s", [1, 2, 3, 4, 5], [5], now=0, ttl=0) == {}
    index.insert("s", [1, 2, 3, 4, 5], now=0)
    index.mark("s", [1, 2, 3, 4, 5], [5], now=0)
    assert index.marks("s", [1, 2, 3, 4, 5], [5], now=0, ttl=0) == {5: 0.0}
    index.insert("s", [9, 9, 9, 9, 9, 9, 9, 9], now=1)  # evicts the first prompt's blocks
    assert index.marks("s", [1, 2, 3, 4, 5], [5], now=1, ttl=0) == {}
    index._assert_consistent()


def test_expired_is_told_from_cold() -> None:
    index = MemoryIndex(block_size=4)
    toks = list(range(12))
    eid = index.insert("s", toks, now=0)
    assert index.lookup("s", toks, now=400, ttl=300) == Match(0, 12, eid, 12, 400.0)
    # A later request sharing the first 6 tokens keeps that much alive.
    eid2 = index.insert("s", [*toks[:6], 99], now=350)
    m = index.lookup("s", toks, now=400, ttl=300)
    assert (m.common_prefix_tokens, m.held_prefix_tokens, m.entry_id, m.age_seconds) == (6, 12, eid, 400.0)
    m = index.lookup("s", toks[:6], now=400, ttl=300)
    assert (m.common_prefix_tokens, m.held_prefix_tokens, m.entry_id, m.age_seconds) == (6, 6, eid2, 50.0)
    assert index.lookup("s", toks, now=400, ttl=0).common_prefix_tokens == 12  # ttl <= 0: no expiry


def test_entries_reuse_ids_and_prefer_the_most_recent() -> None:
    index = MemoryIndex(block_size=4)
    a = index.insert("s", [1, 2, 3, 4, 5, 6], now=0)
    assert index.insert("s", [1, 2, 3, 4, 5, 6], now=1) == a  # the same prompt is the same entry
    b = index.insert("s", [1, 2, 3, 4, 5, 7, 8], now=2)
    assert b != a and index.stats().entries == 2
    m = index.lookup("s", [1, 2, 3, 4, 5], now=3, ttl=0)
    assert (m.entry_id, m.entry_tokens, m.age_seconds) == (b, 7, 1.0)
    m = index.lookup("s", [1, 2, 3, 4, 5, 6, 0], now=3, ttl=0)
    assert (m.entry_id, m.entry_tokens, m.age_seconds) == (a, 6, 2.0)
    assert index.insert("s", [1, 2, 3, 4, 5, 6], now=4, entry_id="req-9") == "req-9"
    assert index.lookup("s", [1, 2, 3, 4, 5, 6], now=4, ttl=0).entry_id == "req-9"
    assert index.stats().entries == 2  # req-9 now names that prompt
    assert index.insert("s", [], now=5, entry_id="empty") == "empty"
    assert index.stats().entries == 2


def test_most_recent_among_equal_partial_matches() -> None:
    index = MemoryIndex(block_size=4)
    index.insert("s", [0, 1, 2], now=0)
    newer = index.insert("s", [0, 1, 3], now=5)
    index.insert("s", [0, 1, 4], now=2)
    m = index.lookup("s", [0, 1, 9], now=10, ttl=0)
    assert (m.held_prefix_tokens, m.entry_id, m.age_seconds) == (2, newer, 5.0)


def test_caps_are_respected() -> None:
    index = MemoryIndex(block_size=4, max_tokens=50, max_entries=3)
    for i in range(40):
        index.insert("s", [i % 7, *range(i, i + 9)], now=float(i))
        stats = index.stats()
        assert stats.tokens <= 50 and stats.entries <= 3
    index._assert_consistent()
    # The most recent prompt is still there in full.
    assert index.lookup("s", [39 % 7, *range(39, 48)], now=40, ttl=0).held_prefix_tokens == 10


def test_a_prompt_larger_than_the_budget_keeps_its_head() -> None:
    index = MemoryIndex(block_size=4, max_tokens=8)
    index.insert("s", list(range(20)), now=0)
    assert index.stats() == IndexStats(entries=0, tokens=8, blocks=2)
    assert index.lookup("s", list(range(20)), now=0, ttl=0).held_prefix_tokens == 8


def test_age_drops_old_blocks_on_insert() -> None:
    index = MemoryIndex(block_size=4, max_age_seconds=100)
    index.insert("s", list(range(10)), now=0)
    index.insert("t", [7, 7], now=50)
    index.insert("t", [7, 7, 7], now=150)
    assert index.lookup("s", list(range(10)), now=150, ttl=0).held_prefix_tokens == 0
    assert index.stats() == IndexStats(entries=2, tokens=5, blocks=2)
    index._assert_consistent()


def test_eviction_of_a_parent_takes_its_children() -> None:
    index = MemoryIndex(block_size=2)
    index.insert("s", [1, 2, 3, 4, 5, 6], now=0)
    index.insert("s", [1, 2, 3, 4, 7, 8], now=1)
    index.insert("s", [1, 2, 9], now=2)
    assert index.stats().blocks == 5
    # LRU eviction only ever meets leaves; force a parent out to check that its subtree goes with it.
    parent = next(n for n in index._nodes.values() if list(n.tokens) == [3, 4])
    with index._lock:
        index._evict(parent)
    index._assert_consistent()
    assert index.stats() == IndexStats(entries=1, tokens=3, blocks=2)
    assert index.lookup("s", [1, 2, 3, 4, 5, 6], now=3, ttl=0).held_prefix_tokens == 2
    assert index.lookup("s", [1, 2, 9], now=3, ttl=0).held_prefix_tokens == 3


def test_lru_eviction_removes_whole_stale_paths() -> None:
    index = MemoryIndex(block_size=2, max_tokens=6)
    index.insert("s", [1, 1, 1, 1, 1, 1], now=0)
    index.insert("s", [2, 2, 2, 2], now=1)  # must evict the first prompt's leaf blocks first
    assert index.lookup("s", [1, 1, 1, 1, 1, 1], now=2, ttl=0).held_prefix_tokens == 2
    assert index.lookup("s", [2, 2, 2, 2], now=2, ttl=0).held_prefix_tokens == 4
    index._assert_consistent()


def test_many_tails_diverging_mid_block() -> None:
    # A shared system prompt that ends mid-block: every tail hangs off the same node.
    index = MemoryIndex(block_size=16)
    system = list(range(1000, 1021))  # 21 tokens: one block + 5 tokens into the next
    for i in range(500):
        index.insert("s", [*system, 7, 7, i, i + 1], now=float(i))
    index._assert_consistent()
    m = index.lookup("s", [*system, 7, 7, 123, 0], now=600, ttl=300)
    assert (m.common_prefix_tokens, m.held_prefix_tokens, m.entry_tokens, m.age_seconds) == (
        23,
        24,
        25,
        477.0,
    )  # tail 123 expired
    m = index.lookup("s", [*system, 7, 8], now=600, ttl=0)
    assert (m.held_prefix_tokens, m.age_seconds) == (22, 101.0)  # the latest tail shares 22 tokens


def test_tokens_of_any_size() -> None:
    index = MemoryIndex(block_size=2)
    toks = [-5, 2**40, 3, -(2**40), 0]
    index.insert("s", toks, now=0)
    assert index.lookup("s", toks, now=0, ttl=0).held_prefix_tokens == 5
    assert index.lookup("s", [-5, 2**40, 3, 2**40], now=0, ttl=0).held_prefix_tokens == 3
    assert index.lookup("s", (t for t in toks), now=0, ttl=0).held_prefix_tokens == 5  # type: ignore[arg-type]


def test_empty_prompts_and_clear() -> None:
    index = MemoryIndex()
    assert index.lookup("s", [], now=0, ttl=0) == Match(0, 0, None, 0, None)
    index.insert("s", list(range(40)), now=0)
    assert index.lookup("s", [], now=0, ttl=0) == Match(0, 0, None, 0, None)
    index.clear()
    assert index.stats() == IndexStats(0, 0, 0)
    assert index.lookup("s", list(range(40)), now=0, ttl=0).held_prefix_tokens == 0


def test_bad_block_size() -> None:
    with pytest.raises(ValueError, match="block_size"):
        MemoryIndex(block_size=0)


def test_threads_leave_it_consistent() -> None:
    index = MemoryIndex(block_size=4, max_tokens=500)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for i in range(300):
                toks = [seed % 3, *[(i * 7 + j) % 5 for j in range(seed % 11 + 3)]]
                index.insert(f"s{seed % 2}", toks, now=float(i))
                index.lookup(f"s{seed % 2}", toks, now=float(i), ttl=10)
                index.mark(f"s{seed % 2}", toks, [3, 4], now=float(i))
        except BaseException as exc:  # surfaced below; a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    index._assert_consistent()
    assert index.stats().tokens <= 500
    assert not math.isnan(index.stats().tokens)


def test_a_growing_conversation_keeps_a_few_runs() -> None:
    """An insert refreshes its path run by run: conversations that each grow by a turn, beside each
    other under one system prompt, keep a few runs each (their refresh costs no walk of the history),
    and what they predict is what the reference predicts."""
    index, ref = MemoryIndex(block_size=4), Reference()
    system = list(range(1000, 1037))  # not a multiple of the block size: conversations part mid-block
    conversations = {c: [*system, 5000 + c] for c in range(6)}
    for turn in range(60):
        for c, tokens in conversations.items():
            tokens.extend([7000 + c, turn, turn + 1])
            now = float(turn * 10 + c)
            assert index.lookup("s", tokens, now=now, ttl=30).common_prefix_tokens == (
                ref.lookup("s", tokens, now, 30).live
            )
            ref.insert("s", tokens, now, index.insert("s", tokens, now=now))
            # The runs along the path just refreshed: the shared system prompt's and the
            # conversation's own (old partial tails stay beside the path as runs of their own).
            path = index._held("s", index._roots["s"], _query(tuple(tokens), 4), len(tokens) // 4)
            assert len({id(node.stamp) for node in path}) <= 3, turn
    index._assert_consistent()
