"""Upstream faults through the proxy, injected by the emulator (header ``x-emulator-fault``).

Refused connection → 502 and timeout → 504, both in the provider's error shape (the official SDKs
raise their typed errors); 5xx and 429 + Retry-After relayed unchanged (status, headers, body); a
slow first byte below the timeout succeeds; a connection dropped mid-stream ends the client's stream
with an error, never a hang (every client call has a timeout). Each fault is counted in
``requests_total{status}`` and ``upstream_errors_total{kind}``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import free_port, metric, serving

CLIENT_TIMEOUT = 10.0
FAULT = "x-emulator-fault"
# uvicorn as ``cachewarden proxy`` runs it (no Server / Date headers of its own); 30 s to stop.
AS_THE_CLI: dict[str, Any] = {"server_header": False, "date_header": False, "stop_timeout": 30}


def wait_metric(url: str, name: str, at_least: float, **labels: str) -> float:
    """Requests are counted once their analysis ended, just after the client got the answer."""
    deadline = time.monotonic() + 10
    while (value := metric(url, name, **labels)) < at_least and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


@dataclass
class Stack:
    emulator: str
    proxy: str  # upstream timeout 0.5 s
    refused: str  # upstream is a closed port


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    closed = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
    with serving(create_emulator(), "emulator", **AS_THE_CLI) as emulator:
        fast = build(
            Settings(openai_upstream=emulator.url, anthropic_upstream=emulator.url, upstream_timeout=0.5)
        )
        dead = build(Settings(openai_upstream=closed, anthropic_upstream=closed, connect_timeout=2))
        with (
            serving(fast, "proxy", **AS_THE_CLI) as proxy,
            serving(dead, "refused", **AS_THE_CLI) as refused,
        ):
            yield Stack(emulator.url, proxy.url, refused.url)


def oa(base: str) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-rel-up", base_url=base + "/v1", max_retries=0, timeout=CLIENT_TIMEOUT)


def an(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-rel-up", base_url=base, max_retries=0, timeout=CLIENT_TIMEOUT)


CHAT: list[Any] = [{"role": "user", "content": "Where is my booking?"}]
MODEL_OA, MODEL_AN = "gpt-4.1", "claude-sonnet-5"


def call(provider: str, base: str, *, stream: bool = False, fault: str | None = None) -> str:
    """One SDK call; returns the answer text (streams read to the end)."""
    headers = {FAULT: fault} if fault else {}
    if provider == "openai":
        with oa(base) as client:
            if stream:
                chunks = client.chat.completions.create(
                    model=MODEL_OA, messages=CHAT, stream=True, extra_headers=headers
                )
                return "".join(c.delta.content or "" for chunk in chunks for c in chunk.choices)
            completion = client.chat.completions.create(model=MODEL_OA, messages=CHAT, extra_headers=headers)
            return completion.choices[0].message.content or ""
    with an(base) as client:
        if stream:
            events = client.messages.create(
                model=MODEL_AN, max_tokens=32, messages=CHAT, stream=True, extra_headers=headers
            )
            return "".join(
                e.delta.text
                for e in events
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            )
        message = client.messages.create(model=MODEL_AN, max_tokens=32, messages=CHAT, extra_headers=headers)
        return "".join(b.text for b in message.content if b.type == "text")


PROVIDERS = ["openai", "anthropic"]
LABEL = {"openai": "openai-chat", "anthropic": "anthropic"}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_refused_connection_is_502_in_the_providers_shape(stack: Stack, provider: str) -> None:
    before = metric(stack.refused, "cachewarden_upstream_errors_total", kind="transport")
    started = time.monotonic()
    with pytest.raises(
        openai.InternalServerError if provider == "openai" else anthropic.InternalServerError
    ) as e:
        call(provider, stack.refused)
    assert time.monotonic() - started < 5
    error: Any = e.value
    assert error.status_code == 502
    body: Any = error.body
    if provider == "openai":
        assert (
            body["type"] == "server_error" and body["code"] == "upstream_unreachable"
        )  # the SDK unwraps "error"
        assert "unreachable" in body["message"]
    else:
        assert body == {"type": "error", "error": {"type": "api_error", "message": body["error"]["message"]}}
        assert "unreachable" in body["error"]["message"]
    assert (
        wait_metric(stack.refused, "cachewarden_requests_total", 1, provider=LABEL[provider], status="502")
        >= 1
    )
    assert metric(stack.refused, "cachewarden_upstream_errors_total", kind="transport") == before + 1
    assert httpx.get(stack.refused + "/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_timeout_is_504(stack: Stack, provider: str, stream: bool) -> None:
    before = metric(stack.proxy, "cachewarden_upstream_errors_total", kind="timeout")
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError if provider == "openai" else anthropic.APIStatusError) as e:
        call(provider, stack.proxy, stream=stream, fault="delay=2")
    assert time.monotonic() - started < 1.5  # the proxy's 0.5 s, not the upstream's 2 s
    error: Any = e.value
    assert error.status_code == 504
    text = str(error.body)
    assert "timed out" in text and "sk-rel-up" not in text
    assert (
        wait_metric(stack.proxy, "cachewarden_upstream_errors_total", before + 1, kind="timeout")
        == before + 1
    )
    assert metric(stack.proxy, "cachewarden_requests_total", provider=LABEL[provider], status="504") >= 1


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fault", ["status=500", "status=503", "status=529", "status=429;retry-after=2"])
def test_upstream_errors_are_relayed_unchanged(stack: Stack, provider: str, fault: str) -> None:
    path = "/v1/chat/completions" if provider == "openai" else "/v1/messages"
    body = (
        {"model": MODEL_OA, "messages": CHAT}
        if provider == "openai"
        else {"model": MODEL_AN, "max_tokens": 8, "messages": CHAT}
    )
    headers = {FAULT: fault, "authorization": "Bearer sk-rel-up", "x-api-key": "sk-rel-up"}
    status = int(fault.split(";")[0].split("=")[1])
    before = metric(stack.proxy, "cachewarden_requests_total", status=str(status))
    seen = []
    for base in (stack.emulator, stack.proxy):
        r = httpx.post(base + path, json=body, headers=headers, timeout=CLIENT_TIMEOUT)
        # The emulator's request id is random per response: everything else must be equal.
        raw = [(k, v) for k, v in r.headers.raw if k.lower() not in (b"request-id", b"x-request-id")]
        seen.append((r.status_code, raw, r.content))
    assert seen[1] == seen[0]
    assert seen[1][0] == status
    if "retry-after" in fault:
        assert (b"retry-after", b"2") in seen[1][1]
    assert (
        wait_metric(stack.proxy, "cachewarden_requests_total", before + 1, status=str(status)) == before + 1
    )
    # SDKs see their typed error (rate limit: RateLimitError) exactly as without the proxy.
    module: Any = openai if provider == "openai" else anthropic
    with pytest.raises(module.RateLimitError if status == 429 else module.APIStatusError) as e:
        call(provider, stack.proxy, fault=fault)
    assert e.value.status_code == status


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_slow_first_byte_below_the_timeout_succeeds(stack: Stack, provider: str, stream: bool) -> None:
    expected = call(provider, stack.emulator, stream=stream)
    assert call(provider, stack.proxy, stream=stream, fault="delay=0.3") == expected != ""


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_disconnect_mid_response_is_an_error_for_the_client_never_a_hang(
    stack: Stack, provider: str, stream: bool
) -> None:
    before = metric(stack.proxy, "cachewarden_upstream_errors_total", kind="stream")
    started = time.monotonic()
    errors: tuple[type[BaseException], ...] = (
        openai.APIError,
        anthropic.APIError,
        httpx.HTTPError,
        httpx2.HTTPError,  # the anthropic SDK's transport
    )
    with pytest.raises(errors):
        call(provider, stack.proxy, stream=stream, fault="disconnect=3")
    assert time.monotonic() - started < CLIENT_TIMEOUT / 2
    assert (
        wait_metric(stack.proxy, "cachewarden_upstream_errors_total", before + 1, kind="stream") == before + 1
    )
    assert (
        metric(stack.proxy, "cachewarden_requests_total", provider=LABEL[provider], status="stream_error")
        >= 1
    )
    # The proxy itself is fine: the next request succeeds.
    assert call(provider, stack.proxy, stream=stream) != ""
