"""Tool-counting rules found after the first split (bench/bench_counting.py), each checked on records.

Each case is one record of ../shared/data/recorded/interactions.jsonl (third-party data: read in place
where it exists, skipped elsewhere) whose reported input tokens the counter must match exactly. Cases
come from the training projects or from the "dev" half of the held-out project (pydantic-ai cassettes
whose sequence hashes to dev in bench_counting.part); the "final" half is never used here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Prompt, Segment
from cachewarden.proxy.engine.rendering import (
    TOOLS_HEAD,
    TOOLS_TAIL,
    render_additional_tools,
    render_function,
    tool_correction,
)
from cachewarden.proxy.engine.tokenizers import get_tokenizer
from cassette_counts import counted
from recorded_counts import DATA, assert_count_exact

PYDANTIC = "pydantic/pydantic-ai:tests/"
MIRASCOPE = "Mirascope/mirascope:typescript/tests/e2e/"

CASES = {
    # a first parameter without title or description: one token less than the text (chat, Responses)
    "bare-first-parameter": MIRASCOPE
    + "input/cassettes/tool-error/openai_completions/handles-tool-execution-errors-and-retries.har#0",
    "bare-first-parameter-4o-mini": PYDANTIC
    + "models/cassettes/test_openai/test_run_stream_sync_streams_real_model.yaml#0",
    "bare-first-three-tools": PYDANTIC
    + "cassettes/test_temporal/test_mcptoolset_dynamic_toolset_in_workflow.yaml#3",
    "bare-first-responses": "responses:"
    + PYDANTIC
    + "models/cassettes/test_openai_responses/test_tool_output.yaml#0",
    # gpt-5 chat: the tools' developer message without a system message; three bare-first tools
    "gpt-5-no-system": PYDANTIC
    + "models/cassettes/test_tool_choice_matrix/test_tool_choice_matrix[none-openai].yaml#0",
    "gpt-5-three-tools": PYDANTIC
    + "models/cassettes/test_tool_choice_matrix/test_tool_choice_matrix[tools_plus_output-openai].yaml#0",
    # gpt-5: a call and its result cost 6 beyond name, arguments and output
    "gpt-5-call-and-result": PYDANTIC
    + "models/cassettes/test_tool_choice_matrix/test_tool_choice_matrix[tools_plus_output-openai].yaml#1",
    "gpt-5.4-mini-call-and-result": PYDANTIC
    + "cassettes/test_tool_search/test_tool_search_eval[openai-chat].yaml#1",
    # harmony: a function without parameters costs one token less (chat and Responses)
    "gpt-5-no-parameters": PYDANTIC
    + "models/cassettes/test_multimodal_tool_returns/test_model_sees_multiple_images[openai_chat].yaml#0",
    "gpt-5-no-parameters-responses": "responses:"
    + PYDANTIC
    + "models/cassettes/test_multimodal_tool_returns/"
    + "test_model_sees_multiple_images[openai_responses].yaml#0",
    # ... but with a description it costs its text (gpt-5, a call and its result after it)
    "gpt-5-described-no-parameters": PYDANTIC
    + "cassettes/test_tool_availability_portability/"
    + "test_tool_availability_portability_matrix[R1-T6-local-search].yaml#0",
    # gpt-5 Responses: the section alone, and joined to a developer message
    "gpt-5-responses-alone": "responses:"
    + PYDANTIC
    + "models/cassettes/test_tool_choice_matrix/test_tool_choice_matrix[none-openai_responses].yaml#0",
    "gpt-5-responses-developer": "responses:"
    + MIRASCOPE
    + "output/cassettes/refusal/openai_responses/handles-refusal-for-call.har#0",
    # the parameters object's own description, a comment before its brace (gpt-5.2, gpt-5.4)
    "parameters-description": "responses:"
    + PYDANTIC
    + "cassettes/test_tool_search/"
    + "test_openai_deferred_capability_runs_on_model_without_native_tool_search.yaml#0",
    "parameters-description-5.4": "responses:"
    + PYDANTIC
    + "cassettes/test_tool_search/"
    + "test_cross_provider_capability_replay[openai-responses-gpt-5.4-anthropic-claude-sonnet-4-5].yaml#0",
    # an additional_tools input item: its tools section + the harmony tools preamble (gpt-5, gpt-5.6)
    "additional-tools": "responses:"
    + PYDANTIC
    + "cassettes/test_tool_availability_portability/"
    + "test_tool_availability_portability_matrix[R1-T4-local-search-additional-tools].yaml#0",
    "additional-tools-5.6": "responses:"
    + PYDANTIC
    + "models/cassettes/test_openai_tool_availability_delta/"
    + "test_supported_model_calls_additional_tool.yaml#0",
    # Responses (4o): two function_call items in a row share one message (parallel calls)
    "parallel-calls-share-a-message": "responses:"
    + "Mirascope/mirascope:python/tests/e2e/output/cassettes/"
    + "test_call_with_tools/openai_gpt_4o_responses/sync.yaml#1",
    # harmony: a function without a description, with a bare first parameter: 2 less (gpt-5.5)
    "harmony-undescribed-bare-first": "responses:"
    + PYDANTIC
    + "models/cassettes/test_openai_responses/test_openai_responses_phase_live.yaml#0",
    # a function_call item without its item id costs 3 less than with one (gpt-4o, gpt-4.1)
    "call-without-id-4o": "responses:"
    + "Mirascope/mirascope:python/tests/e2e/input/cassettes/"
    + "test_resume_with_override_thinking_and_tools/openai_gpt_4o_responses.yaml#1",
    "call-without-id-4.1": "responses:"
    + PYDANTIC
    + "models/cassettes/test_openai_responses/test_openai_responses_non_reasoning_model_no_item_ids.yaml#1",
    "call-without-id-tool-output": "responses:"
    + PYDANTIC
    + "models/cassettes/test_openai_responses/test_tool_output.yaml#1",
    # ... and one with its id keeps the call's framing (gpt-4o-mini)
    "call-with-id-4o-mini": "responses:"
    + "Mirascope/mirascope:python/tests/ops/_internal/instrumentation/llm/cassettes/"
    + "test_model_call_with_tool_outputs.yaml#1",
}


@pytest.mark.skipif(not DATA.exists(), reason="recorded provider data not present")
@pytest.mark.parametrize("case", sorted(CASES))
def test_recorded_count_is_exact(case: str) -> None:
    assert_count_exact(CASES, case)


def test_correction_by_first_parameter_and_dialect() -> None:
    bare = {"name": "f", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    titled = {"name": "f", "parameters": {"type": "object", "properties": {"city": {"title": "City"}}}}
    described = {"name": "f", "parameters": {"properties": {"q": {"description": "the query"}, "n": {}}}}
    empty = {"name": "f", "parameters": {"type": "object", "properties": {}}}
    assert tool_correction(bare) == -1
    # harmony: no description costs one more on top (phase_live#0, gpt-5.5)
    assert tool_correction(bare, "harmony") == -2
    assert tool_correction(titled) == 0 and tool_correction(titled, "harmony") == -1
    assert tool_correction({**described, "description": "Search."}, "harmony") == 0
    # only the first parameter decides: a bare second one changes nothing
    assert tool_correction(described) == 0
    assert tool_correction(empty) == 0 and tool_correction({"name": "f"}) == 0
    assert tool_correction(empty, "harmony") == tool_correction({"name": "f"}, "harmony") == -1
    assert tool_correction({**empty, "description": "Ping."}, "harmony") == 0


def test_parameters_description_is_a_comment_before_the_brace() -> None:
    fn = {
        "name": "load",
        "description": "Load a thing.",
        "parameters": {
            "type": "object",
            "description": "Typed arguments.",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
        },
    }
    assert render_function(fn) == (
        "// Load a thing.\ntype load = (_: // Typed arguments.\n{\nid: string,\n}) => any;"
    )


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-5-mini"])
def test_responses_text_format_never_joins_a_message(model: str) -> None:
    # Responses (4o training records: 35 text.format requests at one residual) adds the section and
    # schema_once whether or not there is a developer message; gpt-5 keeps that rule (it inherited
    # Chat Completions' "joins the system message" before, 3 over on gpt-5.4-mini's held-out dev).
    spec = {"type": "json_schema", "name": "r", "schema": {"type": "object", "properties": {}}}
    schema = Segment("text.format", "schema", json.dumps(spec))
    user = Segment("input[1]", "message", "Hi", "user", 1)
    developer = Segment("input[0]", "system", "Be brief.", "developer", 0)
    counter = PromptCounter(load_model_table())

    def added(*segs: Segment) -> int:
        with_schema = counter.tokenize(Prompt("openai-responses", model, (schema, *segs))).count
        return with_schema - counter.tokenize(Prompt("openai-responses", model, segs)).count

    assert added(user) == added(developer, user)


def test_additional_tools_item_costs_its_section_and_the_tools_preamble() -> None:
    tool = {
        "type": "function",
        "name": "lookup_refund_policy",
        "description": "Look up the refund policy for an order.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        "strict": True,
    }
    item = {"type": "additional_tools", "role": "developer", "tools": [tool]}
    section = render_additional_tools(json.dumps(item))
    assert section == TOOLS_HEAD + render_function(tool) + "\n\n" + TOOLS_TAIL
    # Any other item is not a tools section.
    assert render_additional_tools(json.dumps({"type": "mcp_list_tools", "tools": [tool]})) is None
    ask = {"role": "user", "content": "Refund order-123?"}
    counter = PromptCounter(load_model_table())

    def count(model: str, *items: dict[str, Any]) -> int:
        body = {"model": model, "input": list(items)}
        return counter.tokenize(parse_request(body, provider="openai-responses")).count

    # gpt-5 (harmony): the section plus 84, as the tools preamble of Chat Completions (framing.py).
    n = len(get_tokenizer("o200k_base").encode(section))
    assert count("gpt-5", ask, item) - count("gpt-5", ask) == n + 84
    # The same item in two requests costs the same (the memoised section keeps its extra).
    assert count("gpt-5", ask, item) == count("gpt-5", ask, item)


@pytest.mark.parametrize(("model", "less"), [("gpt-4o", 3), ("gpt-4.1", 3), ("gpt-5", 0)])
def test_responses_call_without_item_id_costs_less(model: str, less: int) -> None:
    # The ids pydantic-ai strips for non-reasoning models: 3 tokens less for 4o / 4.1 (framing.py,
    # call_without_id), nothing in the harmony format; Chat Completions calls have no item id at all.
    call = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
    result = {"type": "function_call_output", "call_id": "call_1", "output": "42"}
    ask = {"role": "user", "content": "Go."}
    counter = PromptCounter(load_model_table())

    def count(*items: dict[str, Any]) -> int:
        body = {"model": model, "input": list(items)}
        return counter.tokenize(parse_request(body, provider="openai-responses")).count

    with_id = count(ask, {**call, "id": "fc_1", "status": "completed"}, result)
    assert with_id - count(ask, call, result) == less
    chat = {"model": model, "messages": [{"role": "user", "content": "Go."}]}
    assert parse_request(chat, provider="openai-chat").segments[0].item_id is None


def test_responses_parallel_calls_share_one_message() -> None:
    # A further function_call right after another costs its recipient and arguments only: 6 less
    # than a call of its own (framing.py, calls_share_message); a call after a result is not merged.
    ask = {"role": "user", "content": "Both."}
    counter = PromptCounter(load_model_table())

    def call(n: int) -> dict[str, Any]:
        return {"type": "function_call", "call_id": f"c{n}", "id": f"fc_{n}", "name": "f", "arguments": "{}"}

    def result(n: int) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": f"c{n}", "output": "ok"}

    def count(model: str, *items: dict[str, Any]) -> int:
        body = {"model": model, "input": list(items)}
        return counter.tokenize(parse_request(body, provider="openai-responses")).count

    together = count("gpt-4o", ask, call(1), call(2), result(1), result(2))
    apart = count("gpt-4o", ask, call(1), result(1), call(2), result(2))
    assert apart - together == 6
    # harmony keeps a message per call
    together_5 = count("gpt-5", ask, call(1), call(2), result(1), result(2))
    assert together_5 == count("gpt-5", ask, call(1), result(1), call(2), result(2))


# Rules found on the dev half of the cassette sources, each checked on its records (cassette_counts;
# skipped where the cassettes are absent) and on data-free cases below.
CASSETTE_CASES = {
    # Parallel calls sent without item ids (Responses, 4o / 4.1) cost what the same run costs with ids.
    "parallel-without-ids-chatlas-4.1": "posit-dev/chatlas:tests/_vcr/test_chat/"
    "test_chat_tool_request_reject.yaml#1",
    "parallel-without-ids-ellmer-4.1": "tidyverse/ellmer:tests/testthat/_vcr/"
    "chat-tools-reject-tool-function.yml#1",
    "parallel-without-ids-ellmer-4.1-mini": "tidyverse/ellmer:tests/testthat/_vcr/"
    "chat-tools-reject-callback.yml#1",
    # cl100k `tools` (gpt-3.5-turbo-0125): a bare first parameter costs one less, as with o200k.
    "cl100k-bare-first-openllmetry": "traceloop/openllmetry:packages/opentelemetry-instrumentation-openai/"
    "tests/traces/cassettes/test_finish_reasons/"
    "TestFinishReasonMapping.test_finish_reason_tool_calls_mapped_correctly.yaml#0",
    "cl100k-bare-first-instructor-forced": "instructor-ai/instructor-rb:spec/vcr_cassettes/"
    "basic_spec/valid_response.yml#0",
    "cl100k-bare-first-instructor-patching": "instructor-ai/instructor-rb:spec/vcr_cassettes/"
    "patching_spec/valid_response.yml#0",
    # A property's object renders its properties without indentation (o200k, both APIs).
    "nested-two-described": "sublayerapp/sublayer:spec/vcr_cassettes/openai/cli/generators/"
    "sublayer_agent_generator.yml#0",
    "nested-four-described": "sublayerapp/sublayer:spec/vcr_cassettes/openai/cli/generators/"
    "sublayer_command_generator.yml#0",
    "nested-gpt-5-nano-responses": "crmne/ruby_llm:spec/fixtures/vcr_cassettes/"
    "chat_function_calling_openai_gpt-5-nano_handles_object_params.yml#0",
}


@pytest.mark.parametrize("case", sorted(CASSETTE_CASES))
def test_cassette_count_is_exact(case: str) -> None:
    got, reported = counted(CASSETTE_CASES[case])
    assert got == reported


# Parallel calls without ids (framing.py): a lone call without an id still costs 3 less.


@pytest.mark.parametrize("runs", [2, 3])
def test_responses_parallel_calls_without_ids_cost_what_they_cost_with_them(runs: int) -> None:
    ask = {"role": "user", "content": "All of them."}
    counter = PromptCounter(load_model_table())

    def call(n: int, with_id: bool) -> dict[str, Any]:
        item = {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"}
        return {**item, "id": f"fc_{n}"} if with_id else item

    def count(model: str, with_id: bool) -> int:
        calls = [call(n, with_id) for n in range(runs)]
        outputs = [{"type": "function_call_output", "call_id": f"c{n}", "output": "ok"} for n in range(runs)]
        body = {"model": model, "input": [ask, *calls, *outputs]}
        return counter.tokenize(parse_request(body, provider="openai-responses")).count

    assert count("gpt-4.1", with_id=True) == count("gpt-4.1", with_id=False)
    assert count("gpt-4o", with_id=True) == count("gpt-4o", with_id=False)
    # A run broken by a message: each call is alone again and costs 3 less without its id.
    alone = [call(0, False), {"role": "user", "content": "and"}, call(1, False)]
    with_ids = [call(0, True), {"role": "user", "content": "and"}, call(1, True)]

    def items(seq: list[dict[str, Any]]) -> int:
        body = {"model": "gpt-4o", "input": [ask, *seq]}
        return counter.tokenize(parse_request(body, provider="openai-responses")).count

    assert items(with_ids) - items(alone) == 6


# cl100k: the legacy `functions` list stays exact as rendered (hmarr's cases, test_openai_tool_counting.py).
def test_cl100k_bare_first_parameter_by_format() -> None:
    fn = {"name": "f", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    assert tool_correction(fn, "chatml", "cl100k_base") == -1
    assert tool_correction(fn, "chatml", "cl100k_base", legacy=True) == 0
    assert tool_correction(fn, "chatml", "o200k_base", legacy=True) == -1
    described = {"name": "f", "parameters": {"properties": {"city": {"description": "where"}}}}
    assert tool_correction(described, "chatml", "cl100k_base") == 0
    # Through the counter: the same function one token cheaper in `tools` than in `functions`,
    # beyond what the two formats' framings differ by for a described one.
    counter = PromptCounter(load_model_table())

    def count(key: str, function: dict[str, Any]) -> int:
        listed = [{"type": "function", "function": function}] if key == "tools" else [function]
        body = {"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": "hi"}], key: listed}
        return counter.tokenize(parse_request(body, provider="openai-chat")).count

    framing_gap = count("functions", described) - count("tools", described)
    assert count("functions", fn) - count("tools", fn) == framing_gap + 1


# Nested objects: array items and $defs types keep their indentation, and so does the legacy list.
def test_nested_object_properties_render_without_indentation() -> None:
    inner = {"type": "object", "properties": {"code": {"type": "string", "description": "The code"}}}
    fn = {
        "name": "f",
        "parameters": {
            "type": "object",
            "properties": {"out": inner, "many": {"type": "array", "items": inner}},
            "$defs": {"Row": inner},
        },
    }
    text = render_function(fn)
    assert "out?: {\n// The code\ncode?: string,\n}," in text  # a property's object: flat
    assert "many?: {\n  // The code\n  code?: string,\n}[]," in text  # array items: indented
    assert "type Row = {\n  // The code\n  code?: string,\n};" in text  # a $defs type: indented
    assert "out?: {\n  // The code\n  code?: string,\n}," in render_function(fn, legacy=True)
