"""The engine end to end on parsed requests: hits on continued conversations, scopes, salting."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.engine import Engine, salted_tokens, scoped_stream

POLICY = "\n".join(
    f"Rule {i}: answer questions about topic {i} using section {i} of the handbook, quote it."
    for i in range(90)
)
TOOLS = [
    {
        "name": f"lookup_{i}",
        "description": f"Look up record kind {i} in the booking system. " * 4,
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    }
    for i in range(6)
]


def conversation(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i in range(turns):
        msgs += [
            {"role": "user", "content": f"Question {i}?"},
            {"role": "assistant", "content": f"Answer {i}."},
        ]
    return [*msgs, {"role": "user", "content": f"Question {turns}?"}]


def chat(turns: int, model: str = "gpt-4.1", **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "system", "content": POLICY}, *conversation(turns)],
        **extra,
    }


def anthropic(turns: int, model: str = "claude-sonnet-4-5", **extra: Any) -> dict[str, Any]:
    body = {
        "model": model,
        "max_tokens": 64,
        "tools": TOOLS,
        "system": POLICY,
        "messages": conversation(turns),
    }
    return {**body, "cache_control": {"type": "ephemeral"}, **extra}


@pytest.fixture
def engine() -> Engine:
    return Engine()


def test_openai_continued_conversation_hits_in_128_token_steps(engine: Engine) -> None:
    first = engine.analyse(parse_request(chat(1)), now=0)
    assert first.prediction.cached_tokens == 0 and first.previous is None
    second = engine.analyse(parse_request(chat(2)), now=5)
    p = second.prediction
    assert second.match.common_prefix_tokens >= first.tokenized.count - 10
    assert p.cached_tokens % 128 == 0 and p.cached_tokens > 0
    assert p.cached_tokens <= second.match.common_prefix_tokens < p.cached_tokens + 128
    assert p.cached_tokens + p.cache_write_tokens + p.uncached_tokens == second.tokenized.count
    assert second.previous is not None and second.previous.entry_id == first.entry_id


def test_openai_expiry_after_ttl(engine: Engine) -> None:
    engine.analyse(parse_request(chat(1)), now=0)
    late = engine.analyse(parse_request(chat(2)), now=10_000)
    assert late.prediction.cached_tokens == 0
    assert late.match.held_prefix_tokens > 0 and "expired" in late.prediction.limits


def test_anthropic_automatic_caching_reads_previous_write(engine: Engine) -> None:
    first = engine.analyse(parse_request(anthropic(1)), now=0)
    written = first.prediction.cache_write_tokens
    # Everything up to the last block is written; only the reply priming after it is uncached.
    assert (
        0 < first.prediction.uncached_tokens < 10
        and written == first.tokenized.count - first.prediction.uncached_tokens
    )
    second = engine.analyse(parse_request(anthropic(2)), now=30)
    # Turn 2 appends two messages after "Question 1?", where turn 1's automatic breakpoint sat:
    # it reads everything turn 1 wrote and writes the new turns.
    assert second.prediction.cached_tokens == written
    assert second.prediction.cache_write_tokens > 0
    assert second.prediction.limits == ()


def test_tenants_never_share(engine: Engine) -> None:
    engine.analyse(parse_request(chat(1)), tenant="a", now=0)
    other = engine.analyse(parse_request(chat(2)), tenant="b", now=1)
    assert other.prediction.cached_tokens == 0
    assert other.match.held_prefix_tokens == 0 and other.previous is None


def test_model_switch_is_a_miss_but_finds_the_previous_request(engine: Engine) -> None:
    first = engine.analyse(parse_request(chat(1, model="gpt-4.1")), now=0)
    switched = engine.analyse(parse_request(chat(2, model="gpt-4o")), now=1)
    assert switched.prediction.cached_tokens == 0
    assert switched.previous is not None and switched.previous.entry_id == first.entry_id
    assert switched.previous.prompt.model == "gpt-4.1"


def _salted(body: dict[str, Any]) -> tuple[Sequence[int], Any, Any]:
    engine = Engine()
    prompt = parse_request(body)
    tp = engine.counter.tokenize(prompt)
    return salted_tokens(prompt, tp), tp, prompt


def test_anthropic_tool_choice_keeps_tools_and_system_cached() -> None:
    sa, tp, prompt = _salted(anthropic(1, tool_choice={"type": "tool", "name": "lookup_0"}))
    sb, _, _ = _salted(anthropic(1, tool_choice={"type": "tool", "name": "lookup_1"}))
    first_message = next(tp.spans[i][0] for i, s in enumerate(prompt.segments) if s.message_index is not None)
    assert first_message > 0
    assert list(sa[:first_message]) == list(sb[:first_message])
    assert sa[first_message] != sb[first_message]
    assert list(sa[first_message + 1 :]) == list(sb[first_message + 1 :])


def test_anthropic_speed_invalidates_the_system_prompt_too() -> None:
    fast, tp, prompt = _salted(anthropic(1, speed="fast"))
    standard, _, _ = _salted(anthropic(1, speed="standard"))
    tools_end = max(
        end for (_, end), seg in zip(tp.spans, prompt.segments, strict=True) if seg.kind == "tool"
    )
    assert list(fast[:tools_end]) == list(standard[:tools_end])
    assert fast[tools_end] != standard[tools_end]


def test_openai_params_salt_the_whole_prompt() -> None:
    low = parse_request(chat(1, model="o3", reasoning_effort="low"))
    high = parse_request(chat(1, model="o3", reasoning_effort="high"))
    engine = Engine()
    assert (
        salted_tokens(low, engine.counter.tokenize(low))[0]
        != salted_tokens(high, engine.counter.tokenize(high))[0]
    )


def test_openai_params_salt_the_scope_and_the_index_walks_the_counters_stream() -> None:
    # Salting the first token salts the whole prompt: the same matches as a scope of its own, without
    # a salted copy of the stream (test_incremental compares the matches with the salted stream's).
    engine = Engine()
    low, high, none = (
        parse_request(chat(1, model="o3", **extra))
        for extra in ({"reasoning_effort": "low"}, {"reasoning_effort": "high"}, {})
    )
    scopes = set()
    for prompt in (low, high, none):
        tp = engine.counter.tokenize(prompt)
        scope, stream = scoped_stream(Engine.scope("t", prompt), prompt, tp)
        assert stream is tp.tokens
        scopes.add(scope)
    assert len(scopes) == 3 and Engine.scope("t", none) in scopes
    first = engine.analyse(low, tenant="t", now=0)
    assert (
        engine.analyse(
            parse_request(chat(2, model="o3", reasoning_effort="low")), tenant="t", now=1
        ).match.held_prefix_tokens
        > 0
    )
    assert (
        engine.analyse(
            parse_request(chat(2, model="o3", reasoning_effort="high")), tenant="t", now=2
        ).match.held_prefix_tokens
        == 0
    )
    assert first.scope == Engine.scope("t", low)  # what the analysis reports is the scope unsalted


def _system_breakpoint(ttl: str, turns: int) -> dict[str, Any]:
    body = anthropic(turns)
    del body["cache_control"]
    body["system"] = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral", "ttl": ttl}}]
    return body


@pytest.mark.parametrize(("ttl", "hit"), [("1h", True), ("5m", False)])
def test_anthropic_ttl_classes(engine: Engine, ttl: str, hit: bool) -> None:
    first = engine.analyse(parse_request(_system_breakpoint(ttl, 1)), now=0)
    assert first.prediction.cache_write_tokens > 0
    assert (first.prediction.cache_write_1h_tokens > 0) == (ttl == "1h")
    later = engine.analyse(parse_request(_system_breakpoint(ttl, 2)), now=600)
    assert (later.prediction.cached_tokens == first.prediction.cache_write_tokens) == hit
    if not hit:
        assert later.prediction.cached_tokens == 0


def test_history_is_bounded_by_tokens_held() -> None:
    engine = Engine(history_tokens=20_000)
    first = engine.analyse(parse_request(chat(1)), now=0)
    for turn in range(2, 12):
        engine.analyse(parse_request(chat(turn)), now=turn)
    assert engine._held_tokens <= 20_000
    assert engine.history(first.entry_id, "default") is None
    latest = engine.analyse(parse_request(chat(12)), now=12)
    assert engine.history(latest.entry_id, "default") is not None
