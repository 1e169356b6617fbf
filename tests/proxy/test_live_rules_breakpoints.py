"""The live rules' memo key of a conversation's next turn reads only its new segments' breakpoints.

``LiveRules._marks_of`` takes the earlier prompt's breakpoints for the segments the two share
(the prompt's basis) and reads the rest; the key is the one a whole read gives, whatever moves.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarden.proxy.engine.reading import ConversationReader
from cachewarden.proxy.server import live_rules
from cachewarden.proxy.server.live_rules import LiveRules

MARK = {"type": "ephemeral"}


def body(turns: int, marked: set[int]) -> bytes:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        block: dict[str, Any] = {"type": "text", "text": f"turn {i}: " + "words " * 5}
        if i in marked:
            block["cache_control"] = MARK
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": [block]})
    system = [{"type": "text", "text": "Be brief.", "cache_control": MARK}]
    return json.dumps(
        {"model": "claude-sonnet-4-5", "max_tokens": 8, "system": system, "messages": messages}
    ).encode()


@pytest.fixture(scope="module")
def rules() -> LiveRules:
    return LiveRules()


def test_breakpoints_are_read_from_where_the_turn_parts(
    rules: LiveRules, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts: list[int] = []
    real = live_rules._marks

    def recorded(segs: Any, start: int = 0) -> list[int]:
        starts.append(start)
        return real(segs, start)

    monkeypatch.setattr(live_rules, "_marks", recorded)
    reader = ConversationReader()
    # Breakpoints that stay, move forward each turn (a rolling one on the last turn), and one edit
    # of an early turn that parts the conversation from its history.
    plans = [(t, {1, t - 1}) for t in range(3, 12)] + [(12, {0, 11}), (13, {0, 12})]
    held = []  # the earlier prompts, alive as the engine's history keeps them (a basis is weak)
    for turns, marked in plans:
        raw = body(turns, marked)
        prompt = reader.parse(reader.load(raw, tenant="t"), "anthropic", tenant="t")
        held.append(prompt)
        starts.clear()
        got = rules._marks_of(prompt)
        if prompt.basis is not None and turns < 12:
            assert starts == [prompt.basis.shared], "the shared segments are not read again"
        assert got == real(prompt.segments), (turns, marked)
        assert live_rules._key(prompt, got) == live_rules._key(prompt), (turns, marked)


def test_a_prompt_without_a_basis_is_read_whole(rules: LiveRules) -> None:
    reader = ConversationReader()
    prompt = reader.parse(reader.load(body(5, {2}), tenant="u"), "anthropic", tenant="u")
    assert prompt.basis is None
    assert rules._marks_of(prompt) == live_rules._marks(prompt.segments)
    assert rules.findings(prompt, body(5, {2})) == rules.findings(prompt, body(5, {2}))
