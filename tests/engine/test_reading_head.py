"""A conversation's head (tools, output schema, instructions) is read once while it is the same objects.

A body ``ConversationReader.load`` grew from the previous one shares that body's tools as objects,
so its head segments are the previous prompt's own (``earlier_head``), not dumped and digested
again. Equal values in new objects (a body parsed whole) are read again; every prompt equals
``parse_request``'s (the property tests of test_incremental.py cover random edits).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarden.proxy.engine import reading
from cachewarden.proxy.engine.adapters import (
    anthropic,
    load_body,
    openai_chat,
    openai_responses,
    parse_request,
)
from cachewarden.proxy.engine.prompt import Provider
from cachewarden.proxy.engine.reading import ConversationReader

TOOLS = [
    {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object"}}}
    for i in range(4)
]


def chat(turns: int, tools: list[Any] = TOOLS) -> bytes:
    messages = [{"role": "system", "content": "Be brief."}]
    messages += [{"role": "user", "content": f"turn {i}"} for i in range(turns)]
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}}
    return json.dumps(
        {"model": "gpt-4o", "tools": tools, "response_format": schema, "messages": messages}
    ).encode()


def responses(turns: int) -> bytes:
    tools = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
    items = [{"role": "user", "content": f"turn {i}"} for i in range(turns)]
    return json.dumps(
        {"model": "gpt-4o", "instructions": "Be brief.", "tools": tools, "input": items}
    ).encode()


def messages(turns: int) -> bytes:
    tools = [
        {"name": "read", "input_schema": {"type": "object"}},
        # Deferred: not in the prompt until a tool_reference loads it (state the head hands the items).
        {"name": "write", "input_schema": {"type": "object"}, "defer_loading": True},
    ]
    items: list[Any] = [{"role": "user", "content": [{"type": "tool_reference", "tool_name": "write"}]}]
    items += [{"role": "user", "content": f"turn {i}"} for i in range(1, turns)]
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8,
        "system": system,
        "tools": tools,
        "messages": items,
    }
    return json.dumps(body).encode()


def counting(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[int]:
    calls: list[int] = []
    name = "_head" if module is anthropic else "tool_segments"
    real = getattr(module, name)

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize(
    ("provider", "make", "module"),
    [
        ("openai-chat", chat, openai_chat),
        ("openai-responses", responses, openai_responses),
        ("anthropic", messages, anthropic),
    ],
)
def test_a_grown_body_takes_the_earlier_head_over(
    monkeypatch: pytest.MonkeyPatch, provider: Provider, make: Any, module: Any
) -> None:
    calls = counting(monkeypatch, module)
    reader = ConversationReader()
    prompts = []
    # From two items on: a conversation is named by its first two (``reading._conversation``).
    for turns in range(2, 7):
        raw = make(turns)
        prompts.append(reader.parse(reader.load(raw, tenant="t"), provider, tenant="t"))
        assert prompts[-1] == parse_request(load_body(raw), provider), turns
    # Once by the reader (the first body), once per parse_request above.
    assert len(calls) == 1 + 5
    heads = {"openai-chat": 3, "openai-responses": 2, "anthropic": 2}[provider]  # the first body's items
    heads = len(prompts[0].segments) - heads
    assert all(p.segments[i] is prompts[0].segments[i] for p in prompts for i in range(heads))
    assert all(p.basis is not None for p in prompts[1:])


def test_equal_tools_in_new_objects_are_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch, openai_chat)
    reader = ConversationReader()
    # Parsed whole (not loaded): every body's tools are objects of their own, equal in value.
    for turns in range(1, 4):
        reader.parse(load_body(chat(turns)), "openai-chat", tenant="t")
    assert len(calls) == 3


def test_tools_changed_between_turns_are_read_again() -> None:
    reader = ConversationReader()
    renamed = [{**TOOLS[0], "function": {"name": "other", "parameters": {}}}, *TOOLS[1:]]
    for turns, tools in ((1, TOOLS), (2, TOOLS), (3, renamed), (4, renamed), (5, TOOLS)):
        raw = chat(turns, tools)
        got = reader.parse(reader.load(raw, tenant="t"), "openai-chat", tenant="t")
        assert got == parse_request(load_body(raw), "openai-chat"), turns


def test_a_grown_body_is_named_by_the_body_it_grew_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its conversation's key is the earlier body's (the naming items are the same objects), not
    a dump and hash of its system prompt again; a body parsed whole is named by its items."""
    named: list[int] = []
    real = reading._conversation

    def counted(*args: Any) -> Any:
        named.append(1)
        return real(*args)

    monkeypatch.setattr(reading, "_conversation", counted)
    reader = ConversationReader()
    for turns in range(2, 7):
        raw = chat(turns)
        got = reader.parse(reader.load(raw, tenant="t"), "openai-chat", tenant="t")
        assert got == parse_request(load_body(raw), "openai-chat")
        assert turns == 2 or got.basis is not None
    assert len(named) == 1
    # Another tenant's reader state is its own: the same bytes are named afresh there.
    other = reader.parse(reader.load(chat(7), tenant="u"), "openai-chat", tenant="u")
    assert other.basis is None and len(named) == 2
    reader.parse(load_body(chat(8)), "openai-chat", tenant="t")
    assert len(named) == 3
