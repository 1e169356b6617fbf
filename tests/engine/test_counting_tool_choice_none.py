"""Chat Completions ``tool_choice: "none"`` (and legacy ``function_call: "none"``) primes the reply one
token longer (Prompt.calls_declined), where a forced call primes it too (ChatML models; the harmony
format recorded no change).

Public reference: hmarr/openai-chat-tokens' API-measured legacy case (tests/engine/
test_openai_tool_counting.py, 32 against 31 with "auto"). Record cases: the third cassette source's
dev half, each one under before (cassette_counts; skipped where the cassettes are absent).
"""

from __future__ import annotations

from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cassette_counts import counted

CASSETTES = {
    "gpt-4o": "Future-House/ldp:tests/cassettes/TestReActAgent.test_agent_grad[False-gpt-4o].yaml#0",
    "gpt-4o-2024-11-20": "Future-House/ldp:tests/cassettes/"
    "TestAgentState.test_no_state_mutation[agent2].yaml#0",
    "gpt-4o-mini": "Future-House/ldp:packages/lmi/tests/cassettes/"
    "TestTooling.test_custom_tool_parser_from_config.yaml#0",
}

TOOL = {"type": "function", "function": {"name": "roll", "parameters": {"type": "object", "properties": {}}}}


def _count(model: str, **extra: Any) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "Roll."}], "tools": [TOOL], **extra}
    return PromptCounter(load_model_table()).tokenize(parse_request(body, provider="openai-chat")).count


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4.1-mini", "gpt-3.5-turbo"])
def test_none_costs_one_more_than_auto(model: str) -> None:
    assert _count(model, tool_choice="none") == _count(model, tool_choice="auto") + 1 == _count(model) + 1


def test_harmony_none_costs_what_auto_does() -> None:
    # pydantic-ai's test_tool_choice_matrix[none-openai] (gpt-5-mini) is exact without the token.
    assert _count("gpt-5-mini", tool_choice="none") == _count("gpt-5-mini", tool_choice="auto")


@pytest.mark.parametrize("case", sorted(CASSETTES))
def test_cassettes(case: str) -> None:
    got, reported = counted(CASSETTES[case])
    assert got == reported
