"""Request bodies and LOG lines for the replay tests: one growing support conversation, in three formats.

The system policy is long enough (about 2,000 tokens) that every model's minimum cacheable length is
met, so a miss in these tests is always explained by what the test changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Body = dict[str, Any]

POLICY = "\n\n".join(
    f"{n}. On {topic}: look the order up before answering, quote the relevant clause of the {topic} "
    f"policy in plain words, never promise what the policy does not allow, and offer one next step. "
    f"Record every decision about {topic} in the ticket so that the next agent needs not ask again."
    for n, topic in enumerate(
        ["refunds", "shipping", "damaged goods", "security", "retention", "escalation", "gift cards"] * 4, 1
    )
)
SYSTEM = "You are Atlas, the support agent of Northwind Outfitters.\n\n" + POLICY

TOOL = {
    "name": "lookup_order",
    "description": "Find an order by id and return its status and items.",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    },
}

# Where the shared third-party data sits beside the checkout (never copied into the repository).
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def turns(n: int) -> list[tuple[str, str]]:
    """``n`` alternating user / assistant turns, ending with a user turn."""
    out: list[tuple[str, str]] = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append((role, f"Turn {i}: where is order {1000 + i}? It was due last week and nothing came."))
    return out


def chat(n: int, system: str = SYSTEM, model: str = "gpt-4o") -> Body:
    messages = [{"role": "system", "content": system}]
    messages += [{"role": role, "content": text} for role, text in turns(n)]
    return {"model": model, "messages": messages, "tools": [{"type": "function", "function": TOOL}]}


def responses(n: int, system: str = SYSTEM, model: str = "gpt-4o") -> Body:
    items = [{"role": role, "content": text} for role, text in turns(n)]
    tool = {"type": "function", **TOOL}
    return {"model": model, "instructions": system, "input": items, "tools": [tool]}


def anthropic(n: int, system: str = SYSTEM, model: str = "claude-sonnet-4-5") -> Body:
    tool = {"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}
    return {
        "model": model,
        "max_tokens": 1024,
        # Automatic caching: the breakpoint follows the last block, so the conversation is cached.
        "cache_control": {"type": "ephemeral"},
        "system": system,
        "tools": [tool],
        "messages": [{"role": role, "content": text} for role, text in turns(n)],
    }


BUILDERS = {"openai-chat": chat, "openai-responses": responses, "anthropic": anthropic}


def line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def write_log(path: Path, objs: list[Any]) -> str:
    path.write_text("".join(o if isinstance(o, str) else line(o) for o in objs), encoding="utf-8")
    return str(path)
