"""Real sockets: the proxy under uvicorn in a thread, in front of a small streaming upstream on another port,
driven by plain httpx and by the official openai / anthropic SDKs."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import anthropic
import anyio
import anyio.to_thread
import httpx
import openai
import pytest
from cachewarden.proxy.cli.proxy import _DrainingServer
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import Served, serving

CHAT_USAGE = {"prompt_tokens": 2006, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 1920}}
ANTHROPIC_USAGE = {"input_tokens": 50, "cache_creation_input_tokens": 248, "cache_read_input_tokens": 4000}


def _sse(data: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def chat_events() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [choice],
        }

    return [
        _sse(chunk({"role": "assistant", "content": ""})),
        _sse(chunk({"content": "Hel"})),
        _sse(chunk({"content": "lo"}, "stop")),
        _sse(
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "gpt-4.1",
                "choices": [],
                "usage": CHAT_USAGE,
            }
        ),
        _sse("[DONE]"),
    ]


def anthropic_events() -> list[bytes]:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-test-1",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**ANTHROPIC_USAGE, "output_tokens": 1},
    }
    return [
        _sse({"type": "message_start", "message": message}, "message_start"),
        _sse(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            "content_block_start",
        ),
        _sse(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
            "content_block_delta",
        ),
        _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 2},
            },
            "message_delta",
        ),
        _sse({"type": "message_stop"}, "message_stop"),
    ]


CHAT_JSON = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4.1",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}],
    "usage": CHAT_USAGE,
}
MESSAGE_JSON = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "content": [{"type": "text", "text": "Hello"}],
    "model": "claude-test-1",
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {**ANTHROPIC_USAGE, "output_tokens": 2},
}


class Upstream:
    """A raw ASGI OpenAI/Anthropic stand-in. Streams wait on ``gate`` before their last event; body flags
    ``forever`` (stream until the client leaves) and ``break`` (drop the connection mid-stream)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.last_sent = threading.Event()
        self.closed = threading.Event()
        self.requests: list[tuple[str, list[tuple[bytes, bytes]], bytes]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.requests.append((scope["path"], scope["headers"], body))
        request = json.loads(body) if body else {}
        anthropic_route = scope["path"].startswith("/v1/messages")
        if not request.get("stream"):
            payload = json.dumps(MESSAGE_JSON if anthropic_route else CHAT_JSON).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"x-request-id", b"req_42")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        events = anthropic_events() if anthropic_route else chat_events()
        if request.get("forever"):
            await self._forever(events[0], receive, send)
            return
        for i, event in enumerate(events):
            if i == len(events) - 1:
                await anyio.to_thread.run_sync(self.gate.wait, 10)
                self.last_sent.set()
            if request.get("break") and i == 2:
                return  # uvicorn closes the connection: the response never completes
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await anyio.sleep(0.005)
        await send({"type": "http.response.body", "body": b""})

    async def _forever(self, event: bytes, receive: Any, send: Any) -> None:
        async with anyio.create_task_group() as tg:

            async def pump() -> None:
                while True:
                    await send({"type": "http.response.body", "body": event, "more_body": True})
                    await anyio.sleep(0.02)

            tg.start_soon(pump)
            while (await receive())["type"] != "http.disconnect":
                pass
            self.closed.set()
            tg.cancel_scope.cancel()


# uvicorn as ``cachewarden proxy`` runs it: no Server / Date headers of its own.
AS_THE_CLI: dict[str, Any] = {"server_header": False, "date_header": False, "timeout": 10}


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, Served]]:
    app = Upstream()
    with serving(app, "upstream", lifespan="off", **AS_THE_CLI) as served:
        yield app, served


@pytest.fixture
def proxied(upstream: tuple[Upstream, Served]) -> Iterator[tuple[Upstream, Served, Served]]:
    app, up = upstream
    proxy_app = create_app(Settings(openai_upstream=up.url, anthropic_upstream=up.url, upstream_timeout=10))
    with serving(proxy_app, "proxy", **AS_THE_CLI) as proxy:
        yield app, up, proxy


def chat_body(**extra: Any) -> bytes:
    return json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}], **extra}).encode()


def test_stream_bytes_and_headers_are_unchanged(proxied: tuple[Upstream, Served, Served]) -> None:
    app, up, proxy = proxied
    seen = []
    for base in (up.url, proxy.url):
        with (
            httpx.Client(timeout=10) as client,
            client.stream(
                "POST",
                base + "/v1/chat/completions",
                content=chat_body(stream=True),
                headers={"authorization": "Bearer sk-t"},
            ) as r,
        ):
            seen.append((r.status_code, r.headers.raw, b"".join(r.iter_raw())))
    assert seen[0] == seen[1]
    assert app.requests[0][2] == app.requests[1][2]  # request body forwarded byte for byte


def test_first_chunk_arrives_before_the_upstream_sends_its_last(
    proxied: tuple[Upstream, Served, Served],
) -> None:
    app, _, proxy = proxied
    app.gate.clear()
    with (
        httpx.Client(timeout=5) as client,
        client.stream("POST", proxy.url + "/v1/chat/completions", content=chat_body(stream=True)) as r,
    ):
        chunks = r.iter_raw()
        first = next(chunks)
        assert first.startswith(b"data: ")
        assert not app.last_sent.is_set()  # a buffering proxy could not have answered yet
        app.gate.set()
        rest = b"".join(chunks)
    assert rest.endswith(b"data: [DONE]\n\n")


def test_client_disconnect_closes_the_upstream_stream(proxied: tuple[Upstream, Served, Served]) -> None:
    app, _, proxy = proxied
    with (
        httpx.Client(timeout=5) as client,
        client.stream(
            "POST", proxy.url + "/v1/chat/completions", content=chat_body(stream=True, forever=True)
        ) as r,
    ):
        next(r.iter_raw())
        # Leaving the block closes the connection mid-stream.
    assert app.closed.wait(5), "the upstream never saw the proxy's connection close"
    metrics = httpx.get(proxy.url + "/metrics").text
    deadline = time.monotonic() + 5
    while 'status="client_disconnect"' not in metrics and time.monotonic() < deadline:
        time.sleep(0.05)
        metrics = httpx.get(proxy.url + "/metrics").text
    assert 'status="client_disconnect"' in metrics


def test_broken_upstream_stream_ends_the_client_stream(proxied: tuple[Upstream, Served, Served]) -> None:
    _, _, proxy = proxied
    with (
        httpx.Client(timeout=5) as client,
        client.stream(
            "POST", proxy.url + "/v1/chat/completions", content=chat_body(stream=True, **{"break": True})
        ) as r,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        b"".join(r.iter_raw())
    metrics = httpx.get(proxy.url + "/metrics").text
    assert (
        'cachewarden_requests_total{model="gpt-4.1",provider="openai-chat",status="stream_error"} 1.0'
        in metrics
    )
    assert 'cachewarden_upstream_errors_total{kind="stream",provider="openai-chat"} 1.0' in metrics


def test_openai_sdk_sync_and_streaming(proxied: tuple[Upstream, Served, Served]) -> None:
    app, _, proxy = proxied
    client = openai.OpenAI(api_key="sk-sdk", base_url=proxy.url + "/v1", max_retries=0)
    completion = client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Hello"
    assert completion.usage is not None and completion.usage.prompt_tokens == 2006
    stream = client.chat.completions.create(
        model="gpt-4.1",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    parts = list(stream)
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == "Hello"
    assert parts[-1].usage is not None and parts[-1].usage.prompt_tokens_details is not None
    headers = dict(app.requests[0][1])
    assert headers[b"authorization"] == b"Bearer sk-sdk"
    metrics = httpx.get(proxy.url + "/metrics").text
    labels = 'kind="cached",model="gpt-4.1",provider="openai-chat",source="reported"'
    assert f"cachewarden_input_tokens_total{{{labels}}} 3840.0" in metrics
    assert "sk-sdk" not in metrics


def test_anthropic_sdk_sync_and_streaming(proxied: tuple[Upstream, Served, Served]) -> None:
    app, _, proxy = proxied
    client = anthropic.Anthropic(api_key="sk-ant-sdk", base_url=proxy.url, max_retries=0)
    message = client.messages.create(
        model="claude-test-1", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text" and message.content[0].text == "Hello"
    assert message.usage.cache_read_input_tokens == 4000
    with client.messages.stream(
        model="claude-test-1", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Hello" and final.usage.output_tokens == 2
    headers = dict(app.requests[0][1])
    auth = headers.get(b"x-api-key") or headers.get(b"authorization", b"")  # the SDK sends one or the other
    assert auth.endswith(b"sk-ant-sdk") and b"anthropic-version" in headers
    metrics = httpx.get(proxy.url + "/metrics").text
    labels = 'kind="cached",model="claude-test-1",provider="anthropic",source="reported"'
    assert f"cachewarden_input_tokens_total{{{labels}}} 8000.0" in metrics


def test_graceful_shutdown_lets_a_stream_finish(upstream: tuple[Upstream, Served]) -> None:
    app, up = upstream
    proxy_app = create_app(Settings(openai_upstream=up.url, anthropic_upstream=up.url))
    draining = partial(_DrainingServer, proxy=proxy_app.state.proxy)
    with serving(proxy_app, "proxy", server_factory=draining, **AS_THE_CLI) as served:
        assert httpx.get(served.url + "/readyz").status_code == 200
        app.gate.clear()
        with (
            httpx.Client(timeout=10) as client,
            client.stream(
                "POST",
                served.url + "/v1/messages",
                content=json.dumps({"model": "claude-test-1", "stream": True}).encode(),
            ) as r,
        ):
            chunks = r.iter_raw()
            next(chunks)
            served.server.handle_exit(signal.SIGTERM, None)
            assert not proxy_app.state.proxy.ready  # /readyz answers 503 from now on
            app.gate.set()
            rest = b"".join(chunks)
        assert b"message_stop" in rest
        served.thread.join(10)
        assert not served.thread.is_alive()
