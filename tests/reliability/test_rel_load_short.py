"""Load, short: 100 concurrent streaming clients held for 10 s through `cachewarden proxy` (its own process).

The upstream streams one chunk every 0.5 s for 10 s per request. Every stream must arrive whole
(all chunks, the usage chunk, ``[DONE]``), and the proxy's RSS stays bounded. The full version
(500 clients for a minute, separate client processes) is bench/bench_load.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cachewarden.proxy.testing import command, free_port, serve

CLIENTS = 100
HOLD = 10.0
INTERVAL = 0.5
TICKS = int(HOLD / INTERVAL)


async def slow_upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    while (await receive()).get("more_body"):
        pass
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    )
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1"}
    for i in range(TICKS):
        choice = {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}
        data = f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()
        await send({"type": "http.response.body", "body": data, "more_body": True})
        await asyncio.sleep(INTERVAL)
    usage = {
        "prompt_tokens": 900,
        "completion_tokens": TICKS,
        "prompt_tokens_details": {"cached_tokens": 768},
    }
    data = f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
    await send({"type": "http.response.body", "body": data, "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def proxy() -> Iterator[tuple[str, int]]:
    upstream = serve(slow_upstream, "upstream", lifespan="off", backlog=1024)
    port = free_port()
    up = upstream.url
    args = ["proxy", "--port", str(port), "--log-level", "warning"]
    try:
        with command(
            [*args, "--openai-upstream", up, "--anthropic-upstream", up], port, ready="/readyz"
        ) as out:
            yield out
    finally:
        upstream.stop(15)


async def stream(client: httpx.AsyncClient, url: str, i: int) -> str | None:
    body = {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You are a travel support agent. Follow the policy. " * 40},
            {"role": "user", "content": f"Where is booking {i}?"},
        ],
    }
    try:
        async with client.stream(
            "POST",
            url + "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer sk-load-{i % 10}"},
        ) as r:
            if r.status_code != 200:
                return f"status {r.status_code}"
            data = b"".join([part async for part in r.aiter_raw()])
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    events = [e for e in data.split(b"\n\n") if e]
    if len(events) != TICKS + 2 or events[-1] != b"data: [DONE]":
        return f"incomplete stream: {len(events)} events"
    return None


async def load(url: str, pid: int) -> tuple[list[str], list[float]]:
    samples: list[float] = []

    async def sample() -> None:
        while True:
            samples.append(rss_mib(pid))
            await asyncio.sleep(0.25)

    sampler = asyncio.ensure_future(sample())
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=HOLD + 20, limits=limits) as client:
        results = await asyncio.gather(*(stream(client, url, i) for i in range(CLIENTS)))
    sampler.cancel()
    return [r for r in results if r is not None], samples


def test_100_streams_held_10s_without_errors_and_bounded_memory(proxy: tuple[str, int]) -> None:
    url, pid = proxy
    start = rss_mib(pid)
    started = time.monotonic()
    errors, samples = asyncio.run(load(url, pid))
    elapsed = time.monotonic() - started
    time.sleep(0.5)
    end = rss_mib(pid)
    peak = max([*samples, end])
    print(
        f"\nload: {CLIENTS} streams x {HOLD:.0f} s in {elapsed:.1f} s; errors {len(errors)}; "
        f"proxy RSS MiB start {start:.1f} peak {peak:.1f} end {end:.1f}"
    )
    assert errors == []
    assert elapsed < HOLD + 5  # streams were concurrent, not queued
    assert peak - start < 60
    metrics = httpx.get(url + "/metrics", timeout=10).text
    ok = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("cachewarden_requests_total{") and 'status="200"' in line
    )
    assert ok == CLIENTS
    assert httpx.get(url + "/healthz", timeout=5).status_code == 200
