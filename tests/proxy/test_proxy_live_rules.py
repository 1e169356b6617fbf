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
