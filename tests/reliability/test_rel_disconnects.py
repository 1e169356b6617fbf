"""1,000 clients drop their connection in the middle of a stream: nothing is left behind.

The upstream streams an event every 50 ms until its client leaves, and counts the streams it
started and the ones whose client (the proxy) went away. Clients (asyncio + httpx, 50 at a time)
open a streamed request through the proxy (full analysis, ``cli.proxy.build``), read the first
chunk and drop the connection. After the first 100 and after all 1,000 the test measures, once
the streams settled: connections to the upstream port (/proc/net/tcp), open file descriptors,
asyncio tasks on the proxy's event loop, live Python objects and RSS. Every upstream stream must
have been cancelled and nothing may grow beyond a small bound.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import Served, metric, serving

TOTAL = 1000
FIRST = 100
CONCURRENCY = 50
TICK = 0.05


class SlowStreams:
    """An upstream that streams SSE chunks every ``TICK`` seconds until the client disconnects."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.lock = threading.Lock()

    @property
    def open(self) -> int:
        return self.started - self.cancelled

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        while (await receive()).get("more_body"):
            pass
        with self.lock:
            self.started += 1
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        chunk = b'data: {"choices":[{"index":0,"delta":{"content":"tick"}}]}\n\n'

        async def pump() -> None:
            while True:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await asyncio.sleep(TICK)

        task = asyncio.ensure_future(pump())
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        finally:
            task.cancel()
            with self.lock:
                self.cancelled += 1


class LoopServer(uvicorn.Server):
    """uvicorn keeping a reference to its event loop, so the test can count the loop's tasks."""

    loop: asyncio.AbstractEventLoop

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)


def loop_tasks(served: Served) -> int:
    """Tasks on the event loop of a server made by ``LoopServer``."""

    async def count() -> int:
        return len(asyncio.all_tasks())

    assert isinstance(served.server, LoopServer)
    return asyncio.run_coroutine_threadsafe(count(), served.server.loop).result(10)


def tcp_connections(port: int) -> int:
    """Established TCP connections in this process's network namespace with ``port`` at either end
    (the proxy's pool side and the upstream's side of each connection)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == "01" and port in (
                int(local.rsplit(":", 1)[1], 16),
                int(remote.rsplit(":", 1)[1], 16),
            ):
                count += 1
    return count


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@dataclass
class Snapshot:
    upstream_connections: int
    fds: int
    tasks: int
    objects: int
    rss_mib: float


def snapshot(upstream: Served, proxy: Served) -> Snapshot:
    gc.collect()
    return Snapshot(
        upstream_connections=tcp_connections(upstream.port),
        fds=len(os.listdir("/proc/self/fd")),
        tasks=loop_tasks(proxy),
        objects=len(gc.get_objects()),
        rss_mib=rss_mib(),
    )


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[SlowStreams, Served, Served]]:
    app = SlowStreams()
    with serving(app, "upstream", lifespan="off", stop_timeout=30) as upstream:
        proxy_app = build(Settings(openai_upstream=upstream.url, anthropic_upstream=upstream.url))
        with serving(proxy_app, "proxy", stop_timeout=30, server_factory=LoopServer) as proxy:
            yield app, upstream, proxy


async def drop_after_first_chunk(client: httpx.AsyncClient, url: str, i: int) -> None:
    body = {
        "model": "gpt-4.1",
        "stream": True,
        "messages": [
            {"role": "system", "content": "You are a terse assistant. " * 40},
            {"role": "user", "content": f"Question {i % 10}"},
        ],
    }
    headers = {"authorization": f"Bearer sk-rel-disconnect-{i % 5}"}
    async with client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_raw():
            assert chunk.startswith(b"data: ")
            break
    # Leaving the block before the end closes the connection: the client is gone mid-stream.


async def clients(url: str, start: int, stop: int) -> None:
    sem = asyncio.Semaphore(CONCURRENCY)
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:

        async def one(i: int) -> None:
            async with sem:
                await asyncio.wait_for(drop_after_first_chunk(client, url, i), 10)

        await asyncio.gather(*(one(i) for i in range(start, stop)))


def settle(app: SlowStreams, proxy: Served, expected: int) -> None:
    """Wait until every upstream stream saw its client leave and every request was counted."""
    deadline = time.monotonic() + 20
    while True:
        counted = metric(proxy.url, "cachewarden_requests_total", status="client_disconnect")
        if app.cancelled >= expected and counted >= expected:
            return
        assert time.monotonic() < deadline, (app.started, app.cancelled, counted)
        time.sleep(0.05)


def test_1000_mid_stream_disconnects_leave_nothing_behind(stack: tuple[SlowStreams, Served, Served]) -> None:
    app, upstream, proxy = stack
    started = time.monotonic()
    asyncio.run(clients(proxy.url, 0, FIRST))
    settle(app, proxy, FIRST)
    after_first = snapshot(upstream, proxy)
    asyncio.run(clients(proxy.url, FIRST, TOTAL))
    settle(app, proxy, TOTAL)
    after_all = snapshot(upstream, proxy)
    elapsed = time.monotonic() - started
    print(
        f"\ndisconnects: {TOTAL} in {elapsed:.1f} s; upstream streams started {app.started}, "
        f"cancelled {app.cancelled}\n  after {FIRST}: {after_first}\n  after {TOTAL}: {after_all}"
    )
    assert app.started == app.cancelled == TOTAL
    assert after_all.upstream_connections == 0  # every upstream stream was closed, none pooled half-read
    assert after_all.fds <= after_first.fds + 5
    assert after_all.tasks <= after_first.tasks + 2
    # The engine keeps a bounded history of recent prompts (4,096): 900 more requests add to it.
    assert after_all.objects <= after_first.objects + 30_000
    assert after_all.rss_mib <= after_first.rss_mib + 30
    assert httpx.get(proxy.url + "/healthz", timeout=5).status_code == 200
