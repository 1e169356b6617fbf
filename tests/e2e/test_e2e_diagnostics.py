"""End to end: Anthropic's cache diagnostics through the proxy (observe mode), with the official SDK.

The emulator answers ``diagnostics: {"previous_message_id"}`` as Anthropic documents it
(provider-caching.md §2.7); the proxy reads the field from the response (streamed: from
``message_start``) and counts whether its own first reason names the same area, in
``cachewarden_provider_diagnosis_total{type, agrees}``. Observe mode: the client gets the bytes
the emulator sent, diagnostics included.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import metric, serving

POLICY = "\n".join(
    f"Rule {i}: answer questions about topic {i} with clause {i * 7 % 23}." for i in range(200)
)
TOOLS: list[Any] = [
    {
        "name": "lookup",
        "description": "Find a record.",
        "input_schema": {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]},
    }
]
MODEL = "claude-sonnet-5"


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    with (
        serving(create_emulator(), "emulator") as emulator,
        serving(build(Settings(anthropic_upstream=emulator.url)), "proxy") as proxy,
    ):
        yield proxy.url


def _diagnosis(url: str, kind: str, agrees: str) -> float:
    return metric(url, "cachewarden_provider_diagnosis_total", type=kind, agrees=agrees)


def _wait(url: str, kind: str, agrees: str, at_least: float) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _diagnosis(url, kind, agrees) < at_least:
        time.sleep(0.05)
    assert _diagnosis(url, kind, agrees) >= at_least, (kind, agrees)


def test_provider_diagnosis_is_read_and_compared(proxy_url: str) -> None:
    client = anthropic.Anthropic(base_url=proxy_url, api_key="sk-ant-test")
    system = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
    first_turn: list[Any] = [{"role": "user", "content": "Where is record 7?"}]
    first = client.messages.create(
        model=MODEL, max_tokens=32, system=system, tools=TOOLS, messages=first_turn
    )
    reply = [{"type": b.type, "text": b.text} if b.type == "text" else b.model_dump() for b in first.content]
    grown = [*first_turn, {"role": "assistant", "content": reply}, {"role": "user", "content": "And 8?"}]
    asked = {"diagnostics": {"previous_message_id": first.id}}

    # The conversation grows: no divergence (null), and cachewarden predicts the read.
    same = client.messages.create(
        model=MODEL, max_tokens=32, system=system, tools=TOOLS, messages=grown, extra_body=asked
    )
    assert same.diagnostics is None  # the SDK types the field
    _wait(proxy_url, "none", "true", 1)

    # The system prompt is edited: Anthropic says system_changed, cachewarden's first reason agrees.
    edited = [
        {"type": "text", "text": POLICY + "\nRule 999: be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    changed = client.messages.create(
        model=MODEL, max_tokens=32, system=edited, tools=TOOLS, messages=grown, extra_body=asked
    )
    assert changed.diagnostics is not None
    miss = changed.diagnostics.cache_miss_reason
    assert miss is not None and miss.type == "system_changed" and miss.cache_missed_input_tokens > 0
    _wait(proxy_url, "system_changed", "true", 1)

    # Streamed, the tools edited: read from message_start.
    other_tools = [{**TOOLS[0], "description": "Find a record by its reference."}]
    with client.messages.stream(
        model=MODEL, max_tokens=32, system=system, tools=other_tools, messages=grown, extra_body=asked
    ) as stream:
        for _ in stream:
            pass
    _wait(proxy_url, "tools_changed", "true", 1)

    # An id Anthropic does not know.
    client.messages.create(
        model=MODEL,
        max_tokens=32,
        system=system,
        tools=TOOLS,
        messages=grown,
        extra_body={"diagnostics": {"previous_message_id": "msg_01unknown"}},
    )
    _wait(proxy_url, "previous_message_not_found", "false", 1)


def test_the_proxy_asks_for_diagnostics_and_hides_them(tmp_path: Any) -> None:
    """--anthropic-diagnostics: the proxy adds previous_message_id itself; the client never sees it."""
    with (
        serving(create_emulator(), "emulator") as emulator,
        serving(
            build(Settings(anthropic_upstream=emulator.url, anthropic_diagnostics=True)), "proxy"
        ) as proxy,
    ):
        headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
        turn: list[Any] = [{"role": "user", "content": "Where is record 7?"}]
        body: dict[str, Any] = {"model": MODEL, "max_tokens": 32, "system": POLICY, "tools": TOOLS}
        first = httpx.post(proxy.url + "/v1/messages", json={**body, "messages": turn}, headers=headers)
        assert first.status_code == 200 and "diagnostics" not in first.json()
        # The first response must be analysed (its id remembered) before the next request is rewritten.
        _wait(proxy.url, "none", "true", 1)
        grown = [
            *turn,
            {"role": "assistant", "content": first.json()["content"]},
            {"role": "user", "content": "8?"},
        ]
        edited = {**body, "system": POLICY + "\nRule 999: be brief.", "messages": grown}
        second = httpx.post(proxy.url + "/v1/messages", json=edited, headers=headers)
        assert second.status_code == 200 and "diagnostics" not in second.json()
        assert "content-length" not in second.headers or int(second.headers["content-length"]) == len(
            second.content
        )
        _wait(proxy.url, "system_changed", "true", 1)
        with httpx.stream(
            "POST", proxy.url + "/v1/messages", json={**edited, "stream": True}, headers=headers
        ) as streamed:
            raw = b"".join(streamed.iter_raw())
        assert b"message_start" in raw and b"diagnostics" not in raw
        client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-test")
        reply = client.messages.create(model=MODEL, max_tokens=32, system=POLICY, tools=TOOLS, messages=grown)
        assert reply.diagnostics is None
