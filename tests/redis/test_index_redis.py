"""RedisIndex against a real redis-server: the brute-force reference of tests/engine/test_index.py, edges,
expiry, isolation, and what is (not) stored."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cachewarden.proxy.engine.index.base import PrefixIndex
from cachewarden.proxy.engine.index.memory import MemoryIndex
from cachewarden.proxy.engine.index.open_index import open_index
from cachewarden.proxy.engine.index.resilient import ResilientIndex
from hypothesis import given, settings
from hypothesis import strategies as st

redis = pytest.importorskip(
    "redis", reason="the redis package is not installed (pip install 'cachewarden[redis]')"
)
from cachewarden.proxy.engine.index.redis import RedisIndex  # noqa: E402
from cachewarden.proxy.engine.index.redis_scripts import LOOKUP, WRITE  # noqa: E402


def _reference_module() -> ModuleType:
    """tests/engine/test_index.py by path: one reference for both backends (tests/ is not a package)."""
    path = Path(__file__).resolve().parents[1] / "engine" / "test_index.py"
    spec = importlib.util.spec_from_file_location("_cachewarden_index_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


REF = _reference_module()
NO_MATCH = (0, 0, None, 0, None)


def _index(server: Any, **kw: Any) -> RedisIndex:
    return RedisIndex(server.client(), **kw)


def _agrees(
    index: PrefixIndex,
    ops: list[tuple[object, ...]],
    *,
    joint: bool = False,
    before: Callable[[int], None] | None = None,
) -> None:
    """The exact branch of tests/engine/test_index.py's ``_run``, for any backend. ``joint``: every
    lookup asks for its insert as the engine does (``Lookup.then_insert``), which the reference
    makes after the lookup; ``before(step)`` runs before each step."""
    from cachewarden.proxy.engine.index.base import Insert, Lookup, lookup_many

    ref = REF.Reference()
    now = 0.0
    inserted: dict[str, list[list[int]]] = {s: [] for s in REF.SCOPES}
    for step, op in enumerate(ops):
        if before is not None:
            before(step)
        kind = op[0]
        if kind == "advance":
            now += float(op[1])  # type: ignore[arg-type]
        elif kind == "insert":
            scope, toks = op[1], op[2]
            assert isinstance(scope, str) and isinstance(toks, list)
            eid = index.insert(scope, toks, now=now)
            ref.insert(scope, toks, now, eid)
            if toks:
                inserted[scope].append(toks)
        elif kind == "lookup":
            scope, toks, ttl = op[1], op[2], op[3]
            assert isinstance(scope, str) and isinstance(toks, list) and isinstance(ttl, int)
            then = Insert(now, f"e{step}", None) if joint else None
            if then is None:
                got = index.lookup(scope, toks, now=now, ttl=ttl)
            else:
                (got,) = lookup_many([Lookup(index, scope, toks, ttl, then)], now=now)
            want = ref.lookup(scope, toks, now, ttl)
            assert (got.common_prefix_tokens, got.held_prefix_tokens) == (want.live, want.held)
            if want.held:
                assert got.entry_id in want.entry_ids
                assert got.entry_tokens == ref.lengths[got.entry_id]
                assert got.age_seconds == want.age
            else:
                assert (got.entry_id, got.entry_tokens, got.age_seconds) == (None, 0, None)
            if then is not None and toks:
                ref.insert(scope, toks, now, then.entry_id)
                inserted[scope].append(toks)
        elif kind == "mark":
            scope, pick, positions = op[1], op[2], op[3]
            assert isinstance(scope, str) and isinstance(pick, int) and isinstance(positions, list)
            if inserted[scope]:
                toks = inserted[scope][pick % len(inserted[scope])]
                index.mark(scope, toks, positions, now=now)
                ref.mark(scope, toks, positions, now)
        elif kind == "marks":
            scope, toks, ttl = op[1], op[2], op[3]
            assert isinstance(scope, str) and isinstance(toks, list) and isinstance(ttl, int)
            positions = list(range(len(toks) + 2))
            assert index.marks(scope, toks, positions, now=now, ttl=ttl) == ref.marks(
                scope, toks, positions, now, ttl
            )


@settings(max_examples=100, deadline=None)
@given(ops=REF.workload_st, block_size=st.sampled_from([1, 2, 3, 4, 16]))
def test_agrees_with_reference(redis_server: Any, ops: list[tuple[object, ...]], block_size: int) -> None:
    with redis_server.client() as c:
        c.flushall()
    _agrees(_index(redis_server, block_size=block_size), ops)


@settings(max_examples=25, deadline=None)
@given(ops=REF.workload_st, block_size=st.sampled_from([1, 4]))
def test_resilient_wrapper_agrees_with_reference(
    redis_server: Any, ops: list[tuple[object, ...]], block_size: int
) -> None:
    # Both halves hold every insert here, and the merge of two exact views must stay exact.
    with redis_server.client() as c:
        c.flushall()
    index = ResilientIndex(_index(redis_server, block_size=block_size), MemoryIndex(block_size=block_size))
    _agrees(index, ops)


def test_exact_lcp_inside_a_partial_block(redis_url: str, redis_server: Any) -> None:
    index = _index(redis_server, block_size=16)
    stored = list(range(100, 120))
    eid = index.insert("s", stored, now=0)
    assert index.stats().tokens == 20  # one record a held prefix length
    assert index.lookup("s", [*stored[:18], 7, 7], now=1, ttl=10).common_prefix_tokens == 18
    assert index.lookup("s", stored[:17], now=1, ttl=10).common_prefix_tokens == 17
    assert index.lookup("s", [*stored[:5], 7], now=1, ttl=10).common_prefix_tokens == 5
    m = index.lookup("s", [*stored, 1, 2, 3], now=1, ttl=10)
    assert (m.common_prefix_tokens, m.held_prefix_tokens, m.entry_id, m.entry_tokens, m.age_seconds) == (
        20,
        20,
        eid,
        20,
        1.0,
    )
    assert _t(index.lookup("s", [9, *stored], now=1, ttl=10)) == NO_MATCH


def _t(m: Any) -> tuple[Any, ...]:
    return (m.common_prefix_tokens, m.held_prefix_tokens, m.entry_id, m.entry_tokens, m.age_seconds)


def test_expired_is_told_from_cold(redis_url: str, redis_server: Any) -> None:
    index = _index(redis_server, block_size=4)
    toks = list(range(12))
    eid = index.insert("s", toks, now=0)
    assert _t(index.lookup("s", toks, now=400, ttl=300)) == (0, 12, eid, 12, 400.0)
    eid2 = index.insert("s", [*toks[:6], 99], now=350)
    m = index.lookup("s", toks, now=400, ttl=300)
    assert (m.common_prefix_tokens, m.held_prefix_tokens, m.entry_id, m.age_seconds) == (6, 12, eid, 400.0)
    m = index.lookup("s", toks[:6], now=400, ttl=300)
    assert (m.common_prefix_tokens, m.held_prefix_tokens, m.entry_id, m.age_seconds) == (6, 6, eid2, 50.0)


def test_two_tenants_never_see_each_other(redis_url: str, redis_server: Any) -> None:
    # Two replicas (two clients), two tenants, the same prompt: nothing crosses the scope.
    a, b = _index(redis_server, block_size=4), _index(redis_server, block_size=4)
    toks = list(range(10))
    a.insert("tenant-a\x1fopenai\x1fgpt-4.1\x1f", toks, now=0)
    a.mark("tenant-a\x1fopenai\x1fgpt-4.1\x1f", toks, [4, 6], now=0)
    assert _t(b.lookup("tenant-b\x1fopenai\x1fgpt-4.1\x1f", toks, now=1, ttl=0)) == NO_MATCH
    assert b.marks("tenant-b\x1fopenai\x1fgpt-4.1\x1f", toks, [4, 6], now=1, ttl=0) == {}
    assert b.lookup("tenant-a\x1fopenai\x1fgpt-4.1\x1f", toks, now=1, ttl=0).held_prefix_tokens == 10
    b.insert("tenant-b\x1fopenai\x1fgpt-4.1\x1f", toks[:3], now=2)
    assert a.lookup("tenant-b\x1fopenai\x1fgpt-4.1\x1f", toks, now=2, ttl=0).held_prefix_tokens == 3
    assert a.lookup("tenant-a\x1fopenai\x1fgpt-4.1\x1f", toks, now=2, ttl=0).held_prefix_tokens == 10


def test_replicas_with_another_secret_or_block_size_share_nothing(redis_url: str, redis_server: Any) -> None:
    toks = list(range(40))
    _index(redis_server, block_size=4, secret=b"k1").insert("s", toks, now=0)
    assert (
        _index(redis_server, block_size=4, secret=b"k1").lookup("s", toks, now=0, ttl=0).held_prefix_tokens
        == 40
    )
    assert (
        _index(redis_server, block_size=4, secret=b"k2").lookup("s", toks, now=0, ttl=0).held_prefix_tokens
        == 0
    )
    assert (
        _index(redis_server, block_size=8, secret=b"k1").lookup("s", toks, now=0, ttl=0).held_prefix_tokens
        == 0
    )
    assert (
        _index(redis_server, block_size=4, secret=b"k1", namespace="other")
        .lookup("s", toks, now=0, ttl=0)
        .held_prefix_tokens
        == 0
    )


def test_marks_are_exact(redis_url: str, redis_server: Any) -> None:
    index = _index(redis_server, block_size=4)
    toks = list(range(20, 34))
    index.insert("s", toks, now=0)
    index.mark("s", toks, [6, 8], now=10)
    assert index.marks("s", toks, range(15), now=12, ttl=5) == {6: 2.0, 8: 2.0}
    assert index.marks("s", [*toks[:8], 0, 0], [6, 8], now=12, ttl=5) == {6: 2.0, 8: 2.0}
    assert index.marks("s", [*toks[:7], 0, 0, 0], [6, 8], now=12, ttl=5) == {6: 2.0}
    assert index.marks("s", [0, *toks[1:]], [6, 8], now=12, ttl=5) == {}
    assert index.marks("s", toks, [6, 8], now=16, ttl=5) == {}
    assert index.marks("s", toks, [6, 8], now=16, ttl=0) == {6: 6.0, 8: 6.0}
    index.mark("s", toks, [6], now=20)
    assert index.marks("s", toks, [6, 8], now=21, ttl=5) == {6: 1.0}
    index.mark("s", toks, [6], now=15)  # a replica whose clock is behind cannot age a mark
    assert index.marks("s", toks, [6], now=21, ttl=5) == {6: 1.0}


def test_a_late_write_never_ages_a_prefix(redis_url: str, redis_server: Any) -> None:
    index = _index(redis_server, block_size=4)
    toks = list(range(10))
    newer = index.insert("s", toks, now=100)
    index.insert("s", toks, now=90)  # another replica, clock 10 s behind
    m = index.lookup("s", toks, now=101, ttl=5)
    assert (m.common_prefix_tokens, m.entry_id, m.age_seconds) == (10, newer, 1.0)


def test_tokens_of_any_size(redis_url: str, redis_server: Any) -> None:
    index = _index(redis_server, block_size=2)
    toks = [-5, 2**40, 3, -(2**40), 0, -(2**63), 2**70, -(2**62) - 2**40]
    index.insert("s", toks, now=0)
    assert index.lookup("s", toks, now=0, ttl=0).held_prefix_tokens == len(toks)
    assert index.lookup("s", [-5, 2**40, 3, 2**40], now=0, ttl=0).held_prefix_tokens == 3
    assert index.lookup("s", [*toks[:6], 2**71], now=0, ttl=0).held_prefix_tokens == 6
    assert index.lookup("s", (t for t in toks), now=0, ttl=0).held_prefix_tokens == len(toks)  # type: ignore[arg-type]


def test_a_prompt_longer_than_one_script_call(redis_url: str, redis_server: Any) -> None:
    # block_size 1: 5,000 blocks, so both the insert and the walk are split into several calls.
    index = _index(redis_server, block_size=1)
    toks = list(range(5000))
    eid = index.insert("s", toks, now=0)
    assert _t(index.lookup("s", [*toks, 1], now=1, ttl=10)) == (5000, 5000, eid, 5000, 1.0)
    assert index.lookup("s", [*toks[:4500], -1], now=1, ttl=10).held_prefix_tokens == 4500
    assert index.lookup("s", [*toks[:2048], -1], now=1, ttl=10).held_prefix_tokens == 2048


def test_empty_prompts_and_clear(redis_url: str, redis_server: Any) -> None:
    index = _index(redis_server)
    assert _t(index.lookup("s", [], now=0, ttl=0)) == NO_MATCH
    assert index.insert("s", [], now=0, entry_id="empty") == "empty"
    index.insert("s", list(range(40)), now=0)
    assert _t(index.lookup("s", [], now=0, ttl=0)) == NO_MATCH
    with redis_server.client() as c:
        c.set("not-ours", "1")
        index.clear()
        assert c.keys("*") == [b"not-ours"]  # clear keeps to its namespace
    assert index.stats().tokens == 0
    assert index.lookup("s", list(range(40)), now=0, ttl=0).held_prefix_tokens == 0


def test_bad_arguments(redis_server: Any) -> None:
    with pytest.raises(ValueError, match="block_size"):
        _index(redis_server, block_size=0)
    with pytest.raises(ValueError, match="namespace"):
        _index(redis_server, namespace="a*b")


def test_stores_digests_timestamps_lengths_and_ids_only(redis_url: str, redis_server: Any) -> None:
    index = _index(redis_server, block_size=4, secret=b"k")
    words = [1000 + i for i in range(23)]
    scope = "tenant-secret\x1fopenai\x1fgpt-4.1\x1f"
    index.insert(scope, words, now=12.5, entry_id="req-1")
    index.mark(scope, words, [8, 13], now=12.5)
    with redis_server.client() as c:
        keys = c.keys("*")
        # One hash tag for the whole scope: one Redis Cluster slot.
        tags = {k.split(b"}")[0] for k in keys}
        assert len(tags) == 1 and tags.pop().startswith(b"cachewarden:{")
        assert all(k.split(b"}:")[1][:2] in (b"n:", b"m:") or k.endswith(b"}:v") for k in keys)
        blocks = [k for k in keys if b"}:n:" in k]
        assert len(blocks) == 6  # ceil(23 / 4) records: one a block
        (values_key,) = [k for k in keys if k.endswith(b"}:v")]
        # The values of the 5 full blocks, by their 8-byte digest.
        values = c.hgetall(values_key)
        assert len(values) == 5 and all(len(f) == 8 and v == b"12.5 23 req-1" for f, v in values.items())
        packed = b"".join(w.to_bytes(n, e) for w in words for n in (2, 4, 8) for e in ("little", "big"))
        for key in keys:
            assert b"tenant-secret" not in key
            if key in blocks:
                (member,) = c.zrange(key, 0, -1)
                assert member[0] >= 0x80
                if len(member) == 4 * 4 + 2 + 16:
                    # A full block: its groups, then '#' and the digest (hex) of its value's field.
                    groups, value = member[:16], member[16:]
                    assert value[:2] == b"\x00#" and bytes.fromhex(value[2:].decode()) in values
                else:
                    groups, _, value = member.partition(b"\x00" + b"12.5")
                    assert value == b" 23 req-1" and len(groups) == 3 * 4
                # No token id in any width or byte order, no run of them.
                for i in range(0, len(groups), 4):
                    assert groups[i] >= 0x80 and groups[i : i + 4] not in packed
            elif key != values_key:
                for field, value in c.hgetall(key).items():
                    assert len(field) == 8 and value == b"12.5"


def test_records_per_insert_are_one_a_block(redis_url: str, redis_server: Any) -> None:
    # The default layout: a 4,000-token prompt is 15 records (<= tokens / 64).
    index = _index(redis_server)
    index.insert("s", list(range(4000)), now=0)
    with redis_server.client() as c:

        def records() -> int:
            return sum(c.hlen(k) if k.endswith(b"}:v") else c.zcard(k) for k in c.keys("*"))

        # 8 blocks, and the values of the 7 full ones by their 8-byte digest (the walk reads those).
        assert records() == 8 + 7
        index.insert("s", [*range(3000), *range(-1, -1001, -1)], now=1)
        # The 5 shared full blocks are rewritten in place; 3000 is inside block 5: blocks 5 and 6
        # (full: two records each) and the partial block 7 are new.
        assert records() == 15 + 5


def test_hashes_do_not_depend_on_the_process(redis_url: str, redis_server: Any) -> None:
    # Replicas are separate processes with their own str-hash salt: the keys must not change.
    code = (
        "import redis, sys; from cachewarden.proxy.engine.index.redis import RedisIndex;"
        f"RedisIndex(redis.Redis(port={redis_server.port})).insert('s', list(range(50)), now=0, entry_id='x')"
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
    with redis_server.client() as c:
        assert c.zcard(c.keys("*")[0]) == 1  # one block: the second process rewrote the same record
    assert _index(redis_server).lookup("s", list(range(50)), now=1, ttl=0).held_prefix_tokens == 50


def test_redis_expiry_follows_the_ttl_and_is_refreshed(redis_url: str, redis_server: Any) -> None:
    index = _index(redis_server, block_size=4, expired_window_seconds=0)
    toks = list(range(10))
    index.insert("s", toks, now=time.time(), ttl=0.3)
    index.mark("s", toks, [5], now=time.time(), ttl=0.3)
    with redis_server.client() as c:
        keys = c.keys("*")
        assert keys and all(0 < c.pttl(k) <= 300 for k in keys)
        # A longer TTL class (OpenAI 24 h retention on the same scope) is never cut short.
        index.insert("s", toks[:4], now=time.time(), ttl=60)
        index.insert("s", toks[:4], now=time.time(), ttl=0.3)
        assert c.pttl(keys[0]) > 1000 or any(c.pttl(k) > 1000 for k in keys)
        time.sleep(0.2)
        index.insert("s", toks, now=time.time(), ttl=0.3)  # a hit refreshes the whole path
        time.sleep(0.2)
        assert index.lookup("s", toks, now=time.time(), ttl=0.3).held_prefix_tokens == 10
        time.sleep(0.4)
        # Gone from Redis (garbage collection) except the 60 s block; correctness never needed it.
        assert index.lookup("s", toks, now=time.time(), ttl=0).held_prefix_tokens == 4
        assert index.marks("s", toks, [5], now=time.time(), ttl=0) == {}
        assert all(c.pttl(k) > 1000 for k in c.keys("*"))


def test_expiry_keeps_an_expired_window_and_caps_at_max_age(redis_url: str, redis_server: Any) -> None:
    with redis_server.client() as c:
        _index(redis_server, expired_window_seconds=3600).insert("a", [1, 2, 3], now=0, ttl=300)
        _index(redis_server, max_age_seconds=600).insert("b", [1, 2, 3], now=0, ttl=300)
        _index(redis_server, max_age_seconds=600).insert("c", [1, 2, 3], now=0)
        pttls = sorted(c.pttl(k) for k in c.keys("*"))
    assert 599_000 < pttls[0] <= 600_000 and 599_000 < pttls[1] <= 600_000  # capped by max_age
    assert 3_899_000 < pttls[2] <= 3_900_000  # TTL + the window in which a miss is "expired"


def test_hot_nodes_sweep_dead_children(redis_url: str, redis_server: Any) -> None:
    # A shared system prompt (one node) with ever new conversations under it: the hash of the node
    # must not grow without bound while the node stays hot.
    index = _index(redis_server, block_size=4, sweep_fields=64, expired_window_seconds=0)
    system = [7, 7, 7, 7]
    for i in range(400):
        index.insert("s", [*system, i, i + 1, i + 2, i + 3], now=float(i), ttl=10)
    with redis_server.client() as c:
        sizes = [c.zcard(k) for k in c.keys("cachewarden:*:n:*")]
        # The scope's values hash too (400 blocks written under the system prompt, 11 live).
        (values,) = c.keys("cachewarden:*:v")
        values_size = c.hlen(values)
    assert max(sizes) <= 2 * 64 + 2 * 11 + 1
    assert values_size <= 2 * 64 + 11 + 1
    m = index.lookup("s", [*system, 399, 400, 401, 402], now=400, ttl=10)
    assert (m.common_prefix_tokens, m.held_prefix_tokens) == (8, 8)
    assert index.lookup("s", [*system, 3, 4, 5, 6], now=400, ttl=0).held_prefix_tokens == 4  # swept


def test_the_values_hash_is_swept(redis_url: str, redis_server: Any) -> None:
    # Many conversations of one scope, none sharing a block after the first: no node gets hot, but
    # the scope's values hash holds every full block's value and must be swept by itself.
    index = _index(redis_server, block_size=4, sweep_fields=64, expired_window_seconds=0)
    for i in range(400):
        index.insert("s", list(range(16 * i, 16 * i + 16)), now=float(i), ttl=10)
    with redis_server.client() as c:
        (values,) = c.keys("cachewarden:*:v")
        size = c.hlen(values)
    assert size <= 2 * 64 + 4 * 11 + 1  # 4 full blocks a prompt, 11 prompts live at the end
    assert index.lookup("s", list(range(16 * 399, 16 * 400)), now=400, ttl=10).held_prefix_tokens == 16
    assert index.lookup("s", list(range(16 * 3, 16 * 4)), now=400, ttl=0).held_prefix_tokens <= 4


def test_open_index_urls(redis_server: Any) -> None:
    assert isinstance(open_index(None), MemoryIndex)
    assert isinstance(open_index("memory://", block_size=4), MemoryIndex)
    shared = open_index(redis_server.url + "?namespace=t1&retry=0.5&socket_timeout=0.2", block_size=4)
    assert isinstance(shared, ResilientIndex) and isinstance(shared.primary, RedisIndex)
    with pytest.raises(ValueError, match="expected memory:// or redis://"):
        open_index("http://localhost:6379")
    with pytest.raises(ValueError, match="retry"):
        open_index("redis://localhost:6379/0?retry=soon")


def test_write_behind_reads_its_own_writes_and_reports_failures(own_redis: Any) -> None:
    index = _index(own_redis, block_size=4, write_behind=True)
    other = _index(own_redis, block_size=4)
    toks = list(range(30))
    eid = index.insert("s", toks, now=0)
    index.mark("s", toks, [8], now=0)
    # The same index reads its queued writes (taken into its own round trip)...
    assert _t(index.lookup("s", toks, now=1, ttl=0)) == (30, 30, eid, 30, 1.0)
    assert index.marks("s", toks, [8], now=1, ttl=0) == {8: 1.0}
    # ...and another replica sees them once they are sent (at once, beside the caller).
    index.insert("s", [*toks, 5], now=2)
    index.flush()
    assert other.lookup("s", [*toks, 5], now=3, ttl=0).held_prefix_tokens == 31
    # A send that fails is raised by the next call (where ResilientIndex counts the outage).
    own_redis.stop()
    index.insert("s", [1, 2, 3], now=4)
    with pytest.raises(redis.RedisError):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            index.insert("s", [1, 2, 3], now=5)
            time.sleep(0.05)
    own_redis.start()
    index.insert("s", [7, 8, 9], now=6)
    assert index.lookup("s", [7, 8, 9], now=7, ttl=0).held_prefix_tokens == 3


def _written_again_after(
    redis_server: Any, first: list[int], then: list[int], lose: Callable[[Any], object]
) -> tuple[RedisIndex, RedisIndex, str]:
    """A replica writes ``first`` (writes behind), Redis loses something (``lose(client)``), the
    replica writes ``then``: its index, another replica's on the same Redis, the second write's id."""
    index = _index(redis_server, block_size=4, write_behind=True)
    other = _index(redis_server, block_size=4)
    index.insert("s", first, now=0)
    index.flush()
    with redis_server.client() as c:
        lose(c)
    eid = index.insert("s", then, now=1)
    index.flush()
    return index, other, eid


def test_blocks_left_out_of_a_write_are_sent_again_when_redis_lost_them(
    redis_url: str, redis_server: Any
) -> None:
    # A write leaves out the bytes of the full blocks the index knows are stored; Redis flushed
    # (or expired, or swept) meanwhile: the script says which ones it lacks and they go again.
    toks = list(range(1, 23))
    _, other, eid = _written_again_after(redis_server, toks, [*toks, 99], lambda c: c.flushall())
    # Exact inside a full block too (that needs the block's own member, not only its digest).
    assert _t(other.lookup("s", [*toks[:10], 7, 7, 7], now=2, ttl=0)) == (10, 10, eid, 23, 1.0)
    assert _t(other.lookup("s", [*toks, 99, 5], now=2, ttl=0)) == (23, 23, eid, 23, 1.0)


def _two_indexes(redis_server: Any, behind: bool) -> tuple[RedisIndex, RedisIndex]:
    """An empty Redis and two indexes on it with other secrets, as the engine's scoped and wide ones."""
    with redis_server.client() as c:
        c.flushall()
    a = _index(redis_server, block_size=4, secret=b"a", write_behind=behind)
    return a, _index(redis_server, block_size=4, secret=b"b", write_behind=behind)


def test_both_lookups_of_an_analysis_share_a_round_trip(redis_url: str, redis_server: Any) -> None:
    # Two indexes (other secrets, as the engine's scoped and wide ones) answer lookup_many as they
    # answer lookup; with writes behind, each still reads its own writes.
    from cachewarden.proxy.engine.index.base import Lookup, lookup_many

    for behind in (False, True):
        a, b = _two_indexes(redis_server, behind)
        toks = list(range(1, 40))
        ea = a.insert("x", toks, now=0)
        eb = b.insert("y", toks[:21], now=0)
        queries = [Lookup(a, "x", [*toks[:30], 0], 10), Lookup(b, "y", toks, 0), Lookup(a, "none", toks, 0)]
        got = [_t(m) for m in lookup_many(queries, now=1)]
        assert got == [(30, 30, ea, 39, 1.0), (21, 21, eb, 21, 1.0), NO_MATCH]
        assert got == [_t(q.index.lookup(q.scope, q.tokens, now=1, ttl=q.ttl)) for q in queries]
        local = [ResilientIndex(a, MemoryIndex(block_size=4)), ResilientIndex(b, MemoryIndex(block_size=4))]
        shared = [Lookup(local[0], "x", [*toks[:30], 0], 10), Lookup(local[1], "y", toks, 0)]
        assert [_t(m) for m in lookup_many(shared, now=1)] == got[:2]


def test_marks_of_both_ttl_classes_share_a_round_trip(
    redis_url: str, redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A breakpoint prompt asks for its 5-minute and its 1-hour marks (two scopes): marks_many sends
    # both before reading either (one round trip), through the resilient wrapper as the proxy has it,
    # and answers as one marks call each.
    from cachewarden.proxy.engine.index import redis_writes
    from cachewarden.proxy.engine.index.base import Marks, marks_many

    with redis_server.client() as c:
        c.flushall()
    primary = _index(redis_server, block_size=4, write_behind=True)
    index = ResilientIndex(primary, MemoryIndex(block_size=4))
    toks = list(range(20, 34))
    for scope, when in (("s", 10.0), ("s\x1f1h", 11.0)):
        index.insert(scope, toks, now=0)
        index.mark(scope, toks, [8 if scope == "s" else 12], now=when)
    primary.flush()
    index.fallback.clear()  # what the replica knows only from Redis (another replica's marks)
    order: list[str] = []
    ask, wait = redis_writes.Channel.ask, redis_writes.Channel.wait

    def logged_ask(self: Any, cmds: Any) -> Any:
        order.append("ask")
        return ask(self, cmds)

    def logged_wait(self: Any, ticket: Any) -> Any:
        order.append("wait")
        return wait(self, ticket)

    monkeypatch.setattr(redis_writes.Channel, "ask", logged_ask)
    monkeypatch.setattr(redis_writes.Channel, "wait", logged_wait)
    queries = [Marks(index, "s", toks, [4, 8, 12], 300), Marks(index, "s\x1f1h", toks, [4, 8, 12], 3600)]
    got = marks_many(queries, now=12)
    assert got == [{8: 2.0}, {12: 1.0}]
    assert order[:2] == ["ask", "ask"] and "ask" not in order[2:]
    assert got == [index.marks(q.scope, q.tokens, q.positions, now=12, ttl=q.ttl) for q in queries]


_edits = st.lists(
    st.tuples(
        st.sampled_from(["append", "change", "cut", "fresh"]),
        st.integers(min_value=0, max_value=10_000),
        st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=12),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    start=st.lists(st.integers(min_value=0, max_value=50), max_size=40),
    edits=_edits,
    block_size=st.sampled_from([1, 3, 4, 8]),
    hinted=st.booleans(),
)
def test_a_prompt_built_from_the_previous_one_is_prepared_as_from_scratch(
    start: list[int], edits: list[tuple[str, int, list[int]]], block_size: int, hinted: bool
) -> None:
    """``_prepare`` starts from the scope's previous prompt (its shared full blocks, and the partial
    block it extends) and takes the counter's ``derived`` hint: chain digests, member bytes and keys
    are still exactly those of a fresh index that never saw the previous prompt. No server needed:
    ``_prepare`` is pure (the client never connects)."""
    from cachewarden.proxy.engine.index.query import derived

    warm = RedisIndex(redis.Redis(port=1), block_size=block_size, secret=b"s")
    toks = tuple(start)
    warm._prepare("scope", toks)
    for kind, at, new in edits:
        before = toks
        at %= len(toks) + 1
        if kind == "append":
            toks = (*toks, *new)
        elif kind == "change":
            toks = (*toks[:at], *new, *toks[at + len(new) :])
        elif kind == "cut":
            toks = toks[:at]
        else:
            toks = tuple(new)
        shared = next((i for i, (a, b) in enumerate(zip(toks, before, strict=False)) if a != b), None)
        if hinted and kind != "fresh":
            # A true claim only (what the counter guarantees): the head both share.
            derived(toks, before, min(len(toks), len(before)) if shared is None else shared)
        got = warm._prepare("scope", toks)
        want = RedisIndex(redis.Redis(port=1), block_size=block_size, secret=b"s")._prepare("scope", toks)
        assert _prepared_fields(got) == _prepared_fields(want)


def _assert_packed_as_redis_py(calls: list[Any]) -> None:
    """Each call the index packed itself is the bytes redis-py sends for the same command."""
    pack = redis.Connection().pack_command
    for c in calls:
        assert c.resp == b"".join(pack("EVALSHA", c.script.sha, len(c.keys), *c.keys, *c.args))


def _prepared_fields(prep: Any) -> tuple[Any, ...]:
    """What a prepared prompt sends: every field but the prompt itself."""
    return (
        prep.root,
        prep.chain,
        prep.members,
        prep.nodes,
        prep.values,
        prep.packed,
        prep.digests,
        prep.keys,
        prep.blob,
    )


def test_a_turns_write_through_stored_blocks_is_the_general_one() -> None:
    # Every full block known stored: the write is built without a pass over the blocks; its
    # arguments and bytes are those the general construction makes (which a prompt with a block
    # not known stored takes). No server needed: nothing is sent.
    index = RedisIndex(redis.Redis(port=1), block_size=4, secret=b"s", write_behind=True)
    try:
        for toks in ((*range(1, 12),), (*range(1, 13),), (5,), (*range(1, 9),)):
            prep = index._prepare("scope", toks)
            index._known(prep.digests)
            fast = index._writes_of(prep, 2.5, "entry", 300.0)
            general = index._writes_of(prep._replace(keys=b""), 2.5, "entry", 300.0)
            assert len(fast) == len(general) == 1
            assert (fast[0].keys, fast[0].args, fast[0].groups) == (
                general[0].keys,
                general[0].args,
                general[0].groups,
            )
            assert fast[0].resp == general[0].resp
            assert fast[0].args[6] == b"-" * len(prep.digests) + b"g" * (
                len(prep.members) - len(prep.digests)
            )
    finally:
        index.close()


def test_a_one_call_prompts_lookup_and_write_are_what_redis_py_sends() -> None:
    # A prompt of one call a script on a channel has its calls put together from pieces made once
    # a chain of blocks (a conversation's turns that fill no block share them): the bytes must be
    # redis-py's for the same command, with a partial block or without, before and after a turn.
    from cachewarden.proxy.engine.index.query import derived

    index = RedisIndex(redis.Redis(port=1), block_size=4, secret=b"s", write_behind=True)
    try:
        before: tuple[int, ...] = ()
        for toks in ((*range(1, 10),), (*range(1, 11),), (*range(1, 13),), (7,), (7, 8, 9, 10)):
            if before and toks[: len(before)] == before:
                derived(toks, before, len(before))
            prep = index._prepare("scope", toks)
            index._known(prep.digests)
            calls = [next(index._walk("scope", toks, 3.0, 300))[0], *index._writes_of(prep, 2.5, "e", None)]
            assert prep.packs is not None
            _assert_packed_as_redis_py(calls)
            before = toks
    finally:
        index.close()


def test_a_walks_own_end_is_its_answer_and_any_other_stop_iteration_an_error(
    redis_url: str, redis_server: Any
) -> None:
    # One walk on a channel: a StopIteration raised by the caller's ``meanwhile`` (or the channel)
    # is an error of the call, never taken for the walk's end (which would answer None).
    from cachewarden.proxy.engine.index.base import Lookup

    index = _index(redis_server, block_size=4, write_behind=True)
    try:
        toks = tuple(range(10))
        index.insert("s", toks, now=0)
        index.flush()
        (got,) = index.lookup_many([Lookup(index, "s", toks, 0)], now=1, meanwhile=lambda: None)
        assert got.held_prefix_tokens == 10

        def leaks() -> None:
            next(iter(()))

        with pytest.raises(StopIteration):
            index.lookup_many([Lookup(index, "s", toks, 0)], now=1, meanwhile=leaks)
    finally:
        index.close()


def test_a_channels_write_replies_record_blocks_and_resend_what_redis_lost(
    redis_url: str, redis_server: Any
) -> None:
    # On a channel a write's reply is read by a later call: blocks it wrote with their bytes are
    # then known stored (the next write leaves their bytes out), and blocks a write left out that
    # Redis lost are sent again with their bytes, so another replica finds them exactly.
    index = _index(redis_server, block_size=4, write_behind=True)
    other = _index(redis_server, block_size=4)
    try:
        with redis_server.client() as c:
            c.flushall()
        toks = list(range(1, 23))
        index.insert("s", toks, now=0)
        index.flush()
        digests = index._prepare("s", toks).digests
        assert all(d in index._stored for d in digests)
        (write,) = index._writes_of(index._prepare("s", [*toks, 99]), 1.0, "e", None)
        assert write.args[6] == b"-" * len(digests) + b"g"  # the stored blocks' bytes left out
        with redis_server.client() as c:
            c.flushall()
        eid = index.insert("s", [*toks, 99], now=1)
        index.flush()  # reads the reply (the lost blocks), sends them again, reads that reply
        assert _t(other.lookup("s", [*toks[:10], 7, 7, 7], now=2, ttl=0)) == (10, 10, eid, 23, 1.0)
        assert _t(other.lookup("s", [*toks, 99, 5], now=2, ttl=0)) == (23, 23, eid, 23, 1.0)
    finally:
        index.close()
        other.close()


@settings(max_examples=150, deadline=None)
@given(
    start=st.lists(st.integers(0, 20), max_size=30),
    turns=st.lists(
        st.tuples(st.integers(0, 40), st.lists(st.integers(0, 20), max_size=9), st.booleans(), st.booleans()),
        max_size=10,
    ),
    block_size=st.sampled_from([1, 2, 3, 4, 8]),
    scan=st.sampled_from([1, 7, 256]),
    sweep=st.sampled_from([0, 5, 4096]),
)
def test_a_channels_prepared_turns_and_their_calls_are_as_from_scratch(
    start: list[int],
    turns: list[tuple[int, list[int], bool, bool]],
    block_size: int,
    scan: int,
    sweep: int,
) -> None:
    # With a channel a prepared prompt also holds its calls' pieces (``packs``): over turns cut and
    # extended, with the counter's hint or not, blocks known stored or not, every field equals a
    # fresh index's, and every lookup and write is the bytes redis-py packs. No server needed.
    from cachewarden.proxy.engine.index.query import derived

    kw: dict[str, Any] = {
        "block_size": block_size,
        "secret": b"s",
        "write_behind": True,
        "scan_limit": scan,
        "sweep_fields": sweep,
    }
    warm = RedisIndex(redis.Redis(port=1), **kw)
    try:
        toks = tuple(start)
        if toks:
            warm._prepare("scope", toks)
        for cut, new, know, hint in turns:
            before = toks
            toks = (*before[: len(before) - cut % (len(before) + 1)], *new)
            if not toks:
                continue
            if hint:
                same = next((i for i, (a, b) in enumerate(zip(toks, before, strict=False)) if a != b), None)
                derived(toks, before, min(len(toks), len(before)) if same is None else same)
            got = warm._prepare("scope", toks)
            fresh = RedisIndex(redis.Redis(port=1), **kw)
            try:
                want = fresh._prepare("scope", toks)
                assert (*_prepared_fields(got), got.packs) == (*_prepared_fields(want), want.packs)
            finally:
                fresh.close()
            if know:
                warm._known(got.digests)
            calls = [
                next(warm._walk("scope", toks, 3.0, 300))[0],
                *warm._writes_of(got, 2.5, "e", None if know else 300.0),
            ]
            _assert_packed_as_redis_py(calls)
    finally:
        warm.close()


def test_an_insert_asked_with_its_lookup_follows_it(redis_url: str, redis_server: Any) -> None:
    # Lookup.then_insert on the shared index: the joint lookups are answered first (they never
    # see the inserts), then each insert is sent (behind them on the channel).
    from cachewarden.proxy.engine.index.base import Insert, Lookup, lookup_many

    for behind in (False, True):
        a, b = _two_indexes(redis_server, behind)
        toks = list(range(1, 40))
        first = a.insert("x", toks[:21], now=0)
        then = Insert(now=1, entry_id="this-request", ttl=None)
        got = lookup_many([Lookup(a, "x", toks, 0, then), Lookup(b, "y", toks, 0, then)], now=1)
        assert [_t(m) for m in got] == [(21, 21, first, 21, 1.0), NO_MATCH]
        a.flush()
        b.flush()
        assert _t(a.lookup("x", toks, now=2, ttl=0)) == (39, 39, "this-request", 39, 1.0)
        assert _t(b.lookup("y", toks, now=2, ttl=0)) == (39, 39, "this-request", 39, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    a=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=30),
    b=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=30),
    turns=st.lists(
        st.tuples(st.booleans(), st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=9)),
        min_size=1,
        max_size=10,
    ),
)
def test_interleaved_conversations_of_one_scope_are_prepared_as_from_scratch(
    a: list[int], b: list[int], turns: list[tuple[bool, list[int]]]
) -> None:
    # Two conversations in one scope, turns taking turns: each starts from its own earlier prompt
    # (the counter's hint names it), not from the scope's last one, and is still exact.
    from cachewarden.proxy.engine.index.query import derived

    warm = RedisIndex(redis.Redis(port=1), block_size=4, secret=b"s")
    last = {True: tuple(a), False: tuple(b)}
    for toks in last.values():
        warm._prepare("scope", toks)
    for first, new in turns:
        before = last[first]
        toks = (*before[:-1], *new)  # the earlier prompt but its last token, then the new turn
        derived(toks, before, len(before) - 1)
        got = warm._prepare("scope", toks)
        want = RedisIndex(redis.Redis(port=1), block_size=4, secret=b"s")._prepare("scope", toks)
        assert _prepared_fields(got) == _prepared_fields(want)
        last[first] = toks


def test_common_tokens_is_the_longest_common_prefix() -> None:
    import random

    from cachewarden.proxy.engine.index.redis import _common_tokens

    rng = random.Random(5)
    for _ in range(3000):
        a = [rng.randrange(3) for _ in range(rng.randrange(40))]
        b = a[: rng.randrange(len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(40))]
        lcp = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        start, known = rng.randrange(lcp + 1), rng.randrange(lcp + 1)
        assert _common_tokens(a, b, start, known) == lcp


def test_script_calls_packed_by_the_index_are_what_redis_py_sends(redis_url: str, redis_server: Any) -> None:
    # On a channel the index packs its LOOKUP and WRITE calls itself, from node keys packed once;
    # the bytes must be redis-py's for the same command (a 601-block prompt: two calls a write).
    index = _index(redis_server, block_size=4, write_behind=True)
    toks = [*range(2401), 2**40, -5]
    calls: list[Any] = []
    index._send = calls.extend  # type: ignore[method-assign]  # the write calls, not sent
    index.insert("s", toks, now=1.0)
    calls.extend(next(index._walk("s", toks, 2.0, 300)))
    assert [c.script.sha for c in calls] == [WRITE.sha, WRITE.sha, LOOKUP.sha]
    _assert_packed_as_redis_py(calls)


def test_a_channel_reloads_its_scripts_after_a_script_flush(redis_url: str, redis_server: Any) -> None:
    # The channel reads replies itself: a NOSCRIPT reply must still be told from other errors
    # (a write is sent again behind the scripts; a lookup raises once, the next one works).
    toks = list(range(1, 11))
    index, other, _ = _written_again_after(redis_server, toks, [*toks, 11], lambda c: c.script_flush())
    assert other.lookup("s", [*toks, 11], now=2, ttl=0).held_prefix_tokens == 11
    with redis_server.client() as c:
        c.script_flush()
    with pytest.raises(redis.exceptions.NoScriptError):
        index.lookup("s", toks, now=2, ttl=0)
    assert index.lookup("s", toks, now=2, ttl=0).held_prefix_tokens == 10
    chan = index._chan
    assert chan is not None
    with pytest.raises(redis.ResponseError, match="wrong number of arguments") as raised:
        chan.wait(chan.ask([("HGET", b"k")]))  # a plain error reply: the connection stays
    assert not isinstance(raised.value, redis.exceptions.NoScriptError)
    assert index.lookup("s", toks, now=2, ttl=0).held_prefix_tokens == 10


@pytest.mark.parametrize("stored", [21, 33, 39])
@pytest.mark.parametrize("ttl", [0.0, 0.5])
def test_an_insert_sent_with_its_lookup_is_not_seen_by_it(
    redis_url: str, redis_server: Any, stored: int, ttl: float
) -> None:
    # Lookup.then_insert on a channel, whether one round trip answers the lookup or a second one
    # is needed (the walk stopped early, or the held prefix is partly expired: 21 tokens held of
    # 39, or ttl 0.5 at 1 s): the answers are memory's, and the insert is made.
    from cachewarden.proxy.engine.index.base import Insert, Lookup, lookup_many

    index = _index(redis_server, block_size=4, write_behind=True)
    other = _index(redis_server, block_size=4)
    memory = MemoryIndex(block_size=4)
    toks = list(range(1, 40))
    then = Insert(now=1, entry_id="this-request", ttl=None)
    for i in (index, memory):
        i.insert("x", toks[:stored], now=0, entry_id="first")
        i.insert("x", [*toks[:3], 99], now=0.8, entry_id="fresh")  # a live first block
    (got,) = lookup_many([Lookup(index, "x", toks, ttl, then)], now=1)
    (want,) = lookup_many([Lookup(memory, "x", toks, ttl, then)], now=1)
    assert _t(got) == _t(want)
    index.flush()
    assert _t(other.lookup("x", toks, now=2, ttl=0)) == (39, 39, "this-request", 39, 1.0)


def _replica(server: Any, block_size: int) -> ResilientIndex:
    """What ``open_index`` makes of a single Redis: a channel, writes behind, a local mirror."""
    primary = RedisIndex(server.client(), block_size=block_size, write_behind=True, read_own_writes=False)
    return ResilientIndex(primary, MemoryIndex(block_size=block_size))


@settings(max_examples=40, deadline=None)
@given(
    ops=REF.workload_st,
    block_size=st.sampled_from([1, 2, 4]),
    lose=st.sets(st.integers(min_value=0, max_value=60), max_size=3),
)
def test_inserts_sent_during_their_lookups_agree_with_reference(
    redis_server: Any, ops: list[tuple[object, ...]], block_size: int, lose: set[int]
) -> None:
    # Every lookup asks for its insert as the engine does (Lookup.then_insert), so the shared insert
    # goes out while its lookup is on its way wherever the local index settles that lookup
    # (insert_during_lookup). The answers are still the reference's (lookup, then insert), also when
    # Redis loses everything between two steps (``lose``): the walk that would see the insert sent
    # behind it leaves Redis' answer out, and the local index answers.
    with redis_server.client() as c:
        c.flushall()
    index = _replica(redis_server, block_size)
    primary = index.primary
    assert isinstance(primary, RedisIndex)

    def lose_redis(step: int) -> None:
        if step in lose:
            primary.flush()
            with redis_server.client() as c:
                c.flushall()
            primary._stored.clear()  # what it wrote is gone: a write sends every block's bytes again

    _agrees(index, ops, joint=True, before=lose_redis)
    assert index.errors_total == 0


def test_an_insert_goes_out_while_its_lookup_is_on_its_way(
    redis_url: str, redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A conversation's next turn on a replica: its local index settles the lookup (every block but
    # the last two held and live), so the shared insert is sent between the lookup's ask and the
    # read of its reply (while Redis runs the lookup, whose send woke it), and the lookup still
    # answers as if the insert came after it. The turn after that sees it, on another replica too.
    from cachewarden.proxy.engine.index import redis_writes
    from cachewarden.proxy.engine.index.base import Insert, Lookup, lookup_many

    with redis_server.client() as c:
        c.flushall()
    index = _replica(redis_server, 4)
    other = _index(redis_server, block_size=4)
    toks = list(range(1, 30))  # 7 full blocks and a partial one: the lookup carries the last two
    first = index.insert("x", toks[:25], now=0)
    order: list[str] = []
    for name in ("ask", "post", "wait"):
        real = getattr(redis_writes.Channel, name)

        def logged(self: Any, *a: Any, _real: Any = real, _name: str = name) -> Any:
            order.append(_name)
            return _real(self, *a)

        monkeypatch.setattr(redis_writes.Channel, name, logged)
    (got,) = lookup_many([Lookup(index, "x", toks, 0, Insert(1, "turn-2", None))], now=1)
    assert _t(got) == (25, 25, first, 25, 1.0)
    assert order == ["ask", "post", "wait"]
    index.primary.flush()  # type: ignore[attr-defined]
    assert _t(other.lookup("x", toks, now=2, ttl=0)) == (29, 29, "turn-2", 29, 1.0)
    # A prompt the local index does not settle (it shares only the first block, so Redis' walk may
    # need a second round trip): its insert follows the lookup's answer.
    order.clear()
    fresh = [*toks[:4], *range(100, 125)]
    lookup_many([Lookup(index, "x", fresh, 0, Insert(3, "fork", None))], now=3)
    assert order[-1] == "post" and order.count("post") == 1 and order.count("wait") == 2


def test_a_walk_that_an_early_insert_would_mislead_leaves_redis_out(
    redis_url: str, redis_server: Any
) -> None:
    # Redis lost the conversation (a flush, an eviction) while the replica's local index still holds
    # it: the insert goes out early (the local index settles the lookup), Redis' walk then stops in
    # the first block and would need a second round trip, which would see that insert: Redis'
    # answer is left out (counted) and the local one is the answer. The insert itself is made.
    from cachewarden.proxy.engine.index.base import Insert, Lookup, lookup_many

    index = _replica(redis_server, 4)
    primary = index.primary
    assert isinstance(primary, RedisIndex)
    toks = list(range(1, 30))
    first = index.insert("x", toks[:25], now=0)
    primary.flush()
    with redis_server.client() as c:
        c.flushall()
    primary._stored.clear()
    (got,) = lookup_many([Lookup(index, "x", toks, 0, Insert(1, "turn-2", None))], now=1)
    assert _t(got) == (25, 25, first, 25, 1.0)
    assert primary.early_retracted == 1 and index.errors_total == 0
    primary.flush()
    other = _index(redis_server, block_size=4)
    assert _t(other.lookup("x", toks, now=2, ttl=0)) == (29, 29, "turn-2", 29, 1.0)


class _Conn:
    """The part of a redis-py connection the channel's sends use: its socket, the fallback send."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.fallback: list[bytes] = []
        self.disconnected = False

    def send_packed_command(self, items: list[bytes], check_health: bool = True) -> None:
        self.fallback.append(b"".join(items))
        self._sock.sendall(b"".join(items))

    def disconnect(self) -> None:
        self.disconnected = True


def test_a_send_larger_than_the_socket_buffer_is_finished_by_redis_py() -> None:
    # The direct write takes what fits the socket's buffer (a socket with a timeout is non-blocking
    # underneath); the rest goes through redis-py's send, in order, nothing lost.
    import socket
    import threading

    from cachewarden.proxy.engine.index.redis_writes import _send_all

    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a.settimeout(2)
    data = bytes(range(256)) * 4096  # 1 MiB
    got = bytearray()

    def drain() -> None:
        while len(got) < len(data):
            got.extend(b.recv(65536))

    reader = threading.Thread(target=drain)
    conn = _Conn(a)
    try:
        _send_all(conn, b"hello")  # fits: written directly
        assert conn.fallback == []
        reader.start()
        _send_all(conn, data[5:])
        reader.join(10)
    finally:
        a.close()
        b.close()
    assert bytes(got) == b"hello" + data[5:]
    assert len(conn.fallback) == 1 and 0 < len(conn.fallback[0]) < len(data)


def test_a_send_on_a_closed_connection_is_redis_pys_connection_error() -> None:
    import socket

    from cachewarden.proxy.engine.index.redis_writes import _send_all

    a, b = socket.socketpair()
    a.settimeout(1)
    b.close()
    conn = _Conn(a)
    try:
        with pytest.raises(redis.ConnectionError, match="while writing to socket"):
            for _ in range(3):  # the first write may still land in the buffer
                _send_all(conn, b"x" * 1024)
    finally:
        a.close()
    assert conn.disconnected and conn.fallback == []


def test_a_read_with_nothing_waiting_keeps_the_socket_timeout() -> None:
    # A reply already there is read directly; none there yet: the socket's own wait, with its timeout.
    import socket

    from cachewarden.proxy.engine.index.redis_writes import _receive

    a, b = socket.socketpair()
    a.settimeout(0.05)
    buf = bytearray(16)
    try:
        b.sendall(b"+OK\r\n")
        assert buf[: _receive(a, buf)] == b"+OK\r\n"
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            _receive(a, buf)
        assert time.monotonic() - started >= 0.04
        b.close()
        assert _receive(a, buf) == 0  # closed by the peer: the caller's "connection closed"
    finally:
        a.close()


@pytest.mark.parametrize(
    ("entry_id", "now", "message"),
    [("a\x00b", 1.0, "NUL"), ("a", float("nan"), "finite"), ("a", float("inf"), "finite")],
)
def test_an_insert_redis_cannot_store_is_refused_and_writes_nothing(
    redis_server: Any, entry_id: str, now: float, message: str
) -> None:
    index = _index(redis_server, block_size=4)
    scope = "tenant\x1fopenai\x1fgpt-4.1\x1f"
    with pytest.raises(ValueError, match=message):
        index.insert(scope, list(range(10)), now=now, entry_id=entry_id)
    index.flush()
    assert index.lookup(scope, list(range(10)), now=2, ttl=0).held_prefix_tokens == 0
