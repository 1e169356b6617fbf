"""The agent workload shared by the engine and proxy benchmarks: deterministic OpenAI chat bodies
with a long system prompt, 14 tools and a conversation that gains a tool call and its result per turn."""

from __future__ import annotations

import json
import random
from typing import Any

_VOCABULARY = (
    "the agent must read file call tool result error retry order customer account refund policy shipping "
    "invoice status pending review approve deny escalate ticket summary context window cache prefix token "
    "request response stream model latency budget user assistant system function argument schema value "
    "string integer boolean array object property required optional default format date time zone region "
    "warehouse inventory product catalog price discount tax currency payment method card bank transfer "
    "never always only when if then else because therefore however also must should may cannot include "
    "exclude before after during until while report explain cite section rule example note warning step"
)
_WORDS = tuple(_VOCABULARY.split())


def text(rng: random.Random, size: int) -> str:
    """About ``size`` characters of prose-like text, with numbered and sentence-ending words."""
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        if rng.random() < 0.08:
            word = f"{word}_{rng.randrange(1000)}"
        if rng.random() < 0.07:
            word += "."
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def tools(rng: random.Random, count: int = 14) -> list[dict[str, Any]]:
    """Function tools of ~850 bytes each (about 11.8 KB for 14, like tau-bench's airline domain)."""
    out: list[dict[str, Any]] = []
    for i in range(count):
        props = {
            f"{rng.choice(_WORDS)}_{j}": {
                "type": rng.choice(["string", "integer", "boolean"]),
                "description": text(rng, 60),
            }
            for j in range(5)
        }
        out.append(
            {
                "type": "function",
                "function": {
                    "name": f"tool_{i}_{rng.choice(_WORDS)}",
                    "description": text(rng, 420),
                    "parameters": {"type": "object", "properties": props, "required": sorted(props)[:2]},
                },
            }
        )
    return out


def tool_turn(rng: random.Random, names: list[str], call_id: str) -> list[str]:
    """One agent step as two serialised messages: the assistant's tool call and the tool's result."""
    args = dumps({"query": text(rng, 80), "limit": rng.randrange(1, 50)})
    call = {"id": call_id, "type": "function", "function": {"name": rng.choice(names), "arguments": args}}
    return [
        dumps({"role": "assistant", "content": None, "tool_calls": [call]}),
        dumps({"role": "tool", "tool_call_id": call_id, "content": text(rng, 760)}),
    ]
