"""Compressed responses: the proxy reads the usage of gzip, br and zstd bodies, streamed and not, and
the client gets the upstream's bytes unchanged (in process, and live against the emulator)."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import brotli
import httpx
import pytest
import zstandard
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.hooks import Flow
from cachewarden.proxy.testing import metric, serving

CODINGS = ["gzip", "br", "zstd"]
USAGE = {"prompt_tokens": 2006, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 1920}}
CHAT = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}).encode()
JSON_BODY = json.dumps(
    {"id": "c1", "object": "chat.completion", "model": "gpt-4.1", "choices": [], "usage": USAGE}
)
SSE_BODY = (
    'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"index":0,'
    '"delta":{"content":"Hi"},"finish_reason":null}],"usage":null}\n\n'
    'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4.1","choices":[],"usage":'
    + json.dumps(USAGE)
    + "}\n\ndata: [DONE]\n\n"
)


def compress(coding: str, data: bytes) -> bytes:
    if coding == "gzip":
        return gzip.compress(data)
    if coding == "br":
        return bytes(brotli.compress(data))
    return bytes(zstandard.ZstdCompressor().compress(data))


class Chunks(httpx.AsyncByteStream):
    """The body in small pieces, as a network delivers it: the side decoder sees partial frames."""

    def __init__(self, data: bytes, size: int = 7) -> None:
        self.data, self.size = data, size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self.data), self.size):
            yield self.data[i : i + self.size]


class Spy:
    def __init__(self) -> None:
        self.flows: list[Flow] = []
        self.done = threading.Event()

    def request(self, flow: Flow) -> None:
        pass

    def response(self, flow: Flow) -> None:
        self.flows.append(flow)
        self.done.set()


@pytest.mark.anyio
@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize("stream", [False, True])
async def test_usage_is_read_and_the_bytes_are_unchanged(coding: str, stream: bool) -> None:
    raw = compress(coding, (SSE_BODY if stream else JSON_BODY).encode())
    media = "text/event-stream" if stream else "application/json"

    def reply(request: httpx.Request) -> httpx.Response:
        headers = [("content-type", media), ("content-encoding", coding)]
        return httpx.Response(200, headers=headers, stream=Chunks(raw))

    spy = Spy()
    app = create_app(Settings(), analyzers=[spy], transport=httpx.MockTransport(reply))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
            headers = {"accept-encoding": coding, "content-type": "application/json"}
            async with client.stream("POST", "/v1/chat/completions", content=CHAT, headers=headers) as r:
                received = b"".join([part async for part in r.aiter_raw()])
    assert r.headers["content-encoding"] == coding
    assert received == raw
    assert spy.done.wait(10)
    flow = spy.flows[0]
    assert flow.usage_state == "reported"
    assert flow.usage is not None and (flow.usage.input_total, flow.usage.cached) == (2006, 1920)


def _settings(emulator_url: str) -> Any:
    return Settings(openai_upstream=emulator_url, anthropic_upstream=emulator_url)


@pytest.mark.parametrize("coding", CODINGS)
def test_live_emulator_answers_compressed_and_the_proxy_reads_every_usage(coding: str) -> None:
    body: dict[str, Any] = {
        "model": "claude-sonnet-5",
        "max_tokens": 30,
        "system": [{"type": "text", "text": "Rule. " * 900, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Hi"}],
    }
    headers = {"x-api-key": f"sk-ant-{coding}", "accept-encoding": coding, "anthropic-version": "2023-06-01"}
    with (
        serving(create_emulator(), "emulator") as emulator,
        serving(build(_settings(emulator.url)), "proxy") as proxy,
    ):
        for stream in (False, True, False):
            with httpx.stream(
                "POST", proxy.url + "/v1/messages", json={**body, "stream": stream}, headers=headers
            ) as r:
                assert r.headers["content-encoding"] == coding
                r.read()
            assert r.status_code == 200
        states = metric(proxy.url, "cachewarden_usage_reports_total", state="reported")
        assert states == 3
        predicted = metric(proxy.url, "cachewarden_input_tokens_total", source="predicted", kind="cached")
        read = metric(proxy.url, "cachewarden_input_tokens_total", source="reported", kind="cached")
        assert read == predicted > 0
