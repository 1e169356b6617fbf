"""Proxy overhead: the latency `cachewarden proxy` adds, against a bare pass-through proxy, same run.

Three paths, one client (httpx.AsyncClient, keep-alive, HTTP/1.1), one upstream (the emulator,
latency model off), every server in its own process:

    direct       client -> emulator
    bare         client -> bare Starlette + httpx pass-through (bench/_servers.py) -> emulator
    cachewarden  client -> `cachewarden proxy` (observe mode, analysis on) -> emulator

Workload: agent-like OpenAI Chat requests of ~40 KB (long system prompt, tools, a conversation that
gains one tool call + result per request, so ~97% of each body is the previous one's prefix; a new
session every SESSION_TURNS requests). Sequentially the three paths are interleaved request by
request (rotating order); with 32 concurrent clients each path runs on its own. "added" is the
difference of percentiles against the direct path; the goal is cachewarden's added p50 under 1 ms
and within 1.5x of the bare proxy's. Streamed scenarios also print the time to first byte and the
gap between consecutive chunks as the client reads them (the token rhythm a proxy must not break).
Exit 0 unless something crashed (missed goals only print).

Usage: python bench/bench_proxy.py [--quick]
Experiment: --switch-interval 0.0005 starts the cachewarden proxy with sys.setswitchinterval(0.0005)
(the GIL hand-off between the event loop and the analysis threads; Python's default is 5 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import Server, free_port, python_server
from _workload import dumps, text, tool_turn, tools

MODEL = "gpt-4o"
SESSION_TURNS = 12
CONCURRENCY = 32
PATHS = ("direct", "bare", "cachewarden")
GOAL_P50_MS = 1.0
GOAL_RATIO = 1.5


class Workload:
    """Bodies of agent sessions: ``bodies(worker, n)`` is one agent's next n requests, each a turn longer."""

    def __init__(self, stream: bool, seed: int = 1) -> None:
        rng = random.Random(seed)
        self.stream = stream
        head = {"model": MODEL, "max_tokens": 64}
        if stream:
            head |= {"stream": True, "stream_options": {"include_usage": True}}
        head["tools"] = defs = tools(rng)
        self._tool_names = [t["function"]["name"] for t in defs]
        system = dumps({"role": "system", "content": text(rng, 20_000)})
        # Messages last: appending a turn keeps every earlier byte of the body.
        self._head = dumps(head)[:-1] + ',"messages":[' + system
        self._seed = seed

    def session(self, worker: int, number: int) -> list[bytes]:
        rng = random.Random(f"{self._seed}/{worker}/{number}")
        task = dumps({"role": "user", "content": f"Session {worker}-{number}. " + text(rng, 1_800)})
        # Per conversation, as coding agents send it: the provider's (and the emulator's) cache scope.
        tail = f'],"prompt_cache_key":"s-{worker}-{number}"}}'
        turns: list[str] = []
        bodies = []
        for t in range(SESSION_TURNS):
            bodies.append((self._head + "," + ",".join([task, *turns]) + tail).encode())
            turns += tool_turn(rng, self._tool_names, f"call_{worker}_{number}_{t}")
        return bodies

    def bodies(self, worker: int, count: int) -> list[bytes]:
        out: list[bytes] = []
        number = 0
        while len(out) < count:
            out.extend(self.session(worker, number))
            number += 1
        return out[:count]


def shared_share(bodies: Sequence[bytes]) -> float:
    """Mean share of each body that is a byte prefix of the previous one (the agent's reuse)."""
    shares = []
    for prev, cur in itertools.pairwise(bodies):
        n = min(len(prev), len(cur))
        lo, hi = 0, n
        while lo < hi:  # longest common prefix by bisection on slices
            mid = (lo + hi + 1) // 2
            if prev[:mid] == cur[:mid]:
                lo = mid
            else:
                hi = mid - 1
        shares.append(lo / len(cur))
    return statistics.fmean(shares) if shares else 0.0


# -- measurement ------------------------------------------------------------------------------------


@dataclass
class Sample:
    total: list[float] = field(default_factory=list)
    first_byte: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    # Between consecutive chunks of a response as the client read them (streams: the token rhythm).
    gaps: list[float] = field(default_factory=list)
    wall: float = 0.0
    # CPU milliseconds per request (warm-up included) of the path's own proxy process.
    proxy_cpu_ms: float = float("nan")


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100), in milliseconds for values in seconds."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank] * 1000


async def one_request(client: httpx.AsyncClient, url: str, key: str, body: bytes, sample: Sample) -> None:
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    start = time.perf_counter()
    first = last = None
    async with client.stream("POST", url, content=body, headers=headers) as resp:
        async for _ in resp.aiter_raw():
            now = time.perf_counter()
            if first is None:
                first = now
            elif last is not None:
                sample.gaps.append(now - last)
            last = now
        status = resp.status_code
    end = time.perf_counter()
    sample.total.append(end - start)
    sample.first_byte.append((first or end) - start)
    sample.statuses[status] = sample.statuses.get(status, 0) + 1


def new_client(connections: int) -> httpx.AsyncClient:
    # Idle connections are dropped before uvicorn's 5 s keep-alive closes them: reusing one the
    # server is closing loses the request (a ReadError at 64 clients on 2 cores).
    limits = httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=4.0
    )
    return httpx.AsyncClient(http1=True, http2=False, timeout=60.0, limits=limits)


def cpu(servers: dict[str, Server]) -> dict[str, float]:
    return {name: s.cpu_seconds() for name, s in servers.items()} | {"client": time.process_time()}


async def sequential(
    urls: dict[str, str], bodies: dict[str, list[bytes]], warmup: int, think: float, tag: str
) -> dict[str, Sample]:
    """One agent per path, the three interleaved request by request (rotating which goes first), so
    drift hits every path alike. ``think`` (the agent running its tool) lets a proxy's background
    work of one request end before the next request of any path starts."""
    samples = {p: Sample() for p in PATHS}
    async with new_client(4) as client:
        for i in range(len(bodies[PATHS[0]])):
            for path in PATHS[i % 3 :] + PATHS[: i % 3]:
                target = samples[path] if i >= warmup else Sample()
                await one_request(client, urls[path], f"sk-{tag}-{path}", bodies[path][i], target)
                await asyncio.sleep(think)
    return samples


async def concurrent(url: str, streams: Sequence[Sequence[bytes]], key: str) -> Sample:
    """One agent per client task, each sending its own sessions' requests back to back."""
    sample = Sample()
    async with new_client(len(streams) + 4) as client:
        # Open every connection first, so the measured run does not pay for connecting.
        await asyncio.gather(*(one_request(client, url, key, s[0], Sample()) for s in streams))

        async def agent(bodies: Sequence[bytes]) -> None:
            for body in bodies[1:]:
                await one_request(client, url, key, body, sample)

        start = time.perf_counter()
        await asyncio.gather(*(agent(s) for s in streams))
        sample.wall = time.perf_counter() - start
    return sample


# -- servers ----------------------------------------------------------------------------------------


def start_servers(
    switch_interval: float | None, upstream_latency: str | None = None, upstream_client: str | None = None
) -> dict[str, Server]:
    servers: dict[str, Server] = {}
    port = free_port()
    cli = ["-m", "cachewarden.proxy.cli"]
    latency = (
        [] if upstream_latency is None else ["--latency", *([upstream_latency] if upstream_latency else [])]
    )
    servers["upstream"] = python_server(
        "emulator", [*cli, "emulate", "--port", str(port), "--log-level", "warning", *latency], port
    )
    servers["upstream"].wait_ready()
    up = servers["upstream"].url
    port = free_port()
    bare = str(Path(__file__).resolve().parent / "_servers.py")
    servers["bare"] = python_server("bare proxy", [bare, "bare", "--port", str(port), "--upstream", up], port)
    if switch_interval is not None:  # experiment: the GIL hand-off interval of the proxy's threads
        cli = [
            "-c",
            f"import sys; sys.setswitchinterval({switch_interval}); from cachewarden.proxy.cli import main; "
            "raise SystemExit(main(sys.argv[1:]))",
        ]
    port = free_port()
    flags = ["--port", str(port), "--mode", "observe", "--log-level", "warning"]
    flags += ["--openai-upstream", up, "--anthropic-upstream", up]
    flags += ["--upstream-client", upstream_client] if upstream_client else []
    servers["cachewarden"] = python_server("cachewarden proxy", [*cli, "proxy", *flags], port)
    servers["bare"].wait_ready()
    servers["cachewarden"].wait_ready("/readyz")
    return servers


def scrape(url: str) -> dict[str, float]:
    """Sums of the proxy's metric samples by name (labels dropped)."""
    totals: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)", line)
        if match:
            totals[match.group(1)] = totals.get(match.group(1), 0.0) + float(match.group(2))
    return totals


# -- the engine alone -------------------------------------------------------------------------------


def engine_throughput(bodies: Sequence[bytes], seconds: float) -> tuple[float, float]:
    """Requests per second through reading (as the proxy reads: from where each body parts from its
    conversation's previous one) + Engine.analyse, then through the proxy's whole request hook
    (EngineAnalyzer.request: + attribution, live rules, metrics)."""
    from cachewarden.proxy.engine.adapters import load_body
    from cachewarden.proxy.engine.engine import Engine
    from cachewarden.proxy.engine.reading import ConversationReader
    from cachewarden.proxy.server.analysis import EngineAnalyzer
    from cachewarden.proxy.server.hooks import Flow, Timings
    from cachewarden.proxy.server.live_rules import LiveRules
    from cachewarden.proxy.server.metrics import Metrics

    def run(step: Callable[[int, bytes], None]) -> float:
        step(0, bodies[0])  # warm up: tokenizer, rule files
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds and done < len(bodies) - 1:
            done += 1
            step(done, bodies[done])
        return done / (time.perf_counter() - start)

    engine, reader = Engine(), ConversationReader()

    def analyse(i: int, body: bytes) -> None:
        engine.analyse(reader.parse(load_body(body), "openai-chat", tenant="bench"), tenant="bench")

    analyzer = EngineAnalyzer(Engine(), Metrics(64), LiveRules())

    def hook(i: int, body: bytes) -> None:
        flow = Flow(
            id=str(i),
            route="openai-chat",
            provider="openai-chat",
            upstream="openai",
            method="POST",
            path="/v1/chat/completions",
            request_body=body,
            request_headers=(),
            key_hash="k",
            tenant="bench",
            timings=Timings(received=time.perf_counter()),
        )
        analyzer.request(flow)

    return run(analyse), run(hook)


# -- report -----------------------------------------------------------------------------------------


def _ms(value: float, width: int, sign: bool = False) -> str:
    return f"{value:{'+' if sign else ''}{width}.2f}" if math.isfinite(value) else f"{'-':>{width}}"


def table(results: dict[str, dict[str, Sample]]) -> list[tuple[str, float, float, float]]:
    """Prints the table; returns (scenario, cachewarden added p50 ms, ratio to bare p50, at p99)."""
    print(
        f"{'scenario':<30}{'path':<12}{'p50 ms':>8}{'p99 ms':>9}{'+p50':>9}{'+p99':>10}"
        f"{'cw/bare':>8}{'CPU ms/req':>11}{'req/s':>7}"
    )
    goals = []
    for name, samples in results.items():
        views = [(name, "total")] + (
            [(name + " TTFB", "first"), (name + " chunk gap", "gap")] if "stream" in name else []
        )
        for label, view in views:
            fb = view != "total"
            values = {
                p: {"total": samples[p].total, "first": samples[p].first_byte, "gap": samples[p].gaps}[view]
                for p in PATHS
            }
            p50 = {p: pct(values[p], 50) for p in PATHS}
            p99 = {p: pct(values[p], 99) for p in PATHS}
            add50 = {p: p50[p] - p50["direct"] for p in PATHS}
            add99 = {p: p99[p] - p99["direct"] for p in PATHS}
            ratio50 = add50["cachewarden"] / add50["bare"] if add50["bare"] > 0 else float("inf")
            ratio99 = add99["cachewarden"] / add99["bare"] if add99["bare"] > 0 else float("inf")
            for p in PATHS:
                s = samples[p]
                row = f"{label:<30}{p:<12}{_ms(p50[p], 8)}{_ms(p99[p], 9)}"
                row += f"{'':>19}" if p == "direct" else f"{_ms(add50[p], 9, True)}{_ms(add99[p], 10, True)}"
                row += f"{ratio50:7.2f}x" if p == "cachewarden" else f"{'':>8}"
                row += _ms(s.proxy_cpu_ms, 11) if not fb else f"{'':>11}"
                row += f"{len(s.total) / s.wall:7.0f}" if s.wall and not fb else ""
                bad = {k: v for k, v in s.statuses.items() if k != 200}
                print(row + (f"  non-200: {bad}" if bad else ""))
            if not fb:
                goals.append((name, add50["cachewarden"], ratio50, ratio99))
    return goals


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests (smoke test)")
    parser.add_argument("--sequential", type=int, default=300, help="measured sequential requests per path")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--concurrent", type=int, default=2000, help="requests per path with 32 clients")
    parser.add_argument("--think-ms", type=float, default=5.0, help="pause after each sequential request")
    parser.add_argument(
        "--upstream-latency",
        nargs="?",
        const="",
        metavar="SPEC",
        help="give the emulator its latency model (time to first token grows with uncached prompt "
        "tokens, as at a real provider); optional SPEC as for `cachewarden emulate --latency`",
    )
    parser.add_argument(
        "--switch-interval", type=float, help="experiment: sys.setswitchinterval() in the cachewarden proxy"
    )
    parser.add_argument(
        "--upstream-client", choices=["aiohttp", "httpx"], help="cachewarden's (default: its own default)"
    )
    args = parser.parse_args(argv)
    seq_n, warm, conc_n = args.sequential, args.warmup, args.concurrent
    if args.quick:
        seq_n, warm, conc_n = max(30, seq_n // 10), 10, max(CONCURRENCY * 4, conc_n // 10)

    plain, streamed = Workload(stream=False), Workload(stream=True)
    # Same shape, different conversations per path: no path is served from another's tokenizer memo.
    seq = {
        tag: {p: w.bodies(i, warm + seq_n) for i, p in enumerate(PATHS)}
        for tag, w in (("seq", plain), ("seqs", streamed))
    }
    sizes = [len(b) for b in seq["seq"]["direct"]]
    print(
        f"workload: OpenAI chat, {statistics.fmean(sizes) / 1000:.1f} KB mean body "
        f"({min(sizes) / 1000:.0f}-{max(sizes) / 1000:.0f} KB), "
        f"{shared_share(seq['seq']['direct']):.1%} of each body a byte prefix of the previous one, "
        f"new conversation every {SESSION_TURNS} requests; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} before the run",
        flush=True,
    )

    servers: dict[str, Server] = {}
    results: dict[str, dict[str, Sample]] = {}
    started = time.perf_counter()
    try:
        servers = start_servers(args.switch_interval, args.upstream_latency, args.upstream_client)
        up = servers["upstream"].url
        urls = {p: (up if p == "direct" else servers[p].url) + "/v1/chat/completions" for p in PATHS}

        for name, tag in (("sequential", "seq"), ("sequential stream", "seqs")):
            t, before = time.perf_counter(), cpu(servers)
            results[name] = asyncio.run(sequential(urls, seq[tag], warm, args.think_ms / 1000, tag))
            after = cpu(servers)
            for p in ("bare", "cachewarden"):
                results[name][p].proxy_cpu_ms = (after[p] - before[p]) / (warm + seq_n) * 1000
            print(f"  {name}: {time.perf_counter() - t:.1f} s", flush=True)

        per_agent = conc_n // CONCURRENCY + 1  # +1: the first request of each agent opens its connection
        for name, workload, n in (
            ("32 clients", plain, per_agent),
            ("32 clients stream", streamed, per_agent // 2 + 1),
        ):
            results[name] = {}
            t = time.perf_counter()
            for i, p in enumerate(PATHS):
                streams = [workload.bodies(100 + 40 * i + w, n) for w in range(CONCURRENCY)]
                httpx.post(up + "/_emulator/reset", timeout=10)
                before = cpu(servers)
                results[name][p] = asyncio.run(concurrent(urls[p], streams, f"sk-{name}-{p}"))
                if p != "direct":
                    results[name][p].proxy_cpu_ms = (cpu(servers)[p] - before[p]) / (n * CONCURRENCY) * 1000
            print(f"  {name}: {time.perf_counter() - t:.1f} s", flush=True)

        metrics = scrape(servers["cachewarden"].url)
        for s in servers.values():
            if s.proc.poll() is not None:
                raise RuntimeError(f"{s.name} died during the run (exit {s.proc.returncode})")
        logs = {name: s.log_tail(1500).strip() for name, s in servers.items()}
    finally:
        for s in servers.values():
            s.stop()
    measured = time.perf_counter() - started

    engine_rps, hook_rps = engine_throughput(plain.bodies(7, 1200), seconds=1.0 if args.quick else 4.0)

    print()
    goals = table(results)
    count = metrics.get("cachewarden_overhead_seconds_count", 0.0)
    overhead = metrics.get("cachewarden_overhead_seconds_sum", 0.0) / count * 1000 if count else math.nan
    errors = metrics.get("cachewarden_analysis_errors_total", 0.0)
    print(
        "\n(+p50/+p99: percentile minus the direct path's; CPU: the proxy process's user+system time per "
        f"request; 32 clients on {os.cpu_count()} CPUs saturate them, so latency there ~ CPU per request)"
    )
    print(
        f"cachewarden /metrics: overhead_seconds mean {overhead:.3f} ms from body received to forwarding "
        f"({count:.0f} requests); analysis_errors_total {errors:.0f}"
        + ("" if errors == 0 else "  <-- MUST BE 0")
    )
    print(
        f"engine in-process on the same workload: reading + Engine.analyse {engine_rps:.0f} req/s "
        f"({1000 / engine_rps:.2f} ms); whole request hook (EngineAnalyzer.request) {hook_rps:.0f} req/s "
        f"({1000 / hook_rps:.2f} ms)"
    )
    for name, add, ratio, ratio99 in goals:
        met = add < GOAL_P50_MS and ratio <= GOAL_RATIO
        print(
            f"goal {name + ':':<19} +{add:.2f} ms p50 (< {GOAL_P50_MS:g}), {ratio:.2f}x bare's added p50 "
            f"(<= {GOAL_RATIO:g}x; p99 {ratio99:.2f}x): {'met' if met else 'MISSED'}"
        )
    for name, tail in logs.items():
        if tail:
            print(f"--- {name} log (tail) ---\n{tail}")
    print(f"(servers up and measuring: {measured:.0f} s; load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
