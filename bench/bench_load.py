"""Load: many concurrent streaming clients held open through `cachewarden proxy` for a while.

Three processes (plus N client processes): a slow-streaming upstream (this file, ``upstream``
mode: an OpenAI Chat Completions SSE stream that sends one chunk every ``--interval`` seconds for
``--hold`` seconds, then the usage chunk and ``[DONE]``), ``cachewarden proxy`` (observe mode, full
analysis), and client processes (this file, ``clients`` mode: asyncio + httpx, each holding its
share of the streams). Every stream must end with ``[DONE]`` and the expected number of chunks:
anything else is an error. The proxy's RSS is sampled every 0.5 s: start / peak / end.

Usage: python bench/bench_load.py [--clients 500] [--hold 60] [--processes 4] [--interval 1.0]
Exit 0 when there were no errors, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import HOST, Server, free_port, python_server

# -- the slow upstream ------------------------------------------------------------------------------


def _chunk(data: object) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def upstream_app(hold: float, interval: float) -> Any:
    """An ASGI app: every POST gets a stream of ``hold / interval`` content chunks, then usage and [DONE]."""
    ticks = max(1, round(hold / interval))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        while (await receive()).get("more_body"):
            pass
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1"}
        for i in range(ticks):
            delta = {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}
            await send(
                {
                    "type": "http.response.body",
                    "body": _chunk({**base, "choices": [delta]}),
                    "more_body": True,
                }
            )
            await asyncio.sleep(interval)
        usage = {
            "prompt_tokens": 1200,
            "completion_tokens": ticks,
            "prompt_tokens_details": {"cached_tokens": 1024},
        }
        await send(
            {
                "type": "http.response.body",
                "body": _chunk({**base, "choices": [], "usage": usage}),
                "more_body": True,
            }
        )
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    return app


def serve_upstream(port: int, hold: float, interval: float) -> None:
    import uvicorn

    uvicorn.run(
        upstream_app(hold, interval),
        host=HOST,
        port=port,
        http="h11",
        log_level="warning",
        access_log=False,
        backlog=4096,
        limit_concurrency=None,
    )


# -- clients ----------------------------------------------------------------------------------------

SYSTEM = "You are a support agent for a travel company. Follow the booking policy strictly. " * 60


async def one_stream(client: httpx.AsyncClient, url: str, i: int, ticks: int) -> str | None:
    """None on success, else a one-line error."""
    body = {
        "model": "gpt-4.1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Session {i % 50}: where is booking {i}?"},
        ],
    }
    headers = {"authorization": f"Bearer sk-load-{i % 20}"}
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status_code != 200:
                return f"status {r.status_code}"
            data = b""
            async for part in r.aiter_raw():
                data += part
        events = [e for e in data.split(b"\n\n") if e]
        if not data.endswith(b"data: [DONE]\n\n") or len(events) != ticks + 2:
            return f"incomplete stream ({len(events)} events)"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


async def run_clients(url: str, first: int, count: int, ticks: int, timeout: float) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), limits=limits) as client:
        started = time.monotonic()
        results = await asyncio.gather(
            *(one_stream(client, url, i, ticks) for i in range(first, first + count))
        )
    errors = [r for r in results if r is not None]
    return {
        "ok": count - len(errors),
        "errors": errors[:10],
        "error_count": len(errors),
        "seconds": time.monotonic() - started,
    }


# -- the run ----------------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler(threading.Thread):
    def __init__(self, pid: int, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.samples: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append(rss_mib(self.pid))
            except OSError:
                return
            self.stop.wait(self.every)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("mode", nargs="?", default="run", choices=["run", "upstream", "clients"])
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--hold", type=float, default=60.0, help="seconds each stream stays open")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between chunks of a stream")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--url", default="")
    parser.add_argument("--first", type=int, default=0)
    args = parser.parse_args(argv)
    ticks = max(1, round(args.hold / args.interval))
    if args.mode == "upstream":
        serve_upstream(args.port, args.hold, args.interval)
        return 0
    if args.mode == "clients":
        result = asyncio.run(run_clients(args.url, args.first, args.clients, ticks, args.hold + 60))
        print(json.dumps(result), flush=True)
        return 0

    me = str(Path(__file__).resolve())
    up_port, proxy_port = free_port(), free_port()
    servers: list[Server] = []
    try:
        upstream = python_server(
            "upstream",
            [
                me,
                "upstream",
                "--port",
                str(up_port),
                "--hold",
                str(args.hold),
                "--interval",
                str(args.interval),
            ],
            up_port,
        )
        servers.append(upstream)
        upstream.wait_ready()
        flags = ["--port", str(proxy_port), "--log-level", "warning", "--openai-upstream", upstream.url]
        proxy = python_server(
            "cachewarden proxy", ["-m", "cachewarden.proxy.cli", "proxy", *flags], proxy_port
        )
        servers.append(proxy)
        proxy.wait_ready("/readyz")
        sampler = RssSampler(proxy.proc.pid)
        sampler.start()
        time.sleep(1.0)
        start_rss = rss_mib(proxy.proc.pid)
        cpu_start = proxy.cpu_seconds()
        per = [
            args.clients // args.processes + (1 if i < args.clients % args.processes else 0)
            for i in range(args.processes)
        ]
        procs, first = [], 0
        print(
            f"bench_load: {args.clients} streaming clients in {args.processes} processes, each stream held "
            f"{args.hold:.0f} s ({ticks} chunks), proxy RSS at start {start_rss:.1f} MiB",
            flush=True,
        )
        started = time.monotonic()
        for count in per:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        me,
                        "clients",
                        "--url",
                        proxy.url,
                        "--first",
                        str(first),
                        "--clients",
                        str(count),
                        "--hold",
                        str(args.hold),
                        "--interval",
                        str(args.interval),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            first += count
        results = []
        for p in procs:
            out, _ = p.communicate(timeout=args.hold * 3 + 120)
            results.append(json.loads(out.strip().splitlines()[-1]))
        wall = time.monotonic() - started
        time.sleep(2.0)  # let the last analyses finish
        sampler.stop.set()
        sampler.join()
        end_rss = rss_mib(proxy.proc.pid)
        peak = max(sampler.samples, default=end_rss)
        ok = sum(r["ok"] for r in results)
        errors = sum(r["error_count"] for r in results)
        metrics = httpx.get(proxy.url + "/metrics", timeout=10).text
        requests = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("cachewarden_requests_total{") and 'status="200"' in line
        )
        print(f"  streams ok {ok} / {args.clients}, errors {errors}, wall {wall:.1f} s")
        for r in results:
            for e in r["errors"]:
                print(f"  error: {e}")
        print(
            f"  proxy requests_total{{status=200}} {requests:.0f}; "
            f"proxy CPU {proxy.cpu_seconds() - cpu_start:.1f} s"
        )
        print(f"  proxy RSS MiB: start {start_rss:.1f}, peak {peak:.1f}, end {end_rss:.1f}")
        return 0 if errors == 0 and ok == args.clients else 1
    finally:
        for server in reversed(servers):
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
