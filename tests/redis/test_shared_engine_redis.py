"""Two proxy replicas (two Engines) sharing one redis-server: predictions cross replicas, tenants
do not, and losing Redis costs shared predictions, never an answer."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.index.open_index import open_index
from cachewarden.proxy.engine.index.resilient import ResilientIndex

pytest.importorskip("redis", reason="the redis package is not installed (pip install 'cachewarden[redis]')")

POLICY = "\n".join(
    f"Rule {i}: answer questions about topic {i} using section {i} of the handbook." for i in range(90)
)
TOOLS = [
    {
        "name": f"lookup_{i}",
        "description": f"Look up record kind {i} in the booking system. " * 4,
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    }
    for i in range(6)
]


def _conversation(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i in range(turns):
        msgs += [
            {"role": "user", "content": f"Question {i}?"},
            {"role": "assistant", "content": f"Answer {i}."},
        ]
    return [*msgs, {"role": "user", "content": f"Question {turns}?"}]


def chat(turns: int) -> Any:
    return parse_request(
        {"model": "gpt-4.1", "messages": [{"role": "system", "content": POLICY}, *_conversation(turns)]}
    )


def anthropic(turns: int) -> Any:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "tools": TOOLS, "system": POLICY}
    return parse_request({**body, "messages": _conversation(turns), "cache_control": {"type": "ephemeral"}})


def replica(url: str | None, **kw: Any) -> Engine:
    # As build_engine makes it: the scoped index shared, the model-blind one (attribution's) local.
    return Engine(index=open_index(url, **kw), wide_index=open_index(None, **kw))


def _flush(engine: Any) -> None:
    """Waits for the replica's queued Redis writes (open_index writes behind the analysis), as the
    next request another replica sees would, a few milliseconds later."""
    for index in (engine.index, engine.wide_index):
        flush = getattr(getattr(index, "primary", None), "flush", None)
        if flush is not None:
            flush()


def test_openai_prefix_seen_on_a_is_a_hit_on_b(redis_url: str) -> None:
    a, b, alone = replica(redis_url), replica(redis_url), replica(None)
    first = a.analyse(chat(1), tenant="t", now=1000)
    _flush(a)
    second = b.analyse(chat(2), tenant="t", now=1005)
    # Replica B predicts what one engine that saw both requests predicts.
    single = Engine()
    single.analyse(chat(1), tenant="t", now=1000)
    expected = single.analyse(chat(2), tenant="t", now=1005)
    assert second.prediction.cached_tokens == expected.prediction.cached_tokens > 0
    assert _fields(second.match) == (
        *_fields(expected.match)[:2],
        first.entry_id,
        *_fields(expected.match)[3:],
    )
    # B never saw A's prompt: the entry is A's (by id), B's history cannot diff against it.
    assert second.previous is None
    # A replica on its own index would have called it cold.
    assert alone.analyse(chat(2), tenant="t", now=1005).prediction.cached_tokens == 0


def _fields(m: Any) -> tuple[Any, ...]:
    return (m.common_prefix_tokens, m.held_prefix_tokens, m.entry_id, m.entry_tokens, m.age_seconds)


def test_anthropic_breakpoint_written_on_a_is_read_on_b(redis_url: str) -> None:
    a, b = replica(redis_url), replica(redis_url)
    first = a.analyse(anthropic(1), tenant="t", now=1000)
    _flush(a)
    written = first.prediction.cache_write_tokens
    assert written > 0
    second = b.analyse(anthropic(2), tenant="t", now=1030)
    assert second.prediction.cached_tokens == written  # found through the marks A stored
    assert second.prediction.limits == ()
    # And back: B's write is A's read.
    _flush(b)
    third = a.analyse(anthropic(3), tenant="t", now=1060)
    assert (
        third.prediction.cached_tokens
        == second.prediction.cached_tokens + second.prediction.cache_write_tokens
    )


def test_tenants_never_share_through_redis(redis_url: str) -> None:
    a, b = replica(redis_url), replica(redis_url)
    a.analyse(chat(1), tenant="tenant-a", now=1000)
    a.analyse(anthropic(1), tenant="tenant-a", now=1000)
    _flush(a)
    other = b.analyse(chat(2), tenant="tenant-b", now=1001)
    assert other.prediction.cached_tokens == 0 and other.match.held_prefix_tokens == 0
    other = b.analyse(anthropic(2), tenant="tenant-b", now=1001)
    assert other.prediction.cached_tokens == 0 and other.match.held_prefix_tokens == 0
    assert b.analyse(chat(2), tenant="tenant-a", now=1002).prediction.cached_tokens > 0


def test_expiry_on_a_shared_prefix(redis_url: str) -> None:
    a, b = replica(redis_url), replica(redis_url)
    a.analyse(chat(1), tenant="t", now=1000)
    _flush(a)
    late = b.analyse(chat(2), tenant="t", now=1000 + 10_000)
    assert late.prediction.cached_tokens == 0
    assert late.match.held_prefix_tokens > 0 and "expired" in late.prediction.limits


def _wait_until(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_redis_down_and_back(own_redis: Any) -> None:
    stages: list[str] = []
    url = own_redis.url + "?retry=0.1"
    a, b = replica(url, on_outage=stages.append), replica(url, on_outage=stages.append)
    a.analyse(chat(1), tenant="t", now=1000)
    _flush(a)
    assert b.analyse(chat(2), tenant="t", now=1001).prediction.cached_tokens > 0

    own_redis.stop()
    started = time.monotonic()
    # Still answering, from each replica's local index: A holds its own history, B its own.
    assert a.analyse(chat(2), tenant="t", now=1002).prediction.cached_tokens > 0
    assert b.analyse(chat(5), tenant="t", now=1003).prediction.cached_tokens > 0  # B saw chat(2)
    fresh = b.analyse(chat(1), tenant="u", now=1004)
    assert fresh.prediction.cached_tokens == 0
    assert time.monotonic() - started < 2.0  # no request waited on Redis for long
    index = a.index
    assert isinstance(index, ResilientIndex) and not index.healthy and index.outages_total == 1
    assert isinstance(b.index, ResilientIndex) and b.index.outages_total == 1
    assert stages and set(stages) <= {"lookup", "insert", "mark", "marks"}

    own_redis.start()  # same port, empty: what was written during the outage is local only
    time.sleep(0.25)  # past the retry delay
    a.analyse(chat(7), tenant="v", now=1010)
    _wait_until(lambda: (a.analyse(chat(7), tenant="v", now=1011), index.healthy)[1])
    assert index.healthy and index.outages_total == 1
    b_index = b.index
    assert isinstance(b_index, ResilientIndex)
    _wait_until(lambda: (b.analyse(chat(7), tenant="x", now=1012), b_index.healthy)[1])
    # Shared predictions resume: a prefix A writes now is a hit on B, which never saw it.
    a.analyse(chat(3), tenant="w", now=1020)
    _flush(a)
    assert b.analyse(chat(4), tenant="w", now=1021).prediction.cached_tokens > 0
    assert b_index.healthy and b_index.outages_total == 1
