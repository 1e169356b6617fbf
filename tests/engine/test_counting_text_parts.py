"""Responses: the text parts of one message are one text (framing.parts_joined).

A user message sent as two ``input_text`` parts costs what the two texts cost concatenated without a
separator: where a part ends in punctuation and the next starts with a word, o200k joins them into one
token (".Now"), and the provider's count is one less than the parts tokenized apart. Record cases:
the dev half of the cassettes (gpt-4.1 and gpt-5-nano, each one over before) and two training
records of ../shared/data/recorded where no token spans the boundary (exact before and after).
"""

from __future__ import annotations

from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.tokenizers import get_tokenizer
from cassette_counts import counted
from recorded_counts import DATA, assert_count_exact

CASSETTES = {
    # gpt-4.1: "... programming." + "Now explain ..." (21 reported, 22 counted before)
    "gpt-4.1": "activeagents/activeagent:test/fixtures/vcr_cassettes/integration/open_ai/responses/"
    "common_format/messages_test/test_agent_text_messages_bare.yml#0",
    # gpt-5-nano: "...file?" + "<file name=...>" (30 reported, 31 counted before)
    "gpt-5-nano": "crmne/ruby_llm:spec/fixtures/vcr_cassettes/"
    "chat_text_models_openai_gpt-5-nano_can_understand_text.yml#0",
}

RECORDED = {
    "gpt-4o-two-empty": "responses:Mirascope/mirascope:python/tests/e2e/input/cassettes/"
    "test_call_with_two_empty_string/openai_gpt_4o_responses.yaml#0",
    "gpt-5-mini-multi-part": "responses:Mirascope/mirascope:typescript/tests/e2e/input/cassettes/call/"
    "openai_responses/encodes-multi-part-user-content.har#0",
}


def _count(body: dict[str, Any]) -> int:
    return PromptCounter(load_model_table()).tokenize(parse_request(body, provider="openai-responses")).count


def _message(*texts: str) -> dict[str, Any]:
    parts = [{"type": "input_text", "text": t} for t in texts]
    return {"model": "gpt-4.1", "input": [{"role": "user", "content": parts}]}


@pytest.mark.parametrize(
    "texts", [("Say hello.", "Now say goodbye."), ("one", " two", "three"), ("", "x"), ("a\n", "\nb")]
)
def test_parts_cost_their_concatenation(texts: tuple[str, ...]) -> None:
    assert _count(_message(*texts)) == _count(_message("".join(texts)))


def test_a_boundary_token_is_counted_once() -> None:
    # The case the rule is for: apart, "." and "Now" are two tokens; joined, ".Now" is one.
    enc = get_tokenizer("o200k_base")
    assert len(enc.encode("Say hello.Now go.")) < len(enc.encode("Say hello.")) + len(enc.encode("Now go."))
    assert _count(_message("Say hello.", "Now go.")) == _count(_message("Say hello.Now go."))


def test_chat_completions_unchanged() -> None:
    # Chat Completions content parts: no recorded case, so not joined (the parts cost their own tokens).
    parts = [{"type": "text", "text": "Say hello."}, {"type": "text", "text": "Now go."}]
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": parts}]}
    prompt = parse_request(body, provider="openai-chat")
    enc = get_tokenizer("o200k_base")
    assert PromptCounter(load_model_table()).tokenize(prompt).count == 3 + 1 + 3 + sum(
        len(enc.encode(p["text"])) for p in parts
    )


@pytest.mark.parametrize("case", sorted(CASSETTES))
def test_cassettes(case: str) -> None:
    got, reported = counted(CASSETTES[case])
    assert got == reported


@pytest.mark.skipif(not DATA.exists(), reason="recorded data not present")
@pytest.mark.parametrize("case", sorted(RECORDED))
def test_recorded(case: str) -> None:
    assert_count_exact(RECORDED, case)
