"""Chat Completions renders a tool call's arguments as compact JSON (framing.compact_arguments).

Clients that send ``json.dumps`` output (``{"value": "one"}``) were counted over by exactly the tokens
the spaces add; Responses items keep the string as sent. Record cases: the training projects of
../shared/data/recorded (recorded_counts) and the dev half of the cassettes of other projects
(cassette_counts); both skip where their third-party data is absent.
"""

from __future__ import annotations

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.rendering import compact_json
from cassette_counts import counted
from recorded_counts import DATA, assert_count_exact

RECORDED = {
    # gpt-4.1-mini, crewAI's native tool calling, one call '{"input_text": "Iteration 1"}'
    "gpt-4.1-mini": "crewAIInc/crewAI:lib/crewai/tests/cassettes/tools/"
    "test_max_usage_count_is_respected.yaml#1",
    # gpt-4o-mini, one call '{"value": "one"}'
    "gpt-4o-mini": "crewAIInc/crewAI:lib/crewai/tests/cassettes/agents/"
    "TestMaxUsageCountWithNativeToolCalling.test_max_usage_count_limit_enforced_in_native_tool_calling.yaml#1",
    # gpt-4o, Mirascope, '{"n": 100}' in Chat Completions ...
    "gpt-4o": "Mirascope/mirascope:python/tests/e2e/input/cassettes/"
    "test_resume_with_override_thinking_and_tools/openai_gpt_4o_completions.yaml#1",
    # ... and the same call as a Responses function_call item: counted as sent
    "gpt-4o-responses": "responses:Mirascope/mirascope:python/tests/e2e/input/cassettes/"
    "test_resume_with_override_thinking_and_tools/openai_gpt_4o_responses.yaml#1",
}

CASSETTES = {
    # simonw/llm (gpt-4o-mini, '{"country": "Crumpet"}')
    "llm-gpt-4o-mini": "simonw/llm:tests/cassettes/test_tools/test_tool_use_chain_of_two_calls.yaml#1",
    # langchain through openllmetry (gpt-4.1-nano, '{"location": "San Francisco"}')
    "langchain-gpt-4.1-nano": "traceloop/openllmetry:packages/opentelemetry-instrumentation-langchain/"
    "tests/cassettes/test_tool_calls/test_tool_calls_with_history.yaml#0",
    # haystack through openinference (gpt-4o-mini, '{"query": "Python tutorials"}')
    "haystack-gpt-4o-mini": "Arize-ai/openinference:python/instrumentation/"
    "openinference-instrumentation-haystack/tests/openinference/haystack/cassettes/"
    "test_instrumentor/test_agent_run_component_spans[False].yaml#1",
}


@pytest.mark.skipif(not DATA.exists(), reason="recorded data not present")
@pytest.mark.parametrize("case", sorted(RECORDED))
def test_recorded(case: str) -> None:
    assert_count_exact(RECORDED, case)


@pytest.mark.parametrize("case", sorted(CASSETTES))
def test_cassettes(case: str) -> None:
    got, reported = counted(CASSETTES[case])
    assert got == reported


def test_compact_json() -> None:
    assert compact_json('{"a": 1, "b": [1, 2], "c": "x y"}') == '{"a":1,"b":[1,2],"c":"x y"}'
    assert compact_json('{"é": "ü"}') == '{"é":"ü"}'
    assert compact_json("not json {") == "not json {"


def _call_body(arguments: str) -> dict[str, object]:
    return {
        "model": "gpt-4o",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
    }


def test_spaced_and_compact_arguments_count_alike_in_chat_only() -> None:
    counter = PromptCounter(load_model_table())
    spaced, compact = '{"value": "one", "n": 2}', '{"value":"one","n":2}'
    chat = [
        counter.tokenize(parse_request(_call_body(a), provider="openai-chat")).count
        for a in (spaced, compact)
    ]
    assert chat[0] == chat[1]
    responses = [
        counter.tokenize(
            parse_request(
                {
                    "model": "gpt-4o",
                    "input": [
                        {"role": "user", "content": "go"},
                        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": a},
                    ],
                },
                provider="openai-responses",
            )
        ).count
        for a in (spaced, compact)
    ]
    assert responses[0] > responses[1]
