"""Soak: a million synthetic requests through ``Engine.analyse``; the index must plateau at its cap.

Workload: many tenants, each with its own system prompt (about 150-400 tokens), running short
conversations that grow by one user turn per request and restart after a few turns; OpenAI Chat
and Anthropic bodies alternate, parsed by the real adapters. Both prefix indexes are capped small
(``--cap`` tokens), so the plateau is reached early. Every ``--every`` requests the script prints
``index.stats()`` of both indexes, the Python heap (tracemalloc, optional) and RSS, and the
throughput. Memory must stop growing once the cap is reached: the last report's heap / RSS is
compared with the report right after the plateau began.

Usage: python bench/bench_soak.py [--requests 1000000] [--cap 200000] [--every 100000] [--tracemalloc]
Exit 0 when both indexes stayed within their cap and memory plateaued (growth below --max-growth-mib).
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.index.memory import MemoryIndex
from cachewarden.proxy.engine.prompt import Prompt

WORDS = [
    "booking",
    "refund",
    "policy",
    "travel",
    "desk",
    "customer",
    "flight",
    "hotel",
    "voucher",
    "change",
    "fee",
    "window",
    "hours",
    "day",
    "agent",
    "confirm",
    "cancel",
    "seat",
    "upgrade",
    "luggage",
    "allowance",
    "passport",
    "visa",
    "itinerary",
    "fare",
    "class",
    "route",
    "delay",
]


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def workload(requests: int, tenants: int, seed: int = 7) -> Iterator[tuple[str, Prompt]]:
    """(tenant, prompt) pairs: conversations of 1-8 turns per tenant, interleaved across tenants."""
    rng = random.Random(seed)
    systems = [f"Tenant {t} policy. " + _text(rng, rng.randint(120, 350)) for t in range(tenants)]
    conversations: dict[int, list[str]] = {}
    for i in range(requests):
        t = rng.randrange(tenants)
        turns = conversations.get(t)
        if turns is None or len(turns) >= rng.randint(1, 8):
            turns = conversations[t] = []
        turns.append(f"Request {i}: " + _text(rng, rng.randint(5, 30)))
        tenant = f"tenant-{t}"
        if t % 2:
            body: dict[str, Any] = {
                "model": "claude-sonnet-5",
                "max_tokens": 64,
                "system": [{"type": "text", "text": systems[t], "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": turn} for turn in turns],
            }
            yield tenant, parse_request(body, provider="anthropic")
        else:
            body = {
                "model": "gpt-4.1",
                "messages": [
                    {"role": "system", "content": systems[t]},
                    *({"role": "user", "content": x} for x in turns),
                ],
            }
            yield tenant, parse_request(body, provider="openai-chat")


@dataclass
class Report:
    requests: int
    tokens: int
    entries: int
    wide_tokens: int
    heap_mib: float | None
    rss_mib: float


def soak(
    requests: int, cap: int, every: int, tenants: int, trace: bool, out: Any = sys.stdout
) -> list[Report]:
    """Runs the workload; prints and returns one report per ``every`` requests."""
    index, wide = MemoryIndex(max_tokens=cap), MemoryIndex(max_tokens=cap)
    engine = Engine(index=index, wide_index=wide)
    if trace:
        tracemalloc.start()
    reports: list[Report] = []
    started = last = time.perf_counter()
    now = 1_700_000_000.0
    for n, (tenant, prompt) in enumerate(workload(requests, tenants), 1):
        now += 0.01  # 100 requests per simulated second: every TTL stays alive, the cap does the work
        engine.analyse(prompt, tenant=tenant, now=now)
        if n % every == 0 or n == requests:
            gc.collect()
            stats, wstats = index.stats(), wide.stats()
            heap = tracemalloc.get_traced_memory()[0] / 2**20 if trace else None
            report = Report(n, stats.tokens, stats.entries, wstats.tokens, heap, rss_mib())
            reports.append(report)
            t = time.perf_counter()
            rate = every / (t - last) if n % every == 0 else 0.0
            last = t
            heap_text = f" heap {heap:7.1f} MiB" if heap is not None else ""
            print(
                f"{n:>9,} requests  index {stats}  wide tokens {wstats.tokens:,}{heap_text}  "
                f"RSS {report.rss_mib:7.1f} MiB  {rate:,.0f} req/s",
                file=out,
                flush=True,
            )
    elapsed = time.perf_counter() - started
    print(
        f"total {requests:,} requests in {elapsed:.1f} s: {requests / elapsed:,.0f} req/s",
        file=out,
        flush=True,
    )
    if trace:
        tracemalloc.stop()
    return reports


def plateau_growth(reports: Sequence[Report], cap: int) -> tuple[float, float | None]:
    """RSS and heap growth (MiB) from the first report at which the index had reached 90% of its cap."""
    at = next((i for i, r in enumerate(reports) if r.tokens >= 0.9 * cap), len(reports) - 1)
    first, last = reports[at], reports[-1]
    heap = None if first.heap_mib is None or last.heap_mib is None else last.heap_mib - first.heap_mib
    return last.rss_mib - first.rss_mib, heap


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--cap", type=int, default=200_000, help="max_tokens of each prefix index")
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=2_000)
    parser.add_argument(
        "--tracemalloc", action="store_true", help="also trace the Python heap (about 2x slower)"
    )
    parser.add_argument("--max-growth-mib", type=float, default=32.0)
    args = parser.parse_args(argv)
    print(
        f"bench_soak: {args.requests:,} requests, {args.tenants:,} tenants, index cap {args.cap:,} tokens",
        flush=True,
    )
    reports = soak(args.requests, args.cap, args.every, args.tenants, args.tracemalloc)
    rss_growth, heap_growth = plateau_growth(reports, args.cap)
    over = [r for r in reports if r.tokens > args.cap or r.wide_tokens > args.cap]
    heap_text = f", heap {heap_growth:+.1f} MiB" if heap_growth is not None else ""
    print(
        f"growth after the plateau: RSS {rss_growth:+.1f} MiB{heap_text}; over the cap: {len(over)} reports"
    )
    growth = heap_growth if heap_growth is not None else rss_growth
    return 0 if not over and growth <= args.max_growth_mib else 1


if __name__ == "__main__":
    raise SystemExit(main())
