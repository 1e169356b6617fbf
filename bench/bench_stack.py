"""The serving stack of a Python proxy, measured: which server and which HTTP client transport to ship.

Paths, every server in its own process group, one near-free upstream (nginx answering every POST
with a canned chat completion, so what is measured is the hop and nothing else):

    direct                      client -> nginx
    nginx-hop                   client -> nginx ``proxy_pass`` -> nginx (the floor of a hop, in C)
    <server>+<transport>        client -> bare Starlette pass-through (bench/_servers.py) -> nginx
    cachewarden                 client -> `cachewarden proxy` (observe mode, its defaults: analysis in
                                2 worker processes, the aiohttp upstream client) -> nginx
    cachewarden-httpx           the same with ``--upstream-client httpx`` (httpx's own transport)
    cachewarden-threads         the same as cachewarden with ``--analysis-processes=false`` (analysis
                                on 2 threads of the forwarding process, as in the other modes)

Servers: uvicorn with h11 (cachewarden's; both on uvicorn's default loop, uvloop where installed),
uvicorn with httptools + uvloop, granian.
Transports: httpx's own, and aiohttp's through cachewarden's ``upstream_aiohttp.AiohttpTransport``
(httpx stays the client API; cachewarden's default upstream client).
Workload: the agent bodies of bench_proxy.py (~40 KB OpenAI Chat requests, each a turn longer).

Sequential requests are interleaved path by path (rotating order), so drift hits every path alike;
"added" is a percentile minus the direct path's. With 32 concurrent clients each path runs on its
own; CPU per request is the whole process group's CPU time (granian's workers included) over the
requests of that run. Ratios against ``uvicorn-h11+httpx`` are the figures to compare.

``--paths NAME,…`` keeps only those paths (besides direct), e.g. ``--paths
uvicorn-h11+httpx,cachewarden`` for the default's sequential added p50 against the baseline.

``--sweep 1,8,32,64`` measures instead a concurrency sweep of direct, the baseline stack, the bare
pass-through on the aiohttp transport (``uvicorn-h11+aiohttp``: the floor with cachewarden's own
upstream client) and the three cachewarden paths (``--paths`` keeps fewer), each level with the same
number of requests per client: added p50 / p99 over the direct path at that level, the process
group's CPU per request (analysis threads and worker processes included; measured once the
process group is idle again, i.e. the run's analysis ended), the forwarding process's alone
("fwd"; "fwd vs same": against the bare pass-through on the same upstream client), and the p99
itself, as ratios against the baseline at the same level (on 2 cores the load generator competes
with the servers: at 32+ clients "added" can be negative), and the requests whose analysis was
dropped (``analysis_dropped_total``: the analysis fell behind its bounded queue; the CPU per
request is then that of the analysed share: ``--analysis-backlog 100000`` keeps every analysis).

Run: ``python bench/bench_stack.py [--sequential N] [--concurrent N] [--no-cachewarden] [--paths NAMES]
[--sweep LEVELS]``
(``--per-client N``: requests per client in the sweep; ``--analysis-backlog N``: cachewarden's)
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _servers import SERVERS, TRANSPORTS, Server, free_port, nginx_hop, nginx_server, python_server
from bench_proxy import Sample, Workload, concurrent, new_client, one_request, pct

BASELINE = "uvicorn-h11+httpx"
CONCURRENCY = 32
PROXIES = ("cachewarden", "cachewarden-httpx", "cachewarden-threads")
SAME_CLIENT = "uvicorn-h11+aiohttp"
HOP = "nginx-hop"
WORKERS = 2


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


def start(
    upstream: Server, with_cachewarden: bool, tmp: str, paths: set[str] | None = None
) -> dict[str, Server]:
    """Every path's server (``paths``: only those), started and ready."""
    servers: dict[str, Server] = {}
    if paths is None or HOP in paths:
        servers[HOP] = nginx_hop(free_port(), tmp, upstream.url)
    for server in SERVERS:
        for transport in TRANSPORTS:
            name = f"{server}+{transport}"
            if paths is not None and name not in paths:
                continue
            port = free_port()
            args = ["bench/_servers.py", "bare", "--port", str(port), "--upstream", upstream.url]
            servers[name] = python_server(name, [*args, "--server", server, "--transport", transport], port)
    for name in PROXIES if with_cachewarden else ():
        if paths is None or name in paths:
            port = free_port()
            servers[name] = python_server(name, cachewarden_argv(port, upstream, name), port)
    for s in servers.values():
        s.wait_ready()
    return servers


def cachewarden_argv(port: int, upstream: Server, path: str, backlog: int | None = None) -> list[str]:
    """`cachewarden proxy` as shipped (analysis in worker processes, the aiohttp upstream client),
    with httpx's transport (cachewarden-httpx), or with its analysis on threads (cachewarden-threads)."""
    argv = ["-m", "cachewarden.proxy.cli", "proxy", "--port", str(port), "--log-level", "warning"]
    argv += [] if backlog is None else ["--analysis-backlog", str(backlog)]
    argv += ["--openai-upstream", upstream.url, "--anthropic-upstream", upstream.url]
    argv += ["--analysis-workers", str(WORKERS)]
    if path == "cachewarden-httpx":
        argv += ["--upstream-client", "httpx"]
    return argv + (["--analysis-processes=false"] if path == "cachewarden-threads" else [])


def same_client(path: str) -> str | None:
    """The bare pass-through on the upstream client ``path`` uses (its "fwd vs same"): aiohttp for
    cachewarden's default and the aiohttp transports, httpx's for the rest; None for nginx-hop."""
    if path == HOP:
        return None
    on_aiohttp = path.endswith("+aiohttp") or path in ("cachewarden", "cachewarden-threads")
    return SAME_CLIENT if on_aiohttp else BASELINE


def counted(owner: Server, name: str) -> float:
    """A cachewarden metric's total (every label), read from its /metrics."""
    text = httpx.get(owner.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def settle(owner: Server, timeout: float = 300) -> None:
    """Waits until the server's process group is idle (no CPU tick for half a second): a cachewarden
    proxy's analysis of the run (threads or worker processes) has then ended, so the CPU read next
    is all of it. Watched in /proc, not by scraping /metrics, which would cost the proxy CPU."""
    deadline = time.monotonic() + timeout
    last = owner.group_cpu_seconds()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = owner.group_cpu_seconds()
        if now == last:
            return
        last = now
    raise SystemExit(f"bench_stack: {owner.name} still busy after {timeout:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sequential", type=int, default=200, help="measured sequential requests per path")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=640, help="requests per path with 32 clients")
    parser.add_argument("--no-cachewarden", action="store_true", help="the bare stacks only")
    parser.add_argument("--paths", metavar="NAMES", help="only these paths besides direct (comma-separated)")
    parser.add_argument("--sweep", metavar="LEVELS", help="a concurrency sweep instead, e.g. 1,8,32,64")
    parser.add_argument("--per-client", type=int, default=20, help="requests per client in the sweep")
    parser.add_argument(
        "--analysis-backlog", type=int, help="the sweep's cachewarden --analysis-backlog (its default: 256)"
    )
    args = parser.parse_args(argv)
    if args.sweep:
        levels = [int(v) for v in args.sweep.split(",") if v.strip()]
        chosen = [p.strip() for p in args.paths.split(",") if p.strip()] if args.paths else None
        return sweep(levels, args.per_client, args.analysis_backlog, chosen)
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
        paths = {p.strip() for p in args.paths.split(",") if p.strip()} if args.paths else None
        servers = start(nginx, not args.no_cachewarden, tmp, paths)
        try:
            urls = {"direct": nginx.url} | {name: s.url for name, s in servers.items()}
            seq = asyncio.run(sequential(urls, bodies, args.warmup))
            conc: dict[str, Sample] = {}
            cpu_ms: dict[str, tuple[float, float]] = {}
            for name, url in urls.items():
                owner = nginx if name == "direct" else servers[name]
                settle(owner)  # the sequential run's analysis is not this run's CPU
                before, before_fwd = owner.group_cpu_seconds(), owner.cpu_seconds()
                conc[name] = asyncio.run(concurrent(url + "/v1/chat/completions", streams, f"sk-c-{name}"))
                settle(owner)
                n = max(1, len(conc[name].total))
                cpu_ms[name] = (
                    (owner.group_cpu_seconds() - before) * 1000 / n,
                    (owner.cpu_seconds() - before_fwd) * 1000 / n,
                )
        finally:
            for s in servers.values():
                s.stop()
            nginx.stop()
    report(seq, conc, cpu_ms)
    return 0


def sweep(
    levels: Sequence[int], per_client: int, backlog: int | None = None, paths: Sequence[str] | None = None
) -> int:
    """Direct, the baseline stack, the same-client floor and the cachewarden paths at each
    concurrency level (module doc); ``paths``: only these besides direct and the baseline."""
    if shutil.which("nginx") is None:
        print("bench_stack: needs nginx (apt-get install nginx-light)", file=sys.stderr)
        return 2
    workload = Workload(stream=False)
    wanted = [HOP, SAME_CLIENT, *PROXIES] if paths is None else [p for p in paths if p != BASELINE]
    with tempfile.TemporaryDirectory() as tmp:
        nginx = nginx_server(free_port(), tmp)
        nginx.wait_ready()
        owners = {"direct": nginx}
        for name in (BASELINE, *wanted):
            port = free_port()
            if name in PROXIES:
                owners[name] = python_server(name, cachewarden_argv(port, nginx, name, backlog), port)
                continue
            if name == HOP:
                owners[name] = nginx_hop(port, tmp, nginx.url)
                continue
            server, transport = name.split("+")
            args = ["bench/_servers.py", "bare", "--port", str(port), "--upstream", nginx.url]
            owners[name] = python_server(name, [*args, "--server", server, "--transport", transport], port)
        try:
            for i, s in enumerate(owners.values()):
                s.wait_ready()
                # Warm: a cold process (a worker's first lint, first tokenizer use) is not a level's cost.
                # Several tenants, so that every analysis worker process is warmed.
                for t in range(8):
                    warm = [workload.bodies(900_000 + 100 * i + 10 * t + w, 6) for w in range(2)]
                    asyncio.run(concurrent(s.url + "/v1/chat/completions", warm, f"sk-warm-{i}-{t}"))
            head = ("clients", "path", "+p50", "+p99", "CPU/req", "fwd CPU/req", "CPU vs base")
            head += ("fwd vs base", "fwd vs same", "+p50 vs base", "p99 vs base", "dropped")
            print(f"{head[0]:>7} {head[1]:<20}" + "".join(f"{h:>13}" for h in head[2:]))
            for level in levels:
                # Fresh sessions per level and path: every conversation grows a turn per request.
                results: dict[str, tuple[Sample, float, float]] = {}
                for i, (name, owner) in enumerate(owners.items()):
                    streams = [
                        workload.bodies(1000 * level + 100 * i + w, per_client + 1) for w in range(level)
                    ]
                    settle(owner)
                    before, before_fwd = owner.group_cpu_seconds(), owner.cpu_seconds()
                    try:
                        sample = asyncio.run(
                            concurrent(owner.url + "/v1/chat/completions", streams, f"sk-s-{name}")
                        )
                    except httpx.HTTPError as exc:
                        log = owner.log_tail()
                        raise SystemExit(f"bench_stack: {name} at {level} clients: {exc!r}\n{log}") from None
                    settle(owner)
                    n = max(1, len(sample.total))
                    results[name] = (
                        sample,
                        (owner.group_cpu_seconds() - before) * 1000 / n,
                        (owner.cpu_seconds() - before_fwd) * 1000 / n,
                    )
                direct = results["direct"][0].total
                base_sample, base_cpu, base_fwd = results[BASELINE]
                base_p99 = pct(base_sample.total, 99)
                base_a50 = pct(base_sample.total, 50) - pct(direct, 50)
                for name in (BASELINE, *wanted):
                    sample, cpu_ms, fwd_ms = results[name]
                    a50, a99 = (
                        pct(sample.total, 50) - pct(direct, 50),
                        pct(sample.total, 99) - pct(direct, 99),
                    )
                    cells = [f"{a50:.2f}", f"{a99:.2f}", f"{cpu_ms:.2f}", f"{fwd_ms:.2f}"]
                    cells += [f"{cpu_ms / base_cpu:.2f}x", f"{fwd_ms / base_fwd:.2f}x"]
                    same = same_client(name)
                    same_fwd = results[same][2] if same is not None and same in results else None
                    cells.append(f"{fwd_ms / same_fwd:.2f}x" if same_fwd else "-")
                    cells.append(f"{a50 / base_a50:.2f}x" if base_a50 > 0 else "-")
                    cells.append(f"{pct(sample.total, 99) / base_p99:.2f}x")
                    proxy = name in PROXIES
                    dropped = counted(owners[name], "cachewarden_analysis_dropped_total") if proxy else 0
                    cells.append(f"{dropped:.0f}" if proxy else "-")
                    print(f"{level:>7} {name:<20}" + "".join(f"{c:>13}" for c in cells))
        finally:
            for s in owners.values():
                if s is not nginx:
                    s.stop()
            nginx.stop()
    print("(milliseconds; +pXX = added over the direct path's percentile at the same concurrency;")
    print(" fwd vs same: the forwarding process against the bare pass-through on the same upstream")
    print(" client: uvicorn-h11+aiohttp for cachewarden and cachewarden-threads (both on aiohttp), the")
    print(" baseline for cachewarden-httpx; nginx-hop has none;")
    print(" dropped: requests whose analysis was dropped so far, cumulative over the levels)")
    return 0


def report(seq: dict[str, Sample], conc: dict[str, Sample], cpu_ms: dict[str, tuple[float, float]]) -> None:
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
    base = next((r for r in rows if r[0] == BASELINE), rows[0])
    print(
        f"direct to nginx: p50 {pct(direct_seq, 50):.2f} ms sequential, {pct(direct_conc, 50):.2f} ms at 32"
    )
    head = ("path", "seq +p50", "seq +p99", "32c +p50", "32c +p99", "CPU/req", "fwd CPU/req")
    head += ("CPU vs h11", "fwd vs h11")
    print(f"{head[0]:<26}" + "".join(f"{h:>12}" for h in head[1:]))
    for name, s50, s99, c50, c99, (cpu, fwd) in rows:
        cells = [f"{v:.2f}" for v in (s50, s99, c50, c99, cpu, fwd)]
        cells += [f"{cpu / base[5][0]:.2f}x", f"{fwd / base[5][1]:.2f}x"]
        print(f"{name:<26}" + "".join(f"{c:>12}" for c in cells))
    bad = {n: dict(s.statuses) for n, s in (seq | conc).items() if set(s.statuses) - {200}}
    if bad:
        print(f"non-200 answers: {bad}")
    print("(milliseconds; +pXX = added over the direct path's percentile; fwd: the server's own process,")
    print(" for nginx-hop its master process, which relays nothing: read its CPU/req)")


if __name__ == "__main__":
    raise SystemExit(main())
