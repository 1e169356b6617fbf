"""The lint rules on live requests: findings, memoised per agent prefix, skipped for huge bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.server import live_rules
from cachewarden.proxy.server.live_rules import LiveRules

SYSTEM = "You are the booking agent.\n" + "Follow the refund policy in every answer.\n" * 40


def body(user: str, *, when: str = "") -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 16,
        "system": [{"type": "text", "text": f"Now: {when}\n{SYSTEM}" if when else SYSTEM}],
        "messages": [{"role": "user", "content": user}],
    }


def test_findings_are_memoised_by_the_agent_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = LiveRules()
    calls = 0
    real = rules._lint

    def counting(path: str, text: str) -> Any:
        nonlocal calls
        calls += 1
        return real(path, text)

    monkeypatch.setattr(rules, "_lint", counting)
    volatile = body("hi", when="2026-11-29T10:00:00Z")
    found = rules.findings(parse_request(volatile), json.dumps(volatile).encode())
    assert any(reason == "timestamp" for _, reason in found), found
    again = body("another question", when="2026-11-29T10:00:00Z")
    assert rules.findings(parse_request(again), json.dumps(again).encode()) == found
    assert calls == 1


def test_huge_bodies_are_not_linted(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = LiveRules()

    def explode(path: str, text: str) -> Any:
        raise AssertionError("linted")

    monkeypatch.setattr(rules, "_lint", explode)
    big = body("x" * (live_rules.MAX_LINT_BYTES + 10))
    assert rules.findings(parse_request(big), json.dumps(big).encode()) == ()


def _chat(system: str, turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    messages += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(turns)
    ]
    return {"model": "gpt-4o", "messages": messages}


def _counted(rules: LiveRules, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    linted: list[str] = []
    real = rules._lint

    def counting(path: str, text: str) -> Any:
        linted.append(text)
        return real(path, text)

    monkeypatch.setattr(rules, "_lint", counting)
    return linted


def test_a_growing_conversation_is_linted_once_per_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Appended turns keep the key; a changed system message (a leading message, not top-level text)
    and the step from one turn to two (a value at the end of a single-turn prompt busts nothing) do not."""
    rules = LiveRules()
    linted = _counted(rules, monkeypatch)
    system = SYSTEM + "Today is 2026-11-29T10:00:00Z."
    first = [
        rules.findings(parse_request(b), json.dumps(b).encode()) for b in (_chat(system, 1), _chat(system, 2))
    ]
    assert len(linted) == 2 and first[0] != first[1]  # the timestamp at the end matters from turn two
    for turns in range(3, 12):
        again = _chat(system, turns)
        assert rules.findings(parse_request(again), json.dumps(again).encode()) == first[1]
    assert len(linted) == 2
    other = _chat(SYSTEM + "Today is 2026-11-30T10:00:00Z.", 5)
    rules.findings(parse_request(other), json.dumps(other).encode())
    assert len(linted) == 3


def test_a_moved_breakpoint_is_linted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = LiveRules()
    linted = _counted(rules, monkeypatch)
    for where in (0, 0, 1):
        b = body("hi")
        b["messages"] = [
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
        ]
        b["messages"][where]["content"][0]["cache_control"] = {"type": "ephemeral"}
        rules.findings(parse_request(b), json.dumps(b).encode())
    assert len(linted) == 2
