"""A tool result's author "functions.NAME" is "functions" and the name, each a text of its own.

Where the rule comes from is in proxy/engine/framing.py (result_name_apart). Record cases are from the
training projects and the held-out "dev" half of ../shared/data/recorded (read in place, skipped where
absent); the data-free test spells the header out.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.tokenizers import get_tokenizer
from recorded_counts import DATA, assert_count_exact

PYDANTIC = "pydantic/pydantic-ai:tests/cassettes/"
CREWAI = "crewAIInc/crewAI:lib/crewai/tests/cassettes/"
RECORD_CASES = {
    # twin bodies but for the name: ".get" merges, ".d|ur|ability" does not (one over before)
    "merging-name": PYDANTIC + "test_prefect/test_prefect_agent_with_model_retry.yaml#1",
    "splitting-name": PYDANTIC + "test_temporal/test_durability_agent_with_model_retry.yaml#1",
    # two results of ".d|anger|ous_operation" in a row of turns (two over before; gpt-4.1-mini)
    "two-results": CREWAI + "hooks/TestNativeToolCallingHooksIntegration."
    "test_before_hook_blocks_tool_execution_in_crew.yaml#2",
    # cl100k tools (gpt-3.5-turbo): ".d|ummy_tool"
    "cl100k": CREWAI + "agents/test_agent_execute_task_with_tool.yaml#1",
}


@pytest.mark.skipif(not DATA.exists(), reason="recorded data (../shared/data/recorded) not present")
@pytest.mark.parametrize("case", sorted(RECORD_CASES))
def test_recorded_result_authors_count_exactly(case: str) -> None:
    assert_count_exact(RECORD_CASES, case)


def _count(messages: list[dict[str, Any]], model: str = "gpt-4o") -> int:
    body = {"model": model, "messages": messages}
    return PromptCounter(load_model_table()).tokenize(parse_request(body, provider="openai-chat")).count


@pytest.mark.parametrize("name", ["calculator", "get_weather", "dangerous_operation", "search"])
def test_the_result_header_is_functions_dot_and_the_name(name: str) -> None:
    enc = get_tokenizer("o200k_base")
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps({})}}
    turns = [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    result = {"role": "tool", "tool_call_id": "c", "content": "done"}
    # START, "functions", ".", the name, SEP, content, END (the "." is per_tool_result's token).
    header = 1 + len(enc.encode("functions")) + 1 + len(enc.encode(name)) + 1
    assert _count([*turns, result]) - _count(turns) == header + len(enc.encode("done")) + 1
