"""Benchmark of the in-memory prefix index: lookup must not grow with the number of stored prompts.

Workload (agent-like): every prompt of the scope starts with the same 1,203-token system prompt
(deliberately not a multiple of the block size, so that all conversations fan out mid-block from
one node), followed by a distinct history. The query is a 4,000-token prompt that shares 3,600
tokens (90%) with 10 earlier turns of its own conversation; the rest of the scope is other
conversations (system prompt + a distinct 120-token tail).

Run: ``python bench/bench_index.py`` — prints a table, writes nothing. About 30 s on 2 cores.
"""

from __future__ import annotations

import random
import time
import tracemalloc
from collections.abc import Callable

from cachewarden.proxy.engine.index.memory import MemoryIndex

SCOPE = "tenant|openai-chat|gpt-4o|{}"
VOCAB = 200_000
SYSTEM = 1_203
PROMPT = 4_000
SHARED = 3_600
TAIL = 120


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(n)]


def _per_call(fn: Callable[[], object], repeat: int = 7, number: int = 50) -> float:
    """Best-of-``repeat`` mean seconds per call (the minimum filters scheduler noise)."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number)
    return min(runs)


def _build(stored: int, rng: random.Random, system: list[int], query: list[int]) -> MemoryIndex:
    index = MemoryIndex()
    now = 0.0
    for _ in range(stored - 10):
        index.insert(SCOPE, [*system, *_tokens(rng, TAIL)], now=now)
        now += 0.001
    for _ in range(10):
        # Earlier turns of the query's conversation: same first 3,600 tokens, then another tail.
        tail = _tokens(rng, 50)
        tail[0] = (query[SHARED] + 1) % VOCAB
        index.insert(SCOPE, [*query[:SHARED], *tail], now=now)
        now += 0.001
    return index


def _memory_per_million_tokens(rng: random.Random, system: list[int]) -> tuple[float, int]:
    prompts = [[*system, *_tokens(rng, 800)] for _ in range(1_500)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    index = MemoryIndex()
    for i, p in enumerate(prompts):
        index.insert(SCOPE, p, now=float(i))
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    tokens = index.stats().tokens
    return held / tokens * 1e6, tokens


def main() -> None:
    rng = random.Random(7)
    system = _tokens(rng, SYSTEM)
    query = [*system, *_tokens(rng, PROMPT - SYSTEM)]
    rows: list[tuple[int, float, float, float, float]] = []
    for stored in (10, 1_000, 100_000):
        started = time.perf_counter()
        index = _build(stored, rng, system, query)
        build = time.perf_counter() - started
        match = index.lookup(SCOPE, query, now=200.0, ttl=300)
        assert match.common_prefix_tokens == SHARED, match
        lookup = _per_call(lambda index=index: index.lookup(SCOPE, query, now=200.0, ttl=300))  # type: ignore[misc]
        # Insert of a new turn (shares 90%) and of a cold prompt of the same size.
        warm = [[*query[:SHARED], *_tokens(rng, PROMPT - SHARED)] for _ in range(50)]
        cold = [_tokens(rng, PROMPT) for _ in range(50)]
        t0 = time.perf_counter()
        for p in warm:
            index.insert(SCOPE, p, now=201.0)
        t1 = time.perf_counter()
        for p in cold:
            index.insert(SCOPE, p, now=201.0)
        t2 = time.perf_counter()
        rows.append((stored, lookup, (t1 - t0) / len(warm), (t2 - t1) / len(cold), build))
        del index

    base = rows[0][1]
    print(f"prefix index, {PROMPT:,}-token prompt sharing {SHARED:,} tokens; block size 16")
    print(
        f"{'stored':>9} {'lookup µs':>10} {'vs 10':>6} {'insert warm µs':>15} "
        f"{'insert cold µs':>15} {'build s':>8}"
    )
    for stored, lookup, warm_s, cold_s, build in rows:
        print(
            f"{stored:>9,} {lookup * 1e6:>10.0f} {lookup / base:>6.2f} {warm_s * 1e6:>15.0f} "
            f"{cold_s * 1e6:>15.0f} {build:>8.1f}"
        )
    per_million, tokens = _memory_per_million_tokens(rng, system)
    print(f"memory: {per_million / 2**20:.1f} MiB per million tokens held ({tokens:,} tokens, tracemalloc)")


if __name__ == "__main__":
    main()
