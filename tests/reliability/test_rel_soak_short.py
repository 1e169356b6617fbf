"""Soak, short: 12,000 synthetic requests through ``Engine.analyse`` with tiny caps everywhere.

Many tenants run short, growing conversations (OpenAI Chat and Anthropic, parsed by the real
adapters). The prefix indexes are capped at 5,000 tokens; the tokenizer memo and the engine's
history are small too, so every bounded structure is full early. Then: the indexes never hold more
than their cap, and neither live Python objects nor RSS keep growing. The long version (a million
requests) is bench/bench_soak.py.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator
from typing import Any

from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.index.memory import MemoryIndex
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Prompt

REQUESTS = 12_000
EVERY = 2_000
CAP = 5_000
WORDS = [
    "booking",
    "refund",
    "policy",
    "travel",
    "desk",
    "flight",
    "hotel",
    "voucher",
    "fee",
    "window",
    "agent",
    "seat",
    "fare",
    "route",
]


def rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def workload(seed: int = 3) -> Iterator[tuple[str, Prompt]]:
    rng = random.Random(seed)
    tenants = 100
    systems = [
        f"Tenant {t}. " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(80, 200)))
        for t in range(tenants)
    ]
    conversations: dict[int, list[str]] = {}
    for i in range(REQUESTS):
        t = rng.randrange(tenants)
        turns = conversations.get(t)
        if turns is None or len(turns) >= rng.randint(1, 6):
            turns = conversations[t] = []
        turns.append(f"Request {i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 15))))
        if t % 2:
            body: dict[str, Any] = {
                "model": "claude-sonnet-5",
                "max_tokens": 16,
                "system": systems[t],
                "messages": [{"role": "user", "content": x} for x in turns],
            }
            yield f"tenant-{t}", parse_request(body, provider="anthropic")
        else:
            messages = [
                {"role": "system", "content": systems[t]},
                *({"role": "user", "content": x} for x in turns),
            ]
            yield (
                f"tenant-{t}",
                parse_request({"model": "gpt-4.1", "messages": messages}, provider="openai-chat"),
            )


def test_index_stays_at_its_cap_and_memory_plateaus() -> None:
    index, wide = MemoryIndex(max_tokens=CAP), MemoryIndex(max_tokens=CAP)
    table = load_model_table()
    engine = Engine(
        table=table,
        index=index,
        wide_index=wide,
        counter=PromptCounter(table, memo_entries=500),
        history_size=200,
    )
    now = 1_700_000_000.0
    reports: list[tuple[int, int, int, int, float]] = []
    for n, (tenant, prompt) in enumerate(workload(), 1):
        now += 0.01
        engine.analyse(prompt, tenant=tenant, now=now)
        if n % EVERY == 0:
            gc.collect()
            stats, wstats = index.stats(), wide.stats()
            reports.append((n, stats.tokens, wstats.tokens, len(gc.get_objects()), rss_mib()))
    for n, tokens, wide_tokens, objects, rss in reports:
        print(f"soak {n:>6}: index tokens {tokens}, wide {wide_tokens}, objects {objects}, RSS {rss:.1f} MiB")
        assert tokens <= CAP and wide_tokens <= CAP
    assert reports[0][1] >= 0.9 * CAP  # the plateau is reached within the first report
    # From the second report on, every structure is full: nothing may keep growing.
    _, _, _, objects_then, rss_then = reports[1]
    _, _, _, objects_end, rss_end = reports[-1]
    assert objects_end <= objects_then * 1.05 + 1_000, (objects_then, objects_end)
    assert rss_end <= rss_then + 16, (rss_then, rss_end)
