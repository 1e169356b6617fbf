"""The reference cache driven directly (no HTTP): provider rules, TTLs, breakpoints, isolation."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from cachewarden.proxy.emulator.cache import CacheRequestError, ReferenceCache, ReferenceUsage, common_prefix
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Provider

TABLE = load_model_table()
COUNTER = PromptCounter(TABLE)
LONG = " ".join(f"Rule {i}: cite section {i} of the handbook and keep answers short." for i in range(200))


def run(
    cache: ReferenceCache, body: dict[str, Any], provider: Provider, now: float, key: str = "k"
) -> ReferenceUsage:
    prompt = parse_request(body, provider)
    tp = COUNTER.tokenize(prompt)
    usage = cache.process(key, prompt, tp, TABLE.lookup(prompt.model, provider).cache, now)
    assert usage.total == tp.count
    assert min(usage.cached, usage.write_5m, usage.write_1h, usage.uncached) >= 0
    return usage


def chat(*turns: str, model: str = "gpt-4.1", system: str = LONG) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"model": model, "messages": messages}


def claude(
    *blocks: str, breakpoints: tuple[int, ...] = (), auto: str | None = None, system: str = LONG, **extra: Any
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for i, text in enumerate(blocks):
        block: dict[str, Any] = {"type": "text", "text": text}
        if i in breakpoints:
            block["cache_control"] = {"type": "ephemeral"}
        content.append(block)
    body: dict[str, Any] = {
        "model": "claude-sonnet-5",
        "max_tokens": 10,
        "system": system,
        "messages": [{"role": "user", "content": content}],
        **extra,
    }
    if auto is not None:
        body["cache_control"] = {"type": "ephemeral", "ttl": auto}
    return body


def test_common_prefix() -> None:
    assert common_prefix((1, 2, 3), (1, 2, 4)) == 2
    assert common_prefix((), (1,)) == 0
    assert common_prefix((1, 2), (1, 2, 3)) == 2


# -- OpenAI automatic prefix caching ------------------------------------------------------------------


def test_openai_repeat_reads_whole_128_blocks() -> None:
    cache = ReferenceCache()
    first = run(cache, chat("Question?"), "openai-chat", 0)
    assert first == ReferenceUsage(0, 0, 0, first.total)
    second = run(cache, chat("Question?"), "openai-chat", 1)
    assert second.cached == second.total - second.total % 128
    assert second.cached >= 1024 and second.writes == 0


def test_openai_short_prompt_never_cached() -> None:
    cache = ReferenceCache()
    for t in range(3):
        assert run(cache, chat("hi", system="short"), "openai-chat", t).cached == 0


def test_openai_shared_prefix_then_divergence() -> None:
    cache = ReferenceCache()
    run(cache, chat("First question?"), "openai-chat", 0)
    usage = run(cache, chat("Another question entirely?"), "openai-chat", 1)
    # The system prompt is shared; the user turn is not.
    assert 1024 <= usage.cached < usage.total and usage.cached % 128 == 0


def test_openai_ttl_idle_expiry_and_refresh() -> None:
    cache = ReferenceCache()
    ttl = TABLE.lookup("gpt-4.1", "openai-chat").cache.ttl_seconds
    run(cache, chat("Q"), "openai-chat", 0)
    assert run(cache, chat("Q"), "openai-chat", ttl - 1).cached > 0  # refreshed at ttl - 1
    assert run(cache, chat("Q"), "openai-chat", 2 * ttl - 2).cached > 0
    assert run(cache, chat("Q"), "openai-chat", 3 * ttl).cached == 0


def test_openai_extended_retention_param() -> None:
    cache = ReferenceCache()
    body = {**chat("Q"), "prompt_cache_retention": "24h"}
    run(cache, body, "openai-chat", 0)
    assert run(cache, body, "openai-chat", 3 * 3600).cached > 0


def test_openai_isolation_by_key_model_and_cache_key() -> None:
    cache = ReferenceCache()
    run(cache, chat("Q"), "openai-chat", 0, key="org-a")
    assert run(cache, chat("Q"), "openai-chat", 1, key="org-b").cached == 0
    assert run(cache, chat("Q", model="gpt-4o"), "openai-chat", 1, key="org-a").cached == 0
    assert run(cache, {**chat("Q"), "prompt_cache_key": "x"}, "openai-chat", 1, key="org-a").cached == 0
    assert run(cache, chat("Q"), "openai-chat", 1, key="org-a").cached > 0


def test_responses_and_chat_usage_totals() -> None:
    cache = ReferenceCache()
    body = {"model": "gpt-4.1", "instructions": LONG, "input": "Question?"}
    run(cache, body, "openai-responses", 0)
    assert run(cache, body, "openai-responses", 1).cached >= 1024


# -- OpenAI GPT-5.6+ breakpoint caching ----------------------------------------------------------------


def test_gpt56_implicit_breakpoint_writes_then_reads_earlier_turn() -> None:
    cache = ReferenceCache()
    first = run(cache, chat("Q1", model="gpt-5.6"), "openai-chat", 0)
    assert first.cached == 0 and first.write_5m > 1024
    second = run(cache, chat("Q1", "A1", "Q2", model="gpt-5.6"), "openai-chat", 1)
    # Reads the previous turn's implicit breakpoint exactly (no 128 rounding), writes the rest.
    assert second.cached == first.write_5m
    assert second.write_5m > 0 and second.uncached > 0


def test_gpt56_explicit_mode_without_breakpoints_does_not_cache() -> None:
    cache = ReferenceCache()
    body = {**chat("Q1", model="gpt-5.6"), "prompt_cache_options": {"mode": "explicit"}}
    for t in range(2):
        assert run(cache, body, "openai-chat", t) == ReferenceUsage(0, 0, 0, run_count(body))


def run_count(body: dict[str, Any]) -> int:
    return COUNTER.tokenize(parse_request(body, "openai-chat")).count


# -- Anthropic breakpoints ------------------------------------------------------------------------------


def test_anthropic_write_then_read() -> None:
    cache = ReferenceCache()
    first = run(cache, claude("Question?", breakpoints=(0,)), "anthropic", 0)
    assert first.cached == 0 and first.write_5m > 1024 and first.write_1h == 0
    second = run(cache, claude("Question?", breakpoints=(0,)), "anthropic", 10)
    assert second.cached == first.write_5m and second.writes == 0
    assert second.uncached == first.uncached  # the tokens after the last breakpoint


def test_anthropic_no_breakpoint_no_cache() -> None:
    cache = ReferenceCache()
    for t in range(2):
        usage = run(cache, claude("Question?"), "anthropic", t)
        assert usage.cached == 0 and usage.writes == 0


def test_anthropic_below_minimum_is_silently_uncached() -> None:
    cache = ReferenceCache()
    for t in range(2):
        usage = run(cache, claude("Question?", breakpoints=(0,), system="short system"), "anthropic", t)
        assert (usage.cached, usage.writes) == (0, 0)


def test_anthropic_automatic_caching_follows_the_conversation() -> None:
    cache = ReferenceCache()
    first = run(cache, claude("Q1", auto="5m"), "anthropic", 0)
    assert first.write_5m > 1024
    second = run(cache, claude("Q1", "more", auto="5m"), "anthropic", 1)
    assert second.cached == first.write_5m and 0 < second.write_5m < 20


def test_anthropic_ttl_5m_expires_and_hit_refreshes() -> None:
    cache = ReferenceCache()
    body = claude("Q", breakpoints=(0,))
    run(cache, body, "anthropic", 0)
    assert run(cache, body, "anthropic", 299).cached > 0
    assert run(cache, body, "anthropic", 598).cached > 0  # refreshed at 299
    assert run(cache, body, "anthropic", 898).cached == 0
    assert run(cache, body, "anthropic", 899).cached > 0  # rewritten at 898


def test_anthropic_1h_ttl_and_split_writes() -> None:
    cache = ReferenceCache()
    body = claude("Q", "R" * 50, breakpoints=(1,), auto=None)
    body["system"] = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    first = run(cache, body, "anthropic", 0)
    assert first.write_1h > 1024 and 0 < first.write_5m < 100
    later = run(cache, body, "anthropic", 1800)  # the 5m entry is gone, the 1h one lives
    assert later.cached == first.write_1h and later.write_5m == first.write_5m


def test_anthropic_lookback_of_20_blocks() -> None:
    blocks = [f"block {i}" for i in range(40)]
    cache = ReferenceCache()
    written = run(cache, claude(*blocks[:15], breakpoints=(14,)), "anthropic", 0)
    # Breakpoint on block index 34: checks 34..15 - the entry at 14 is one position outside.
    miss = run(cache, claude(*blocks[:35], breakpoints=(34,)), "anthropic", 1)
    assert miss.cached == 0
    cache = ReferenceCache()
    run(cache, claude(*blocks[:15], breakpoints=(14,)), "anthropic", 0)
    hit = run(cache, claude(*blocks[:34], breakpoints=(33,)), "anthropic", 1)  # checks 33..14
    assert hit.cached == written.write_5m


def test_anthropic_tool_choice_keeps_tools_and_system() -> None:
    cache = ReferenceCache()
    body = claude("Q", breakpoints=(0,))
    body["system"] = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    first = run(cache, body, "anthropic", 0)
    changed = {**body, "tool_choice": {"type": "any"}}
    second = run(cache, changed, "anthropic", 1)
    assert 0 < second.cached < first.writes  # the system entry still hits, the messages do not


def test_anthropic_rejects_too_many_breakpoints_and_ttl_order() -> None:
    cache = ReferenceCache()
    with pytest.raises(CacheRequestError, match="maximum of 4"):
        run(cache, claude(*"abcde", breakpoints=(0, 1, 2, 3, 4)), "anthropic", 0)
    with pytest.raises(CacheRequestError, match="no slot"):
        run(cache, claude(*"abcde", breakpoints=(0, 1, 2, 3), auto="5m"), "anthropic", 0)
    body = claude("a", "b", breakpoints=(0,))
    body["messages"][0]["content"][1]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    with pytest.raises(CacheRequestError, match="must not come after"):
        run(cache, body, "anthropic", 0)


def test_auto_cache_same_ttl_as_explicit_is_a_no_op() -> None:
    cache = ReferenceCache()
    usage = run(cache, claude("a", "b", breakpoints=(1,), auto="5m"), "anthropic", 0)
    assert usage.write_5m > 1024


def test_anthropic_isolation_by_key() -> None:
    cache = ReferenceCache()
    body = claude("Q", breakpoints=(0,))
    run(cache, body, "anthropic", 0, key="a")
    assert run(cache, body, "anthropic", 1, key="b").cached == 0
    assert run(cache, body, "anthropic", 2, key="a").cached > 0


# -- engines --------------------------------------------------------------------------------------------


def test_block_engine_never_caches_the_last_token() -> None:
    cache = ReferenceCache()
    body = chat("Q", system="word " * 100)
    prompt = parse_request(body, "openai-chat")
    tp = COUNTER.tokenize(prompt)
    rules = replace(TABLE.profiles["vllm"], granularity=16)
    cache.process("k", prompt, tp, rules, 0)
    usage = cache.process("k", prompt, tp, rules, 1)
    assert usage.cached == (len(tp.tokens) - 1) // 16 * 16


def test_reset_forgets_everything() -> None:
    cache = ReferenceCache()
    run(cache, chat("Q"), "openai-chat", 0)
    cache.reset()
    assert run(cache, chat("Q"), "openai-chat", 1).cached == 0
