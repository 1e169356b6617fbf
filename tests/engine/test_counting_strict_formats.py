"""A strict json_schema format in Chat Completions: the assistant's answers are addressed to it.

Where the rule comes from is in proxy/engine/rendering.py (strict_format_name) and framing.py
(strict_format_turn). Record cases are from the training projects and the "dev" halves
(../shared/data/recorded read in place; the VCR cassettes of bench/cassette_sources.py where
unpacked); each skips where its third-party data is absent. The data-free tests compare two requests
that differ only in what the rule is about.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.rendering import render_response_format, strict_format_name
from cachewarden.proxy.engine.tokenizers import get_tokenizer
from cassette_counts import counted
from recorded_counts import DATA, assert_count_exact

MIRASCOPE = "Mirascope/mirascope:python/tests/e2e/"
CREWAI = "crewAIInc/crewAI:lib/crewai/tests/cassettes/"
RECORD_CASES = {
    # first turns: the name's tokens less 2 (a one-token name: one over without the rule)
    "book-one-token-name": MIRASCOPE + "input/cassettes/test_structured_output_with_formatting_instructions/"
    "openai_gpt_4o_completions.yaml#0",
    "fentanyl-handbook-three-short": MIRASCOPE + "output/cassettes/test_refusal/openai_gpt_4o_completions/"
    "async.yaml#0",
    "task-evaluation-four-short": CREWAI + "test_crew_testing_function.yaml#1",
    # the nullable-union cost this replaces: LLMGuardrailResult's name (5 tokens), StepObservation's
    # em-dashes (non-ASCII escaped)
    "guardrail-gpt-4.1-mini": CREWAI + "test_after_kickoff_modification.yaml#3",
    "guardrail-gpt-4o": CREWAI + "test_task_guardrail_process_output.yaml#0",
    "step-observation-em-dashes": CREWAI + "agents/TestAgentExecutorPlanning."
    "test_agent_kickoff_with_planning_stores_plan_in_state.yaml#2",
    # later turns: each earlier answer in text costs the name + 2 (tools or not)
    "int-resumed": MIRASCOPE
    + "input/cassettes/test_structured_output_resume/openai_gpt_4o_completions.yaml#1",
    "score-output-second-task": CREWAI + "test_output_json_to_another_task.yaml#1",
    "calculation-after-tools": CREWAI
    + "llms/azure/test_azure_agent_kickoff_structured_output_with_tools.yaml#2",
    # with tools, first turn
    "book-summary-with-tools": MIRASCOPE + "output/cassettes/test_structured_output_with_tools/"
    "openai_gpt_4o_completions/async.yaml#0",
    # a format sent with strict: false is not addressed (pydantic-ai, held-out dev half)
    "not-strict": "pydantic/pydantic-ai:tests/models/cassettes/test_openai/test_openai_native_output.yaml#0",
}

CASSETTE_CASES = {
    "reason-gpt-4o-mini": "elastic/elastic-otel-python-instrumentations:instrumentation/"
    "elastic-opentelemetry-instrumentation-openai/tests/cassettes/"
    "test_parse_response_format_structured_output_with_capture_message_content.yaml#0",
    "dummy-output-schema": "Future-House/ldp:packages/lmi/tests/cassettes/"
    "TestMultipleCompletion.test_output_schema[structured-outputs].yaml#0",
    "invoice-gpt-4o": "traceloop/openllmetry:packages/opentelemetry-instrumentation-llamaindex/"
    "tests/cassettes/"
    "test_structured_llm/test_structured_llm_achat_model_attributes.yaml#0",
}


@pytest.mark.skipif(not DATA.exists(), reason="recorded data (../shared/data/recorded) not present")
@pytest.mark.parametrize("case", sorted(RECORD_CASES))
def test_recorded_strict_formats_count_exactly(case: str) -> None:
    assert_count_exact(RECORD_CASES, case)


@pytest.mark.parametrize("case", sorted(CASSETTE_CASES))
def test_cassette_strict_formats_count_exactly(case: str) -> None:
    got, reported = counted(CASSETTE_CASES[case])
    assert got == reported


def _format(strict: bool | None, name: str = "CityWeather") -> dict[str, Any]:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    spec: dict[str, Any] = {"name": name, "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def _count(messages: list[dict[str, Any]], fmt: dict[str, Any], provider: str = "openai-chat") -> int:
    if provider == "openai-chat":
        body: dict[str, Any] = {"model": "gpt-4o", "messages": messages, "response_format": fmt}
    else:
        text = {"format": {"type": "json_schema", **fmt["json_schema"]}}
        body = {"model": "gpt-4o", "input": messages, "text": text}
    return PromptCounter(load_model_table()).tokenize(parse_request(body, provider=provider)).count


ASK = {"role": "user", "content": "Weather in Paris?"}
ANSWER = {"role": "assistant", "content": '{"city":"Paris"}'}
AGAIN = {"role": "user", "content": "And Rome?"}


def test_strict_format_name() -> None:
    assert strict_format_name(json.dumps(_format(True))) == "CityWeather"
    assert strict_format_name(json.dumps(_format(False))) is None
    assert strict_format_name(json.dumps(_format(None))) is None
    assert strict_format_name(json.dumps({"type": "json_schema", "name": "R", "strict": True})) == "R"
    assert strict_format_name("not json") is None


def test_each_answer_and_the_reply_are_addressed_to_a_strict_format() -> None:
    name = len(get_tokenizer("o200k_base").encode("CityWeather"))
    # The reply: name + 2 more, the section 4 less, against the same format not strict.
    assert _count([ASK], _format(True)) - _count([ASK], _format(False)) == name + 2 - 4
    # An earlier answer in text: name + 2 more again.
    turns = [ASK, ANSWER, AGAIN]
    assert _count(turns, _format(True)) - _count(turns, _format(False)) == 2 * (name + 2) - 4
    # strict absent is not strict.
    assert _count(turns, _format(None)) == _count(turns, _format(False))


def test_a_tool_call_turn_is_not_an_answer() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    result = {"role": "tool", "tool_call_id": "c", "content": "ok"}
    turns = [ASK, call, result]
    first_turn = _count([ASK], _format(True)) - _count([ASK], _format(False))
    assert _count(turns, _format(True)) - _count(turns, _format(False)) == first_turn


def test_responses_answers_are_not_addressed() -> None:
    """The Responses API counts the same strict schemas exactly without the rule (training: Mirascope's
    int, Book, FentanylHandbook, Person)."""
    turns = [ASK, ANSWER, AGAIN]
    responses = "openai-responses"
    assert _count(turns, _format(True), responses) == _count(turns, _format(False), responses)


def test_the_schema_is_rendered_with_non_ascii_escaped() -> None:
    fmt = _format(True)
    fmt["json_schema"]["schema"]["description"] = "Weather — now"
    rendered = render_response_format(json.dumps(fmt))
    assert rendered is not None and "Weather \\u2014 now" in rendered and "—" not in rendered


@pytest.mark.parametrize(
    "silent",
    [
        {"role": "assistant", "content": [{"type": "text", "text": ""}]},
        {"role": "assistant", "content": None, "audio": {"id": "audio_1"}},
        {"role": "assistant", "content": ""},
    ],
)
def test_an_answer_that_says_nothing_is_not_addressed(silent: dict[str, Any]) -> None:
    """Empty text (a string or a part) and audio alone are not answers in text."""
    turns = [ASK, silent, AGAIN]
    assert _count(turns, _format(True)) - _count(turns, _format(False)) == _count(
        [ASK], _format(True)
    ) - _count([ASK], _format(False))
