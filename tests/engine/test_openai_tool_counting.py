"""OpenAI tool rendering and framing, checked on recorded provider usage (records named by id).

Each case is one record of ../shared/data/recorded/interactions.jsonl (third-party data: read in
place where it exists, skipped elsewhere) whose reported prompt_tokens the counter must match
exactly. The cases are picked from the training part of the data (bench/bench_counting.py holds
pydantic-ai out) to cover one rule each.
"""

from __future__ import annotations

from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.rendering import render_function
from recorded_counts import DATA, assert_count_exact

MIRASCOPE = "Mirascope/mirascope:python/tests/e2e/"
CREWAI = "crewAIInc/crewAI:lib/crewai/tests/cassettes/"

CASES = {
    # property titles as comment lines; tools open a system message of their own (no system message)
    "no-system-titles": MIRASCOPE
    + "input/cassettes/test_call_with_tool_error/openai_gpt_4o_completions.yaml#0",
    # a call ("assistant to=functions.NAME") and its result (author "functions.NAME")
    "call-and-result": MIRASCOPE
    + "input/cassettes/test_call_with_tool_error/openai_gpt_4o_completions.yaml#1",
    # tools joined to a system message ending in "." (".\n\n" is one token)
    "system-ends-with-period": MIRASCOPE
    + "output/cassettes/test_structured_output_with_tools/tool/openai_gpt_4o_completions/async.yaml#0",
    "system-ends-with-letter": CREWAI + "agents/test_agent_without_max_rpm_respects_crew_rpm.yaml#1",
    "system-ends-with-letter-call": CREWAI + "agents/test_agent_without_max_rpm_respects_crew_rpm.yaml#2",
    "no-system-no-titles": CREWAI
    + "llms/TestAzureToolCallStreaming.test_azure_streaming_emits_tool_call_events.yaml#0",
    "several-tools": CREWAI
    + "agents/TestOpenAINativeToolCalling.test_openai_parallel_native_tool_calling_test_agent_kickoff.yaml#0",
    # a tool_choice forcing one function primes the reply with the call
    "forced-function": MIRASCOPE
    + "input/cassettes/test_structured_output_resume/tool/openai_gpt_4o_completions.yaml#0",
    "forced-function-no-system": CREWAI + "test_crew_train_success.yaml#8",
    # a multi-line (docstring) description: one comment line per non-blank line
    "multi-line-description": MIRASCOPE
    + "input/cassettes/test_call_with_strict_tool_and_optional_properties/openai_gpt_4o_completions.yaml#0",
    "multi-line-description-system": CREWAI + "agents/test_agent_custom_max_iterations.yaml#0",
    # Responses: the section without a message of its own, function_call items, allowed_tools
    "responses-tools": "responses:"
    + MIRASCOPE
    + "input/cassettes/test_call_with_tool_error/openai_gpt_4o_responses.yaml#0",
    "responses-call-and-output": "responses:"
    + MIRASCOPE
    + "output/cassettes/test_structured_output_with_tools/openai_gpt_4o_responses/async.yaml#1",
    "responses-forced": "responses:"
    + MIRASCOPE
    + "input/cassettes/test_structured_output_resume/tool/openai_gpt_4o_responses.yaml#0",
    "responses-allowed-tools": "responses:"
    + MIRASCOPE
    + "output/cassettes/test_structured_output_with_tools/tool/openai_gpt_4o_responses/async.yaml#3",
    # structured outputs: the schema as compact JSON without what strict implies or does not enforce
    # (minimum / maximum / default here), joined to the system message like tools; or after them
    "json-schema-system": CREWAI + "rag/embeddings/test_crew_memory_with_google_vertex_embedder.yaml#3",
    "json-schema-no-system": CREWAI + "llms/openai/test_openai_response_format_with_pydantic_model.yaml#0",
    "json-schema-after-tools": MIRASCOPE
    + "output/cassettes/test_structured_output_with_tools/json/openai_gpt_4o_completions/async.yaml#0",
    "responses-text-format": "responses:"
    + MIRASCOPE
    + "output/cassettes/test_structured_output_with_tools/json/openai_gpt_4o_responses/async.yaml#1",
    # gpt-5 (harmony): the tools section brings the channel instructions with it
    "gpt-5-tools": CREWAI
    + "agents/TestAzureNativeToolCalling.test_azure_agent_with_native_tool_calling.yaml#0",
}


@pytest.mark.skipif(not DATA.exists(), reason="recorded provider data not present")
@pytest.mark.parametrize("case", sorted(CASES))
def test_recorded_count_is_exact(case: str) -> None:
    assert_count_exact(CASES, case)


def test_multi_line_description_drops_blank_lines_and_strips() -> None:
    fn = {"name": "f", "description": "Search.\n\nArgs:\n    q: the query"}
    assert render_function(fn) == "// Search.\n// Args:\n// q: the query\ntype f = () => any;"


def test_function_rendering_titles_descriptions_defaults_nesting() -> None:
    fn = {
        "name": "plan",
        "description": "Make a plan",
        "parameters": {
            "type": "object",
            "properties": {
                "goal": {"title": "Goal", "type": "string", "description": "What to reach"},
                "depth": {"type": "string", "enum": ["shallow", "deep"], "default": "shallow"},
                "steps": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
                },
                "note": {"type": ["string", "null"]},
            },
            "required": ["goal"],
        },
    }
    assert render_function(fn) == (
        "// Make a plan\n"
        "type plan = (_: {\n"
        "// Goal\n"
        "// What to reach\n"
        "goal: string,\n"
        'depth?: "shallow" | "deep",\n'
        "steps?: {\n"
        "  n: number,\n"
        "}[],\n"
        "note?: string | null,\n"
        "}) => any;"
    )
    assert render_function({"name": "ping", "parameters": {"type": "object", "properties": {}}}) == (
        "type ping = () => any;"
    )


# Public reference: hmarr/openai-chat-tokens' test cases (prompt_tokens the API reported for
# gpt-3.5-turbo, cl100k), for legacy `functions`, `function_call` and role=function messages.
_HELLO = [{"role": "user", "content": "hello"}]
_FOO = {"name": "foo", "parameters": {"type": "object", "properties": {}}}
_BING = {"name": "bing_bong", "description": "Do a bing bong"}
HMARR_CASES: list[tuple[dict[str, Any], int]] = [
    ({"messages": _HELLO}, 8),
    ({"messages": _HELLO, "functions": [_FOO]}, 31),
    ({"messages": _HELLO, "functions": [_FOO], "function_call": "auto"}, 31),
    ({"messages": _HELLO, "functions": [_FOO], "function_call": "none"}, 32),
    ({"messages": _HELLO, "functions": [_FOO], "function_call": {"name": "foo"}}, 36),
    ({"messages": _HELLO, "functions": [{**_FOO, "description": "Do a foo"}]}, 36),
    (
        {
            "messages": _HELLO,
            "functions": [
                {**_BING, "parameters": {"type": "object", "properties": {"foo": {"type": "string"}}}}
            ],
        },
        49,
    ),
    (
        {
            "messages": _HELLO,
            "functions": [
                {
                    **_BING,
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "foo": {"type": "string"},
                            "bar": {"type": "number", "description": "A number"},
                        },
                    },
                }
            ],
        },
        57,
    ),
    (
        {
            "messages": _HELLO,
            "functions": [
                {
                    **_BING,
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "foo": {
                                "type": "object",
                                "properties": {
                                    "bar": {"type": "string", "enum": ["a", "b", "c"]},
                                    "baz": {"type": "boolean"},
                                },
                            }
                        },
                    },
                }
            ],
        },
        68,
    ),
    (
        {
            "messages": [
                {"role": "user", "content": "hello world"},
                {"role": "function", "name": "do_stuff", "content": "{}"},
            ]
        },
        15,
    ),
    (
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": "",
                    "function_call": {"name": "do_stuff", "arguments": '{"foo": "bar", "baz": 1.5}'},
                }
            ]
        },
        26,
    ),
    (
        {
            "messages": [
                {
                    "role": "system",
                    "name": "example_user",
                    "content": "New synergies will help drive top-line growth.",
                }
            ]
        },
        20,
    ),
]


@pytest.mark.parametrize(("body", "reported"), HMARR_CASES)
def test_legacy_functions_public_reference(body: dict[str, Any], reported: int) -> None:
    prompt = parse_request({"model": "gpt-3.5-turbo", **body}, provider="openai-chat")
    assert PromptCounter(load_model_table()).tokenize(prompt).count == reported
