"""The parameters object's ``title``: a comment line before its brace, like its description.

Found on the dev half of the second held-out source (cassettes of other projects,
tests/engine/cassette_counts.py): the openai-agents SDK sends ``"title": "<name>_args"`` on every
function's parameters, and each such request was short by exactly the tokens of ``// <title>\\n``
(gpt-4o, gpt-4o-mini, gpt-4.1; Chat Completions and Responses).
"""

from __future__ import annotations

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.rendering import render_function
from cassette_counts import counted

OPENLLMETRY = "traceloop/openllmetry:packages/opentelemetry-instrumentation-openai-agents/tests/cassettes/"

CASES = {
    # gpt-4o Responses, one tool titled get_city_info_args; then the same after its call and result
    "gpt-4o": OPENLLMETRY + "test_openai_agents/test_tool_call_and_result_attributes.yaml#0",
    "gpt-4o-after-call": OPENLLMETRY + "test_openai_agents/test_tool_call_and_result_attributes.yaml#2",
    # gpt-4.1 Responses (get_weather_args)
    "gpt-4.1": OPENLLMETRY + "test_openai_agents/test_agent_with_function_tool_spans.yaml#0",
    # gpt-4o-mini, Microsoft Agent Framework's schema title (get_weather_input)
    "gpt-4o-mini": "Arize-ai/openinference:python/instrumentation/"
    "openinference-instrumentation-agent-framework/tests/cassettes/test_processor/"
    "test_agent_with_tool_calls.yaml#0",
    # gpt-4o Chat Completions, magentic's strict pydantic model (CapitalCity)
    "chat-gpt-4o": "jackmpcollins/magentic:tests/chat_model/cassettes/test_openai_chat_model/"
    "test_openai_chat_model_complete_pydantic_model_openai_strict.yaml#0",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_parameters_title_counts_as_a_comment(case: str) -> None:
    got, reported = counted(CASES[case])
    assert got == reported


def test_title_is_a_comment_before_the_brace_then_the_description() -> None:
    fn = {
        "name": "lookup",
        "parameters": {
            "title": "lookup_args",
            "description": "What to look up.",
            "type": "object",
            "properties": {"term": {"type": "string"}},
        },
    }
    text = render_function(fn)
    assert text == "type lookup = (_: // lookup_args\n// What to look up.\n{\nterm?: string,\n}) => any;"


def test_no_title_no_comment() -> None:
    fn = {"name": "lookup", "parameters": {"type": "object", "properties": {"term": {"type": "string"}}}}
    assert render_function(fn) == "type lookup = (_: {\nterm?: string,\n}) => any;"


def test_harmony_leaves_the_title_out() -> None:
    # openai/harmony's renderer writes an object's description, never its title; no gpt-5 record
    # has a parameters title to say otherwise.
    fn = {
        "name": "lookup",
        "parameters": {"title": "lookup_args", "type": "object", "properties": {"term": {"type": "string"}}},
    }
    assert render_function(fn, "harmony") == "type lookup = (_: {\nterm?: string,\n}) => any;"


def test_one_counter_counts_the_title_per_dialect() -> None:
    # The tool memo is per dialect: a title counted for gpt-4o is not reused for gpt-5 (harmony
    # leaves it out), and back. The 4 tokens are "// lookup_args\n" before the brace.
    counter = PromptCounter(load_model_table())

    def count(model: str, title: bool) -> int:
        params: dict[str, object] = {"type": "object", "properties": {"term": {"type": "string"}}}
        if title:
            params["title"] = "lookup_args"
        tool = {"type": "function", "function": {"name": "lookup", "parameters": params}}
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}
        return counter.tokenize(parse_request(body)).count

    assert [[count(m, False), count(m, True)] for m in ("gpt-5", "gpt-4o", "gpt-5")] == [
        [117, 117],
        [37, 41],
        [117, 117],
    ]
