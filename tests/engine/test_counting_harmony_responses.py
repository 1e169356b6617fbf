"""Rules found on the third cassette source's dev half (bench_counting.py --cassettes=/tmp/acc5/raw).

- Harmony (gpt-5 family) Responses: a json_schema ``text.format`` costs its rendered section and
  nothing more (framing ``schema_once`` 0; 4o's Responses framing keeps 1).
- gpt-5.4 family and gpt-5.6-terra Responses: an assistant turn that goes on right after a tool
  result (a further call, an assistant message, or the reply priming) costs one token more
  (``resumes_after_result``); after a user message it does not.
- gpt-4o-2024-11-20 Chat Completions frames like gpt-4o (reply priming 3): the exception to reply
  priming 2 that the counter had for it contradicted every record that names the model.

Record cases come from the dev halves only (cassette_counts, recorded_counts; they skip where their
third-party data is absent); the synthetic cases pin the rules without any data.
"""

from __future__ import annotations

from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cassette_counts import counted
from recorded_counts import DATA, assert_count_exact

SCHEMA_CASSETTES = {
    # each was one over with schema_once 1
    "gpt-5-nano": "crmne/ruby_llm:spec/fixtures/vcr_cassettes/chat_with_schema_with_openai_gpt-5-nano_"
    "accepts_schematist_schema_class_instances_and_returns_structured_output.yml#0",
    "gpt-5.1": "newrelic/newrelic-python-agent:tests/mlmodel_openai/cassette.yaml#15",
    "gpt-5.4": "posit-dev/chatlas:tests/_vcr/test_chat/test_chat_structured.yaml#0",
    "gpt-5.4-nano": "tidyverse/ellmer:tests/testthat/_vcr/parallel-data.yml#0",
    "gpt-5.6-terra": "tidyverse/ellmer:vignettes/_vcr/structured-data-basics-text.yml#0",
}
SCHEMA_RECORDED = {
    "gpt-5.4-mini": "responses:pydantic/pydantic-ai:tests/models/cassettes/test_openai/"
    "test_openai_responses_native_output_decimal_strict.yaml#0",
}

VARIATIONS = "posit-dev/chatlas:tests/_vcr/test_provider_openai/test_openai_tool_variations.yaml"
RESUME_CASSETTES = {
    # user, call, result, end: one under before
    "gpt-5.4 ends with a result": "posit-dev/chatlas:tests/_vcr/test_parallel_chat/"
    "test_parallel_chat_tools.yaml#2",
    "gpt-5.4 ruby_llm": "crmne/ruby_llm:spec/fixtures/vcr_cassettes/chat_tool_call_callbacks_calls_both_"
    "before_tool_call_and_after_tool_result_callbacks_in_order.yml#1",
    "gpt-5.6-terra": "tidyverse/ellmer:vignettes/_vcr/tool-calling-inputs-outputs.yml#1",
    # a result followed by an assistant message, then a user message: one under before
    "gpt-5.4 result then answer": f"{VARIATIONS}#2",
    # ... and a second call pair at the end: two under before
    "gpt-5.4 two resumptions": f"{VARIATIONS}#3",
    # a result followed by a user message ("dangling"): exact before and after
    "gpt-5.4-nano dangling": "tidyverse/ellmer:tests/testthat/_vcr/chat-tools-dangling.yml#0",
    # dangling, then a pair at the end: one under before (not two: the dangling result costs nothing)
    "gpt-5.4-nano dangling then pair": "tidyverse/ellmer:tests/testthat/_vcr/chat-tools-dangling.yml#1",
    "gpt-5.4-nano three pairs": "tidyverse/ellmer:tests/testthat/_vcr/chat-tools-dangling.yml#3",
}

GPT_4O_2024_11_20_CASSETTES = {
    # plain messages naming the model; each one under with reply priming 2
    "paper-qa user": "Future-House/paper-qa:tests/cassettes/test_pdf_reader_match_doc_details.yaml#0",
    "paper-qa system": "Future-House/paper-qa:tests/cassettes/test_nonduplicate_contexts.yaml#2",
    "aviary tools": "Future-House/aviary:packages/labbench/tests/cassettes/"
    "TestPaperQATaskDataset.test_tool_failure.yaml#0",
}
GPT_4O_2024_11_20_RECORDED = {
    # Azure bodies without a model (the response names gpt-4o-2024-11-20); training split
    "crewAI azure #1": "crewAIInc/crewAI:lib/crewai/tests/cassettes/utilities/"
    "TestAzureStructuredPlanning.test_azure_research_workflow_generates_steps.yaml#1",
    "crewAI azure #2": "crewAIInc/crewAI:lib/crewai/tests/cassettes/utilities/"
    "TestAzureStructuredPlanning.test_azure_research_workflow_generates_steps.yaml#2",
}


def _responses(body: dict[str, Any]) -> int:
    prompt = parse_request(body, provider="openai-responses")
    return PromptCounter(load_model_table()).tokenize(prompt).count


def _chat(body: dict[str, Any]) -> int:
    return PromptCounter(load_model_table()).tokenize(parse_request(body, provider="openai-chat")).count


TOOL = {"type": "function", "name": "roll", "description": "Rolls a die", "parameters": {"type": "object"}}
CALL = {"type": "function_call", "call_id": "c1", "name": "roll", "arguments": "{}"}
RESULT = {"type": "function_call_output", "call_id": "c1", "output": "4"}
ASK = {"role": "user", "content": "Roll a die."}
AGAIN = {"role": "user", "content": "Again."}
ANSWER = {"role": "assistant", "content": "You rolled 4."}
FORMAT = {
    "format": {
        "type": "json_schema",
        "name": "roll",
        "strict": True,
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }
}


def _with(model: str, *items: dict[str, Any]) -> int:
    return _responses({"model": model, "tools": [TOOL], "input": list(items)})


@pytest.mark.parametrize("model", ["gpt-5.4", "gpt-5.4-nano", "gpt-5.6-terra"])
def test_a_turn_resuming_after_a_result_costs_one_more(model: str) -> None:
    # gpt-5 frames everything else alike: the difference is the resumption token alone.
    assert _with(model, ASK, CALL, RESULT) == _with("gpt-5", ASK, CALL, RESULT) + 1
    # A user message after the result: the result is "dangling", and the reply priming that follows
    # the user message costs what it always does.
    assert _with(model, ASK, CALL, RESULT, AGAIN) == _with("gpt-5", ASK, CALL, RESULT, AGAIN)
    # An answer after the result, then the user: the answer resumes (+1), the priming does not.
    assert (
        _with(model, ASK, CALL, RESULT, ANSWER, AGAIN) == _with("gpt-5", ASK, CALL, RESULT, ANSWER, AGAIN) + 1
    )
    # A second call right after the result resumes too, and so does the priming after its result.
    assert (
        _with(model, ASK, CALL, RESULT, CALL, RESULT) == _with("gpt-5", ASK, CALL, RESULT, CALL, RESULT) + 2
    )


@pytest.mark.parametrize("model", ["gpt-5", "gpt-5.2", "gpt-5.5", "gpt-4o"])
def test_other_models_do_not_resume_dearer(model: str) -> None:
    ends_with_result = _with(model, ASK, CALL, RESULT)
    with_user = _with(model, ASK, CALL, RESULT, AGAIN)
    user_alone = _responses({"model": model, "input": [AGAIN]}) - _responses({"model": model, "input": []})
    assert with_user - ends_with_result == user_alone


def test_harmony_text_format_costs_its_section_only() -> None:
    plain = {"model": "gpt-5.4", "input": [ASK]}
    gpt4o = {"model": "gpt-4o", "input": [ASK]}
    # The same section text in both (one tokenizer); 4o adds schema_once 1 on top, harmony nothing.
    harmony_cost = _responses({**plain, "text": FORMAT}) - _responses(plain)
    gpt4o_cost = _responses({**gpt4o, "text": FORMAT}) - _responses(gpt4o)
    assert gpt4o_cost == harmony_cost + 1


def test_gpt_4o_2024_11_20_frames_like_gpt_4o() -> None:
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hello there."}]
    assert _chat({"model": "gpt-4o-2024-11-20", "messages": messages}) == _chat(
        {"model": "gpt-4o", "messages": messages}
    )


@pytest.mark.parametrize(
    "source",
    [*SCHEMA_CASSETTES.values(), *RESUME_CASSETTES.values(), *GPT_4O_2024_11_20_CASSETTES.values()],
)
def test_cassettes(source: str) -> None:
    got, reported = counted(source)
    assert got == reported


@pytest.mark.skipif(not DATA.exists(), reason="recorded data not present")
@pytest.mark.parametrize("case", sorted(SCHEMA_RECORDED))
def test_recorded_schema(case: str) -> None:
    assert_count_exact(SCHEMA_RECORDED, case)


@pytest.mark.skipif(not DATA.exists(), reason="recorded data not present")
@pytest.mark.parametrize("case", sorted(GPT_4O_2024_11_20_RECORDED))
def test_recorded_gpt_4o_2024_11_20(case: str) -> None:
    assert_count_exact(GPT_4O_2024_11_20_RECORDED, case)
