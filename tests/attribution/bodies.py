"""Realistic request bodies for attribution tests: one agent conversation in the three request formats.

A conversation is written once as provider-neutral turns and rendered as an OpenAI Chat, OpenAI
Responses or Anthropic Messages body. The system policy is long enough (~2,500 tokens) that every
model's minimum cacheable length is met, so a miss is always explained by the change under test.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

Body = dict[str, Any]
Turn = tuple[Any, ...]

FORMATS = ("openai-chat", "openai-responses", "anthropic")
MODELS = {"openai-chat": "gpt-4o", "openai-responses": "gpt-4o", "anthropic": "claude-sonnet-4-5"}

_TOPICS = (
    "refunds",
    "shipping delays",
    "damaged goods",
    "account security",
    "data retention",
    "escalation",
    "tone of voice",
    "order changes",
    "warranty claims",
    "gift cards",
    "loyalty points",
    "international orders",
)


def _policy() -> str:
    paragraphs = ["You are Atlas, the customer-support agent of Northwind Outfitters. Follow this policy."]
    for n, topic in enumerate(_TOPICS * 3, 1):
        paragraphs.append(
            f"{n}. On {topic}: read the message carefully, look the order up with the tools before "
            f"answering, quote the relevant clause of the {topic} policy in plain words, never promise what "
            f"the policy does not allow, and offer the next concrete step. If the customer is upset about "
            f"{topic}, acknowledge it once, briefly, then move to the facts. Record every decision about "
            f"{topic} in the ticket so that the next agent can pick it up without asking again."
        )
    return "\n\n".join(paragraphs)


POLICY = _policy()

TOOLS: list[dict[str, Any]] = [
    {
        "name": "lookup_order",
        "description": "Find an order by id and return its status, items and shipping history.",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "description": "The order number, e.g. 1234"},
                "include_history": {"type": "boolean", "description": "Include shipping events"},
            },
            "required": ["order_id"],
        },
    },
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "units": {"type": "string", "enum": ["metric", "imperial"]},
            },
            "required": ["city"],
        },
    },
    {
        "name": "create_ticket",
        "description": "Open a support ticket for follow-up by a human agent.",
        "parameters": {
            "type": "object",
            "properties": {
                "subject": {"type": "string"},
                "priority": {"type": "string", "enum": ["low", "normal", "high"]},
                "order_id": {"type": "string"},
            },
            "required": ["subject"],
        },
    },
    {
        "name": "search_docs",
        "description": "Search the help-center articles.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
]

EXTRA_TOOL: dict[str, Any] = {
    "name": "issue_refund",
    "description": "Refund an order or part of it.",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["order_id", "amount"],
    },
}

# ("user", text) | ("assistant", text) | ("call", id, name, arguments) | ("result", id, text)
# Arguments are a dict, or a str sent verbatim (OpenAI) to test serialisation drift.
TURNS: list[Turn] = [
    ("user", "Hi, my order 1234 has not arrived yet. Can you check where it is?"),
    ("call", "call_7QnX2a", "lookup_order", {"order_id": "1234", "include_history": True}),
    ("result", "call_7QnX2a", '{"status": "in transit", "carrier": "DHL", "eta": "in two days"}'),
    ("assistant", "Your order 1234 is in transit with DHL and should arrive in two days."),
    ("user", "Thanks. I'm travelling to Orléans, what's the weather there?"),
    ("call", "call_9PzK4b", "get_weather", {"city": "Orléans", "units": "metric"}),
    ("result", "call_9PzK4b", "18°C, light clouds, no rain expected."),
    ("assistant", "It is 18°C with light clouds in Orléans, and no rain is expected."),
    ("user", "Great. Please open a ticket so someone watches the delivery."),
]

NEXT_TURNS: list[Turn] = [
    ("call", "call_3RtY8c", "create_ticket", {"subject": "Watch delivery of order 1234", "order_id": "1234"}),
    ("result", "call_3RtY8c", '{"ticket": "T-5512", "state": "open"}'),
    ("assistant", "I opened ticket T-5512; a colleague will watch the delivery."),
    ("user", "Perfect, thank you!"),
]


def _args(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _input(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def chat(
    turns: Sequence[Turn] = TURNS,
    *,
    system: str | None = POLICY,
    tools: Sequence[dict[str, Any]] | None = TOOLS,
    model: str = MODELS["openai-chat"],
) -> Body:
    messages: list[dict[str, Any]] = []
    if system is not None:
        messages.append({"role": "system", "content": system})
    for turn in turns:
        kind = turn[0]
        if kind in ("user", "assistant"):
            messages.append({"role": kind, "content": turn[1]})
        elif kind == "call":
            call = {
                "id": turn[1],
                "type": "function",
                "function": {"name": turn[2], "arguments": _args(turn[3])},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "result":
            messages.append({"role": "tool", "tool_call_id": turn[1], "content": turn[2]})
        elif kind == "image":
            messages.append(
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": turn[1]}}]}
            )
    body: Body = {"model": model, "messages": messages}
    if tools:
        body["tools"] = [{"type": "function", "function": copy.deepcopy(t)} for t in tools]
    return body


def responses(
    turns: Sequence[Turn] = TURNS,
    *,
    system: str | None = POLICY,
    tools: Sequence[dict[str, Any]] | None = TOOLS,
    model: str = MODELS["openai-responses"],
) -> Body:
    items: list[dict[str, Any]] = []
    for turn in turns:
        kind = turn[0]
        if kind == "user":
            items.append({"role": "user", "content": [{"type": "input_text", "text": turn[1]}]})
        elif kind == "assistant":
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": turn[1]}],
                }
            )
        elif kind == "call":
            items.append(
                {"type": "function_call", "call_id": turn[1], "name": turn[2], "arguments": _args(turn[3])}
            )
        elif kind == "result":
            items.append({"type": "function_call_output", "call_id": turn[1], "output": turn[2]})
        elif kind == "image":
            items.append({"role": "user", "content": [{"type": "input_image", "image_url": turn[1]}]})
    body: Body = {"model": model, "input": items}
    if system is not None:
        body["instructions"] = system
    if tools:
        body["tools"] = [{"type": "function", **copy.deepcopy(t)} for t in tools]
    return body


def anthropic(
    turns: Sequence[Turn] = TURNS,
    *,
    system: str | Sequence[str] | None = POLICY,
    tools: Sequence[dict[str, Any]] | None = TOOLS,
    model: str = MODELS["anthropic"],
    cache_last: bool = True,
) -> Body:
    messages: list[dict[str, Any]] = []

    def push(role: str, block: dict[str, Any]) -> None:
        if messages and messages[-1]["role"] == role and isinstance(messages[-1]["content"], list):
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for turn in turns:
        kind = turn[0]
        if kind in ("user", "assistant"):
            push(kind, {"type": "text", "text": turn[1]})
        elif kind == "call":
            push("assistant", {"type": "tool_use", "id": turn[1], "name": turn[2], "input": _input(turn[3])})
        elif kind == "result":
            push("user", {"type": "tool_result", "tool_use_id": turn[1], "content": turn[2]})
        elif kind == "image":
            push("user", {"type": "image", "source": {"type": "url", "url": turn[1]}})
    body: Body = {"model": model, "max_tokens": 1024, "messages": messages}
    if system is not None:
        blocks = [system] if isinstance(system, str) else list(system)
        body["system"] = [{"type": "text", "text": text} for text in blocks]
        body["system"][-1]["cache_control"] = {"type": "ephemeral"}
    if tools:
        body["tools"] = [
            {
                "name": t["name"],
                "description": t["description"],
                "input_schema": copy.deepcopy(t["parameters"]),
            }
            for t in tools
        ]
    if cache_last and messages:
        last = messages[-1]["content"][-1]
        last["cache_control"] = {"type": "ephemeral"}
    return body


BUILDERS: dict[str, Callable[..., Body]] = {
    "openai-chat": chat,
    "openai-responses": responses,
    "anthropic": anthropic,
}


def build(fmt: str, turns: Sequence[Turn] = TURNS, **kwargs: Any) -> Body:
    return BUILDERS[fmt](turns, **kwargs)


def with_system(fmt: str, system: str, turns: Sequence[Turn] = TURNS, **kwargs: Any) -> Body:
    return build(fmt, turns, system=system, **kwargs)


# ---------------------------------------------------------------------------------------------------
# Running a pair through the engine (what `cachewarden diff` does), with the data tables loaded once.

_SHARED: dict[str, Any] = {}


def engine() -> Any:
    from cachewarden.proxy.engine.engine import Engine
    from cachewarden.proxy.engine.models import load_model_table
    from cachewarden.proxy.engine.pricing import PriceTable

    if not _SHARED:
        _SHARED["table"] = load_model_table()
        _SHARED["prices"] = PriceTable.load()
    return Engine(table=_SHARED["table"], prices=_SHARED["prices"])


def diff(fmt: str | None, previous: Body, next_: Body) -> Any:
    """The DiffReport of two bodies (``fmt`` None: inferred from each body)."""
    from cachewarden.proxy.cli.diff import diff_prompts
    from cachewarden.proxy.engine.adapters import parse_request

    return diff_prompts(parse_request(previous, fmt), parse_request(next_, fmt), engine())  # type: ignore[arg-type]


def codes(report: Any) -> list[str]:
    return [r.code for r in report.reasons]
