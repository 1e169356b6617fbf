"""Benchmark of the proxy's per-request analysis (the CPU it takes from the event loop's GIL).

Workload (an OpenAI chat agent): a 20 KB system prompt, 14 tools with JSON schemas, then a task and
one tool call + tool result more per request; several conversations interleaved, each body a byte
prefix extension of its conversation's previous one (~97% shared), ~40-50 KB and ~10k tokens.

Stages, each timed over the same requests (best of a few runs, a fresh engine per run):

- ``baseline``: ``json.loads`` + tiktoken ``encode_ordinary`` of the body text: the irreducible work
  of reading and tokenizing a body without any memo (for scale: a ratio below 1 means the analysis
  costs less than tokenizing the body once).
- ``load+parse``: ``load_body`` + ``parse_request``.
- ``analyse``: ``Engine.analyse`` of the parsed prompts.
- ``attribute``: ``attribute`` on the analyses the previous stage produced.
- ``hook``: the whole ``EngineAnalyzer.request`` (what the proxy runs per request).

Run: ``python bench/bench_engine.py`` — prints a table, writes nothing. About 15 s on 2 cores.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from cachewarden.proxy.engine.adapters import load_body, parse_request
from cachewarden.proxy.engine.engine import Analysis, Engine
from cachewarden.proxy.engine.prompt import Prompt
from cachewarden.proxy.engine.tokenizers import get_tokenizer
from cachewarden.proxy.explain.attribution import attribute
from cachewarden.proxy.server.analysis import EngineAnalyzer
from cachewarden.proxy.server.hooks import Flow, Timings
from cachewarden.proxy.server.metrics import Metrics

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workload import dumps, text, tool_turn, tools

MODEL = "gpt-4o"
CONVERSATIONS = 6
FIRST_TURN = 2  # tool call + result pairs already in the first measured body (~40 KB)
TURNS = 10  # requests measured per conversation (bodies grow to ~50 KB)
RUNS = 7


def workload(seed: int = 1) -> list[bytes]:
    """The bodies in arrival order: the conversations' requests interleaved round-robin."""
    rng = random.Random(seed)
    defs = tools(rng)
    names = [t["function"]["name"] for t in defs]
    head = dumps({"model": MODEL, "tools": defs})[:-1]
    system = dumps({"role": "system", "content": text(rng, 20_000)})
    conversations: list[list[bytes]] = []
    for c in range(CONVERSATIONS):
        task = dumps({"role": "user", "content": f"Conversation {c}. " + text(rng, 1_800)})
        turns: list[str] = []
        bodies = []
        for t in range(FIRST_TURN + TURNS):
            if t >= FIRST_TURN:
                messages = ",".join([system, task, *turns])
                bodies.append(f'{head},"messages":[{messages}],"prompt_cache_key":"c-{c}"}}'.encode())
            turns += tool_turn(rng, names, f"call_{c}_{t}")
        conversations.append(bodies)
    return [conv[t] for t in range(TURNS) for conv in conversations]


def _flow(i: int, body: bytes) -> Flow:
    return Flow(
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
        timings=Timings(received=0.0, received_at=1_000.0 + i),
    )


def _best(run: Callable[[], float]) -> float:
    """Best-of-RUNS seconds for one pass (each run sets up its own state: a fresh engine)."""
    return min(run() for _ in range(RUNS))


def main() -> None:
    bodies = workload()
    n = len(bodies)
    tok = get_tokenizer("o200k_base")
    sizes = sorted(len(b) for b in bodies)
    counts = sorted(len(tok.encode(b.decode())) for b in bodies)

    def baseline() -> float:
        start = time.perf_counter()
        for body in bodies:
            json.loads(body)
            tok.encode(body.decode())
        return time.perf_counter() - start

    def load_parse() -> float:
        start = time.perf_counter()
        for body in bodies:
            parse_request(load_body(body), provider="openai-chat")
        return time.perf_counter() - start

    prompts: list[Prompt] = [parse_request(load_body(b), provider="openai-chat") for b in bodies]
    analyses: list[Analysis] = []

    def analyse() -> float:
        engine = Engine()
        analyses.clear()
        start = time.perf_counter()
        for i, prompt in enumerate(prompts):
            analyses.append(engine.analyse(prompt, tenant="bench", now=1_000.0 + i))
        return time.perf_counter() - start

    def attribution() -> float:
        engine = Engine()
        done = [engine.analyse(p, tenant="bench", now=1_000.0 + i) for i, p in enumerate(prompts)]
        start = time.perf_counter()
        for analysis in done:
            attribute(analysis, engine.prices)
        return time.perf_counter() - start

    def hook() -> float:
        analyzer = EngineAnalyzer(Engine(), Metrics())
        flows = [_flow(i, body) for i, body in enumerate(bodies)]
        start = time.perf_counter()
        for flow in flows:
            analyzer.request(flow)
        return time.perf_counter() - start

    # Warm up once: tokenizer, rule files, price table.
    hook()
    rows: Sequence[tuple[str, float]] = [
        ("baseline (json.loads + encode_ordinary)", _best(baseline)),
        ("load_body + parse_request", _best(load_parse)),
        ("Engine.analyse", _best(analyse)),
        ("attribute", _best(attribution)),
        ("EngineAnalyzer.request (whole hook)", _best(hook)),
    ]
    cached = sum(a.prediction.cached_tokens for a in analyses)
    hits = cached / max(1, sum(a.tokenized.count for a in analyses))
    print(
        f"{n} requests ({CONVERSATIONS} conversations x {TURNS}), "
        f"bodies {sizes[0] / 1e3:.0f}-{sizes[-1] / 1e3:.0f} KB "
        f"(median {sizes[n // 2] / 1e3:.0f} KB, {counts[n // 2]:,} tokens), predicted cached share {hits:.0%}"
    )
    base = rows[0][1]
    print(f"{'stage':<40} {'ms/request':>10} {'requests/s':>11} {'x baseline':>11}")
    for name, seconds in rows:
        print(f"{name:<40} {seconds / n * 1e3:>10.3f} {n / seconds:>11.0f} {seconds / base:>11.2f}")


if __name__ == "__main__":
    main()
