"""The serving stack of a Python proxy, measured: which server and which HTTP client transport to ship.

Paths, every server in its own process group, one near-free upstream (nginx answering every POST
with a canned chat completion, so what is measured is the hop and nothing else):

    direct                      client -> nginx
    <server>+<transport>        client -> bare Starlette pass-through (bench/_servers.py) -> nginx
    cachewarden                 client -> `cachewarden proxy` (observe mode, analysis on) -> nginx

Servers: uvicorn with h11 (cachewarden's until now), uvicorn with httptools + uvloop, granian.
Transports: httpx's own, and aiohttp's through ``httpx-aiohttp`` (httpx stays the client API).
Workload: the agent bodies of bench_proxy.py (~40 KB OpenAI Chat requests, each a turn longer).

Sequential requests are interleaved path by path (rotating order), so drift hits every path alike;
"added" is a percentile minus the direct path's. With 32 concurrent clients each path runs on its
own; CPU per request is the whole process group's CPU time (granian's workers included) over the
requests of that run. Ratios against ``uvicorn-h11+httpx`` are the figures to compare.

Run: ``python bench/bench_stack.py [--sequential N] [--concurrent N] [--no-cachewarden]``
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import SERVERS, TRANSPORTS, Server, free_port, nginx_server, python_server
from bench_proxy import Sample, Workload, concurrent, new_client, one_request, pct

BASELINE = "uvicorn-h11+httpx"
CONCURRENCY = 32


async def sequential(urls: dict[str, str], bodies: Sequence[bytes], warmup: int) -> dict[str, Sample]:
    names = list(urls)
    samples = {name: Sample() for name in names}
    async with new_client(4) as client:
        for i, body in enumerate(bodies):
            k = i % len(names)
            for name in names[k:] + names[:k]:
                target = samples[name] if i >= warmup else Sample()
                await one_request(client, urls[name] + "/v1/chat/completions", f"sk-{name}", body, target)
    return samples


def start(upstream: Server, with_cachewarden: bool) -> dict[str, Server]:
    servers: dict[str, Server] = {}
    for server in SERVERS:
        for transport in TRANSPORTS:
            name = f"{server}+{transport}"
            port = free_port()
            args = ["bench/_servers.py", "bare", "--port", str(port), "--upstream", upstream.url]
            servers[name] = python_server(name, [*args, "--server", server, "--transport", transport], port)
    if with_cachewarden:
        port = free_port()
        argv = ["-m", "cachewarden.proxy.cli", "proxy", "--port", str(port), "--log-level", "warning"]
        argv += ["--openai-upstream", upstream.url, "--anthropic-upstream", upstream.url]
        servers["cachewarden"] = python_server("cachewarden", argv, port)
    for s in servers.values():
        s.wait_ready()
    return servers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sequential", type=int, default=200, help="measured sequential requests per path")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=640, help="requests per path with 32 clients")
    parser.add_argument("--no-cachewarden", action="store_true", help="the bare stacks only")
    args = parser.parse_args(argv)
    if shutil.which("nginx") is None:
        print("bench_stack: needs nginx (apt-get install nginx-light)", file=sys.stderr)
        return 2
    workload = Workload(stream=False)
    bodies = workload.bodies(0, args.sequential + args.warmup)
    streams = [workload.bodies(w + 1, args.concurrent // CONCURRENCY + 1) for w in range(CONCURRENCY)]
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        nginx = nginx_server(port, tmp)
        nginx.wait_ready()
        servers = start(nginx, not args.no_cachewarden)
        try:
            urls = {"direct": nginx.url} | {name: s.url for name, s in servers.items()}
            seq = asyncio.run(sequential(urls, bodies, args.warmup))
            conc: dict[str, Sample] = {}
            cpu_ms: dict[str, float] = {}
            for name, url in urls.items():
                owner = nginx if name == "direct" else servers[name]
                before = owner.group_cpu_seconds()
                conc[name] = asyncio.run(concurrent(url + "/v1/chat/completions", streams, f"sk-c-{name}"))
                cpu_ms[name] = (owner.group_cpu_seconds() - before) * 1000 / max(1, len(conc[name].total))
        finally:
            for s in servers.values():
                s.stop()
            nginx.stop()
    report(seq, conc, cpu_ms)
    return 0


def report(seq: dict[str, Sample], conc: dict[str, Sample], cpu_ms: dict[str, float]) -> None:
    direct_seq, direct_conc = seq["direct"].total, conc["direct"].total
    rows = []
    for name in seq:
        if name == "direct":
            continue
        rows.append(
            (
                name,
                pct(seq[name].total, 50) - pct(direct_seq, 50),
                pct(seq[name].total, 99) - pct(direct_seq, 99),
                pct(conc[name].total, 50) - pct(direct_conc, 50),
                pct(conc[name].total, 99) - pct(direct_conc, 99),
                cpu_ms[name],
            )
        )
    base = next(r for r in rows if r[0] == BASELINE)
    print(
        f"direct to nginx: p50 {pct(direct_seq, 50):.2f} ms sequential, {pct(direct_conc, 50):.2f} ms at 32"
    )
    head = ("path", "seq +p50", "seq +p99", "32c +p50", "32c +p99", "CPU/req", "CPU vs h11")
    print(f"{head[0]:<26}" + "".join(f"{h:>11}" for h in head[1:]))
    for name, s50, s99, c50, c99, cpu in rows:
        cells = [f"{v:.2f}" for v in (s50, s99, c50, c99, cpu)] + [f"{cpu / base[5]:.2f}x"]
        print(f"{name:<26}" + "".join(f"{c:>11}" for c in cells))
    bad = {n: dict(s.statuses) for n, s in (seq | conc).items() if set(s.statuses) - {200}}
    if bad:
        print(f"non-200 answers: {bad}")
    print("(milliseconds; +pXX = added over the direct path's percentile)")


if __name__ == "__main__":
    raise SystemExit(main())
