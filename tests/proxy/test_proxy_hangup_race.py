"""A client that hangs up the moment the last byte arrives is a completed request, not a disconnect."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.metrics import Metrics


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
    scope: dict[str, Any] = {
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
