"""OpenAI's hidden system content counts toward no cache minimum (TokenizedPrompt.preamble).

The 2026 prompt-caching guide: "Tokens in the OpenAI-provided hidden system content do not count
toward this minimum." In gpt-5 Chat Completions with tools that content is the harmony tools preamble
(84 tokens, framing tools_once), billed with the prompt: a shared prefix of 1,024 tokens of which 84
are the preamble is below the minimum, while the cached amount, once reached, includes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cachewarden.proxy.engine.cache_model import predict
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Prompt, Segment

TOOL = json.dumps({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})


@dataclass(frozen=True)
class Match:
    common_prefix_tokens: int
    held_prefix_tokens: int


def _prompt(model: str, words: int) -> Prompt:
    text = "word " * words
    return Prompt(
        "openai-chat", model, (Segment("tools[0]", "tool", TOOL), Segment("m", "message", text, "user", 0))
    )


def _cached(model: str, words: int, shared: int) -> tuple[int, int, int]:
    table = load_model_table()
    prompt = _prompt(model, words)
    tp = PromptCounter(table).tokenize(prompt)
    rules = table.lookup(model, "openai-chat").cache
    got = predict(prompt, tp, rules, Match(shared, shared), lambda _: {}).cached_tokens
    return got, tp.preamble, tp.count


def test_the_gpt5_tools_preamble_does_not_count_toward_the_minimum() -> None:
    _, preamble, count = _cached("gpt-5-mini", 1100, 0)
    assert preamble == 84 and count > 1024 + 84
    # A shared prefix of 1,060 tokens: 1,024 with the preamble, 976 without it.
    assert _cached("gpt-5-mini", 1100, 1060) == (0, 84, count)
    # Past 1,024 + 84 it reads, in blocks counted from the start (the preamble included).
    assert _cached("gpt-5-mini", 1100, 1110)[0] == 1024
    # gpt-4o has no hidden preamble: 1,060 shared tokens read 1,024.
    assert _cached("gpt-4o", 1100, 1060)[:2] == (1024, 0)
