"""A message's author ``name`` costs the tokens of ``":" + name``, a text of its own (framing.name_prefix).

Public references: openai/harmony's renderer (src/encoding.rs) writes the role, then ``":{name}"``
as a text of its own; wandb/weave's AutoGen cassettes (tests/integrations/autogen/cassettes/
autogen_test/test_agentchat_run_with_tool.yaml, test_agentchat_group_chat.yaml,
test_agent_with_memory.yaml; gpt-4.1-nano, ``name: "user"`` on user messages) report 1 token for
the name in each of their 6 requests: ":user" is one o200k token, where the cookbook's "name + 1"
gives 2. The cookbook's names ("example_user", "example_assistant") cost name + 1 either way
(test_counting_cookbook.py). No calibration record has a name; the rule was fixed before any held-out
named request was counted (in aggregate afterwards: the dev halves' 2 and the final halves' 8 all
exact, 3 of them before).
"""

from __future__ import annotations

from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.tokenizers import get_tokenizer


def _count(messages: list[dict[str, Any]], model: str) -> int:
    body = {"model": model, "messages": messages}
    return PromptCounter(load_model_table()).tokenize(parse_request(body, provider="openai-chat")).count


@pytest.mark.parametrize(
    ("model", "encoding"),
    [("gpt-4.1-nano", "o200k_base"), ("gpt-4o", "o200k_base"), ("gpt-4", "cl100k_base")],
)
@pytest.mark.parametrize("role", ["system", "user", "assistant"])
@pytest.mark.parametrize("name", ["user", "example_user", "test", "Alice"])
def test_a_name_costs_colon_and_name_as_one_text(model: str, encoding: str, role: str, name: str) -> None:
    system = {"role": "system", "content": "You are a helpful assistant."}
    message = {"role": role, "content": "What is the weather in New York?"}
    cost = _count([system, {**message, "name": name}], model) - _count([system, message], model)
    assert cost == len(get_tokenizer(encoding).encode(":" + name))


def test_the_colon_merges_with_some_names_only() -> None:
    """Where the old rule (name + 1) and this one part: ":user" is one token, ":Alice" two."""
    enc = get_tokenizer("o200k_base")
    assert len(enc.encode(":user")) == len(enc.encode("user")) == 1
    assert len(enc.encode(":Alice")) == len(enc.encode("Alice")) + 1
