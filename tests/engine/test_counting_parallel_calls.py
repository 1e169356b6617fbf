"""Parallel calls in Chat Completions: one multi_tool_use.parallel call, one message of results.

Where the rule comes from is in proxy/engine/rendering.py (parallel_call_piece). Record cases are
from the training projects and the "dev" halves (../shared/data/recorded, read in place; the VCR
cassettes of bench/cassette_sources.py, unpacked where present): each skips where its third-party data
is absent. The data-free tests spell the rendering out as text, so they check the counter against
the rule, not against itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter, _parallel_run, framing_for
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.tokenizers import get_tokenizer
from cassette_counts import counted
from recorded_counts import DATA, assert_count_exact

CREWAI = "crewAIInc/crewAI:lib/crewai/tests/cassettes/"
RECORD_CASES = {
    # two calls of one tool (gpt-4o; the TypeScript client's gpt-4o-mini twin)
    "mirascope-two-calls": "Mirascope/mirascope:python/tests/e2e/output/cassettes/test_call_with_tools/"
    "openai_gpt_4o_completions/sync.yaml#1",
    "mirascope-two-calls-4o-mini": "Mirascope/mirascope:typescript/tests/e2e/output/cassettes/tools/"
    "openai_completions/calls-tool-and-resumes-with-results.har#1",
    # gpt-5-nano (harmony framing), three calls: 8 over as three messages
    "gpt-5-nano-three-calls": CREWAI + "agents/TestOpenAINativeToolCalling."
    "test_openai_parallel_native_tool_calling_test_crew.yaml#1",
    # three calls of three tools (gpt-4o-mini), results with a name the API ignores
    "crewai-three-calls": CREWAI + "agents/TestOpenAINativeToolCalling."
    "test_openai_parallel_native_tool_calling_test_agent_kickoff.yaml#1",
    # long results with newlines and quotes: escaped as JSON strings in the array (61 under before)
    "crewai-long-results": CREWAI + "test_hierarchical_verbose_manager_agent.yaml#3",
    # three calls after an earlier single call (gpt-4o)
    "crewai-after-a-single-call": CREWAI + "utilities/TestOpenAIStructuredPlanning."
    "test_openai_research_workflow_generates_steps.yaml#3",
    # pydantic-ai, held-out dev half: two tools
    "pydantic-ai-two-tools": "pydantic/pydantic-ai:tests/cassettes/test_prefect/"
    "test_prefect_agent_with_hitl_tool_sync.yaml#1",
}

CASSETTE_CASES = {
    # no `tools` in the request: the history's parallel calls render all the same (gpt-4o-mini)
    "otel-no-tools": "open-telemetry/opentelemetry-python-contrib:instrumentation-genai/"
    "opentelemetry-instrumentation-openai-v2/tests/cassettes/"
    "test_async_chat_completion_tool_calls_no_content.yaml#1",
    "ellmer-4.1-nano": "tidyverse/ellmer:tests/testthat/_vcr/openai-tool.yml#1",
    # results that are JSON objects: re-dumped with Python's defaults (", ", ": ", "72\u00b0F")
    "activeagent-json-results": "activeagents/activeagent:test/fixtures/vcr_cassettes/integration/open_ai/"
    "chat/common_format/tools_test/test_agent_common_format_multiple_tools.yml#1",
    # cl100k (gpt-3.5-turbo): string results with non-ASCII escaped
    "ruby-openai-gpt-3.5": "alexrudall/ruby-openai:spec/fixtures/cassettes/"
    "gpt-3_5-turbo_multiple_tool_calls_full_conversation.yml#1",
}


@pytest.mark.skipif(not DATA.exists(), reason="recorded data (../shared/data/recorded) not present")
@pytest.mark.parametrize("case", sorted(RECORD_CASES))
def test_recorded_parallel_calls_count_exactly(case: str) -> None:
    assert_count_exact(RECORD_CASES, case)


@pytest.mark.parametrize("case", sorted(CASSETTE_CASES))
def test_cassette_parallel_calls_count_exactly(case: str) -> None:
    got, reported = counted(CASSETTE_CASES[case])
    assert got == reported


ASK = {"role": "user", "content": "Weather in Paris and Rome?"}


def _call(k: int, city: str) -> dict[str, Any]:
    arguments = json.dumps({"city": city})  # sent with spaces; rendered compact
    return {"id": f"call_{k}", "type": "function", "function": {"name": "weather", "arguments": arguments}}


def _count(messages: list[dict[str, Any]], model: str = "gpt-4o") -> int:
    body = {"model": model, "messages": messages}
    return PromptCounter(load_model_table()).tokenize(parse_request(body, provider="openai-chat")).count


def _tokens(text: str, encoding: str = "o200k_base") -> int:
    return len(get_tokenizer(encoding).encode(text))


def test_two_calls_and_their_results_are_one_wrapper_call_and_one_message() -> None:
    calls = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris"), _call(1, "Rome")]}
    results = [
        {"role": "tool", "tool_call_id": "call_0", "content": "Sunny, 24°C"},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky":"rain","c":18}'},
    ]
    wrapper = (
        '{"tool_uses":[{"recipient_name":"functions.weather","parameters":{"city":"Paris"}},'
        '{"recipient_name":"functions.weather","parameters":{"city":"Rome"}}]}'
    )
    # A string as a JSON string (non-ASCII kept); a JSON object as Python dumps it by default.
    merged = '["Sunny, 24°C", {"sky": "rain", "c": 18}]'
    call_message = 3 + _tokens("assistant") + _tokens(" to=multi_tool_use.parallel") + 1 + _tokens(wrapper)
    result_message = 3 + _tokens("multi_tool_use.parallel") + 2 + _tokens(merged)
    assert _count([ASK, calls, *results]) - _count([ASK]) == call_message + result_message


def test_a_single_call_is_still_a_message_of_its_own() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris")]}
    result = {"role": "tool", "tool_call_id": "call_0", "content": "Sunny"}
    call_message = (
        3 + _tokens("assistant") + _tokens(" to=functions.weather") + 1 + _tokens('{"city":"Paris"}')
    )
    result_message = 3 + _tokens("functions.weather") + 1 + _tokens("Sunny")
    assert _count([ASK, call, result]) - _count([ASK]) == call_message + result_message


def test_the_wrapper_is_counted_before_its_results_arrive() -> None:
    calls = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris"), _call(1, "Rome")]}
    wrapper = (
        '{"tool_uses":[{"recipient_name":"functions.weather","parameters":{"city":"Paris"}},'
        '{"recipient_name":"functions.weather","parameters":{"city":"Rome"}}]}'
    )
    call_message = 3 + _tokens("assistant") + _tokens(" to=multi_tool_use.parallel") + 1 + _tokens(wrapper)
    assert _count([ASK, calls]) - _count([ASK]) == call_message


def test_cl100k_escapes_non_ascii_in_string_results() -> None:
    calls = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris"), _call(1, "Rome")]}
    results = [
        {"role": "tool", "tool_call_id": "call_0", "content": "Sunny 🌞"},
        {"role": "tool", "tool_call_id": "call_1", "content": "Rain"},
    ]
    without, with_results = (
        _count([ASK, calls], "gpt-3.5-turbo"),
        _count([ASK, calls, *results], "gpt-3.5-turbo"),
    )
    merged = '["Sunny \\ud83c\\udf1e", "Rain"]'
    assert with_results - without == 3 + _tokens("multi_tool_use.parallel", "cl100k_base") + 2 + _tokens(
        merged, "cl100k_base"
    )


@pytest.mark.parametrize("model", ["gpt-5-mini", "gpt-5.4"])
def test_harmony_chat_wraps_parallel_calls_too(model: str) -> None:
    """gpt-5's Chat Completions renders parallel calls with the same wrapper (framing.FRAMING): two
    calls cost what one wrapper call of their JSON costs in harmony's framing, not two messages."""
    parallel = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris"), _call(1, "Rome")]}
    apart = [{"role": "assistant", "content": None, "tool_calls": [c]} for c in parallel["tool_calls"]]
    results = [{"role": "tool", "tool_call_id": f"call_{k}", "content": "Sunny"} for k in (0, 1)]
    framing = framing_for("openai-chat", model)
    wrapper = (
        '{"tool_uses":[{"recipient_name":"functions.weather","parameters":{"city":"Paris"}},'
        '{"recipient_name":"functions.weather","parameters":{"city":"Rome"}}]}'
    )
    call_message = 3 + _tokens("assistant") + framing.assistant_extra + _tokens(" to=multi_tool_use.parallel")
    call_message += framing.per_tool_call + _tokens(wrapper)
    result_message = (
        3 + _tokens("multi_tool_use.parallel") + framing.per_tool_result + 1 + _tokens('["Sunny", "Sunny"]')
    )
    assert _count([ASK, parallel, *results], model) - _count([ASK], model) == call_message + result_message
    # Sent as one call per assistant message, nothing is merged.
    assert _count([ASK, *apart, *results], model) != _count([ASK, parallel, *results], model)


def test_a_call_after_the_turns_text_is_a_message_of_its_own() -> None:
    """An assistant message with text and a call costs what the text and the call cost as two
    assistant messages: each call is a message of its own, after the text as after another call."""
    said = "Let me look that up."
    both = {"role": "assistant", "content": said, "tool_calls": [_call(0, "Paris")]}
    apart = [{"role": "assistant", "content": said}, {"role": "assistant", "tool_calls": [_call(0, "Paris")]}]
    result = {"role": "tool", "tool_call_id": "call_0", "content": "Sunny"}
    assert _count([ASK, both, result]) == _count([ASK, *apart, result])
    # Empty text is no text: the call opens the message.
    empty = {"role": "assistant", "content": "", "tool_calls": [_call(0, "Paris")]}
    absent = {"role": "assistant", "tool_calls": [_call(0, "Paris")]}
    assert _count([ASK, empty, result]) == _count([ASK, absent, result])


def test_the_handoff_turn_adds_nothing_beyond_its_cassettes_offset() -> None:
    """dd-trace's handoff cassette (cassette source, dev half): its request #2 adds a turn with text
    and a call to #1 (one call, no such turn), and is off by what #1 is off by (0 since the
    result-author rule, 1 before it; #2 was 3 under when the call shared the text's message)."""
    cassette = "DataDog/dd-trace-py:tests/contrib/openai_agents/cassettes/"
    cassette += "test_multiple_agent_handoffs_with_chat_completions.yaml"
    first, second = counted(cassette + "#1"), counted(cassette + "#2")
    assert second[0] - second[1] == first[0] - first[1]


def test_a_result_nested_past_the_json_parsers_depth_is_counted_as_text() -> None:
    calls = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris"), _call(1, "Rome")]}
    results = [
        {"role": "tool", "tool_call_id": "call_0", "content": "[" * 5000},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]
    assert _count([ASK, calls, *results]) > _count([ASK, calls])


def test_results_in_parts_are_not_merged() -> None:
    """A run of results merges only when each is one text: one in parts leaves them all apart (the
    text result then costs what it costs after a single call)."""
    calls = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris"), _call(1, "Rome")]}
    text = {"role": "tool", "tool_call_id": "call_0", "content": "Sunny"}
    parts = {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
    }
    single = {"role": "assistant", "content": None, "tool_calls": [_call(0, "Paris")]}
    apart = _count([ASK, single, text]) - _count([ASK, single])
    assert _count([ASK, calls, text, parts]) - _count([ASK, calls, parts]) == apart
    assert _count([ASK, calls, parts, text]) - _count([ASK, calls, parts]) == apart


def test_a_legacy_function_call_beside_one_tool_call_is_no_parallel_run() -> None:
    both = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call(0, "Paris")],
        "function_call": {"name": "weather", "arguments": "{}"},
    }
    prompt = parse_request({"model": "gpt-4o", "messages": [ASK, both]}, provider="openai-chat")
    assert all(_parallel_run(prompt.segments, i) is None for i in range(len(prompt.segments)))
