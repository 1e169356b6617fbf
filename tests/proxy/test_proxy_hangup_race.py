"""A client that hangs up the moment the last byte (or a stream's last event) arrives is a completed
request, not a disconnect."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from cachewarden.proxy.engine.prompt import Provider
from cachewarden.proxy.engine.usage import UsageTracker
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.metrics import Metrics


def _chat_scope(body: bytes) -> dict[str, Any]:
    """The ASGI scope of a Chat Completions POST carrying ``body``."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }


def test_hangup_right_after_the_last_byte_counts_as_200() -> None:
    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "c", "choices": [], "usage": {"prompt_tokens": 3}})

    metrics = Metrics()
    app = create_app(
        Settings(openai_upstream="http://upstream.test"),
        metrics=metrics,
        transport=httpx.MockTransport(upstream),
    )
    body = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}).encode()
    scope = _chat_scope(body)

    async def main() -> None:
        done = asyncio.Event()  # the last byte went out
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            # The client closes as soon as it has the last byte, like uvicorn reporting a finished
            # response: the disconnect is seen while the proxy's send has not returned yet.
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                done.set()
                for _ in range(5):
                    await asyncio.sleep(0)  # let the disconnect watcher run first

        async with app.router.lifespan_context(app):
            await app(scope, receive, send)

    asyncio.run(main())
    text = metrics.exposition().decode()
    statuses = [line for line in text.splitlines() if line.startswith("cachewarden_requests_total{")]
    assert any('status="200"' in line for line in statuses), statuses
    assert not any("client_disconnect" in line for line in statuses), statuses


class _HeldStream(httpx.AsyncByteStream):
    """An upstream stream that sends its events, then keeps the connection open a while (as a
    provider may before the chunked body's end), until ``release`` is set."""

    def __init__(self, chunks: list[bytes], release: asyncio.Event) -> None:
        self._chunks, self._release = chunks, release

    async def __aiter__(self) -> Any:
        for chunk in self._chunks:
            yield chunk
            await asyncio.sleep(0)
        await asyncio.wait_for(self._release.wait(), 5)


def _stream_and_hang_up(events: list[bytes], hang_up_after: bytes) -> str:
    """Relays ``events`` from a held upstream stream to a client that hangs up once it has received
    the event containing ``hang_up_after``; returns the requests_total exposition lines."""
    release = asyncio.Event()

    def upstream(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, stream=_HeldStream(events, release))

    metrics = Metrics()
    app = create_app(
        Settings(openai_upstream="http://upstream.test"),
        metrics=metrics,
        transport=httpx.MockTransport(upstream),
    )
    payload = {"model": "gpt-4.1", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    body = json.dumps(payload).encode()
    scope = _chat_scope(body)

    async def main() -> None:
        seen = asyncio.Event()
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await seen.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and hang_up_after in message.get("body", b""):
                seen.set()

        async with app.router.lifespan_context(app):
            await app(scope, receive, send)
        release.set()

    asyncio.run(main())
    text = metrics.exposition().decode()
    return "\n".join(line for line in text.splitlines() if line.startswith("cachewarden_requests_total{"))


CHUNK = b'data: {"id":"c","model":"gpt-4.1","choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n'
USAGE = (
    b'data: {"id":"c","model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
)


def test_hangup_after_the_streams_last_event_counts_as_200() -> None:
    # The OpenAI SDK stops reading at [DONE]; the body's end may not have gone out yet.
    statuses = _stream_and_hang_up([CHUNK, USAGE, b"data: [DONE]\n\n"], b"[DONE]")
    assert 'status="200"' in statuses and "client_disconnect" not in statuses, statuses


def test_hangup_before_the_streams_last_event_is_a_disconnect() -> None:
    statuses = _stream_and_hang_up([CHUNK, USAGE, b"data: [DONE]\n\n"], b'"content":"ok"')
    assert "client_disconnect" in statuses, statuses


@pytest.mark.parametrize(
    ("provider", "last"),
    [
        ("openai-chat", b"data: [DONE]\n\n"),
        ("anthropic", b'event: message_stop\ndata: {"type":"message_stop"}\n\n'),
        (
            "openai-responses",
            b'event: response.completed\ndata: {"type":"response.completed","response":{}}\n\n',
        ),
    ],
)
def test_the_tracker_sees_each_streams_last_event(provider: Provider, last: bytes) -> None:
    tracker = UsageTracker(provider, "text/event-stream")
    tracker.feed(b'event: x\ndata: {"type":"x"}\n\n')
    assert not tracker.stream_ended
    tracker.feed(last)
    assert tracker.stream_ended
