"""Engine cost per request against the length of the conversation: one new turn on 10, 100, 1,000 messages.

An agent's next request repeats the previous one and appends a turn, so the work that is new per
request is the same whatever the history; a sidecar whose cost grows with the history gets slower
as every conversation goes on. This measures that growth for the offline stages of one request:

- ``parse``: ``load_body`` + ``ConversationReader.parse`` (body bytes → Prompt, each body read from
  where it parts from the previous one, as the proxy and replay read them); ``scratch parse`` is
  ``load_body`` + ``parse_request``, the whole body every time, for comparison (not in the total,
  and timed in a pass of its own after the others, so that its garbage lands on none of them);
- ``analyse``: ``Engine.analyse`` (token stream, index lookup and insert, prediction);
- ``attribute``: the reasons of the (few) misses.

Each history length runs the same number of requests (a conversation that gains one user turn per
request on a 2,000-character system prompt and 5 tools, ~100-character turns), each on its own
engine, the three conversations' requests taking turns (so that a slow spell of a shared machine
does not land on one row only), medians over the measured requests after a warm-up
(``--sequential``: each conversation whole, one after the other, as the first version measured).
The figure to read is the ratio of 1,000 messages to 10: the goal (issue #14) is at most 1.5x;
1.0 would mean the cost does not depend on the history at all. Taking turns, every conversation
also meets caches the others have just used, as a proxy serving many conversations does; alone,
the short one stays warm in them, and its ratio reads higher.

``--body effort`` sends the same conversations to ``gpt-5`` with ``reasoning_effort`` (a parameter
that salts the scoped index's stream: its scope, for OpenAI); ``--body anthropic`` as Anthropic
Messages bodies (system, tools, messages; breakpoint predictions, with their marks). The goal is
read on the default, ``chat``.

``--one-tenant N`` measures instead N conversations of one tenant (one API key, so one scope)
taking turns on one engine, against one conversation alone in the same run: each request should
start from its own conversation's previous one, not from whichever request of the tenant came last.

Run: ``python bench/bench_engine_history.py [--requests N] [--sequential | --one-tenant N]
[--body chat|effort|anthropic]`` — prints a table, writes nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cachewarden.proxy.engine.adapters import load_body, parse_request
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.prompt import Provider
from cachewarden.proxy.engine.reading import ConversationReader
from cachewarden.proxy.explain.attribution import attribute

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workload import text, tools

HISTORY = (10, 100, 1_000)
WARMUP = 5
GOAL_RATIO = 1.5


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    return body


def _effort(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "model": "gpt-5", "reasoning_effort": "low"}


def _anthropic(body: dict[str, Any]) -> dict[str, Any]:
    fns = [t["function"] for t in body["tools"]]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": body["messages"][0]["content"],
        "tools": [
            {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]} for f in fns
        ],
        "messages": body["messages"][1:],
    }


# --body: (the route's format, the chat body as that format sends it)
BODIES: dict[str, tuple[Provider, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "chat": ("openai-chat", _chat),
    "effort": ("openai-chat", _effort),
    "anthropic": ("anthropic", _anthropic),
}


def bodies(history: int, requests: int, seed: int = 1, body: str = "chat") -> list[bytes]:
    """``requests`` bodies of one conversation, the first with ``history`` messages, one more each,
    in the ``--body`` format ``body``."""
    shape = BODIES[body][1]
    rng = random.Random(seed)
    messages: list[dict[str, str]] = [{"role": "system", "content": text(rng, 2_000)}]
    for i in range(history - 1):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text(rng, 100)})
    defs = tools(rng, 5)
    out = []
    for _ in range(requests):
        out.append(json.dumps(shape({"model": "gpt-4o", "tools": defs, "messages": messages})).encode())
        messages = [*messages, {"role": "user", "content": text(rng, 100)}]
    return out


class _Conversation:
    """One history length's conversation on a fresh engine and reader, timed request by request."""

    def __init__(self, raw: Sequence[bytes], body: str = "chat") -> None:
        self.raw, self.route = raw, BODIES[body][0]
        self.engine, self.reader = Engine(), ConversationReader()
        self.stages: dict[str, list[float]] = {"parse": [], "analyse": [], "attribute": [], "scratch": []}

    def step(self, n: int) -> None:
        body, engine, reader = self.raw[n], self.engine, self.reader
        t0 = time.perf_counter()
        # As the proxy reads a body: parsed from where it extends the tenant's previous one, with
        # the format its route names.
        prompt = reader.parse(reader.load(body, tenant="bench"), self.route, tenant="bench")
        t1 = time.perf_counter()
        analysis = engine.analyse(prompt, tenant="bench", now=float(n))
        t2 = time.perf_counter()
        attribute(analysis, engine.prices)
        t3 = time.perf_counter()
        if n >= WARMUP:
            self.stages["parse"].append(t1 - t0)
            self.stages["analyse"].append(t2 - t1)
            self.stages["attribute"].append(t3 - t2)

    def scratch(self, n: int) -> None:
        """The whole body read from scratch, for comparison. Its own pass, after the measured one:
        at 1,000 messages it allocates ~15 ms of objects, and run between the measured stages that
        churn (caches, the garbage collector) would land on them, which the proxy never pays."""
        t0 = time.perf_counter()
        parse_request(load_body(self.raw[n]), self.route)
        if n >= WARMUP:
            self.stages["scratch"].append(time.perf_counter() - t0)

    def medians(self) -> dict[str, float]:
        """Median milliseconds per stage over the requests after the warm-up."""
        medians = {k: statistics.median(v) * 1000 for k, v in self.stages.items()}
        medians["total"] = medians["parse"] + medians["analyse"] + medians["attribute"]
        return medians


def measure_all(histories: Sequence[int], requests: int, body: str = "chat") -> dict[int, dict[str, float]]:
    """Every history length's medians, their requests taking turns (10, 100, 1,000, 10, ...): a
    shared machine's slow spell then falls on all of them alike, not on one row of the ratio."""
    conversations = {h: _Conversation(bodies(h, requests, body=body), body) for h in histories}
    for n in range(requests):
        for conversation in conversations.values():
            conversation.step(n)
    for n in range(requests):
        for conversation in conversations.values():
            conversation.scratch(n)
    return {h: c.medians() for h, c in conversations.items()}


def measure(raw: Sequence[bytes], body: str = "chat") -> dict[str, float]:
    """Median milliseconds per stage over the requests after the warm-up, on a fresh engine."""
    conversation = _Conversation(raw, body)
    for n in range(len(raw)):
        conversation.step(n)
    for n in range(len(raw)):
        conversation.scratch(n)
    return conversation.medians()


def measure_tenant(conversations: int, requests: int, body: str = "chat") -> tuple[float, float]:
    """Median ms (read + analyse) of a request of one 100-message conversation alone, and of one
    of ``conversations`` such conversations taking turns on one engine under one tenant (one API
    key: they share its scope), the two runs taking turns request by request."""
    route = BODIES[body][0]
    alone = (ConversationReader(), Engine(), [bodies(100, requests, seed=1, body=body)])
    many = (
        ConversationReader(),
        Engine(),
        [bodies(100, requests, seed=s, body=body) for s in range(conversations)],
    )
    samples: tuple[list[float], list[float]] = ([], [])
    for n in range(requests):
        for (reader, engine, raws), out in zip((alone, many), samples, strict=True):
            for raw in raws:
                t0 = time.perf_counter()
                prompt = reader.parse(reader.load(raw[n], tenant="one-key"), route, tenant="one-key")
                engine.analyse(prompt, tenant="one-key", now=float(n))
                if n >= WARMUP:
                    out.append(time.perf_counter() - t0)
    return statistics.median(samples[0]) * 1000, statistics.median(samples[1]) * 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=40, help="requests per history length")
    parser.add_argument(
        "--sequential", action="store_true", help="each history's requests in one stretch, not taking turns"
    )
    parser.add_argument(
        "--one-tenant",
        type=int,
        metavar="N",
        help="instead: N conversations of 100 messages taking turns under one tenant, against one alone",
    )
    parser.add_argument(
        "--body", choices=sorted(BODIES), default="chat", help="the bodies' format (see above)"
    )
    args = parser.parse_args(argv)
    if args.one_tenant:
        alone, many = measure_tenant(args.one_tenant, args.requests + WARMUP, args.body)
        n = args.one_tenant
        print(f"read + analyse a request, 100 messages: one conversation {alone:.3f} ms; one of")
        print(f"{n} conversations of one tenant taking turns {many:.3f} ms ({many / alone:.2f}x)")
        return 0
    if args.sequential:
        results = {h: measure(bodies(h, args.requests + WARMUP, body=args.body), args.body) for h in HISTORY}
    else:
        results = measure_all(HISTORY, args.requests + WARMUP, args.body)
    header = ("messages", "body KB", "scratch parse", "parse ms", "analyse ms", "attribute ms", "total ms")
    print(" ".join(f"{h:>13}" for h in header))
    for h, r in results.items():
        size = len(bodies(h, 1, body=args.body)[0]) / 1024
        cells = [
            f"{h:,}",
            f"{size:.0f}",
            *(f"{r[k]:.3f}" for k in ("scratch", "parse", "analyse", "attribute", "total")),
        ]
        print(" ".join(f"{c:>13}" for c in cells))
    ratio = results[HISTORY[-1]]["total"] / results[HISTORY[0]]["total"]
    verdict = "met" if ratio <= GOAL_RATIO else "not met"
    print(f"\ncost at {HISTORY[-1]:,} messages / at {HISTORY[0]}: {ratio:.1f}x", end=" ")
    print(f"(goal <= {GOAL_RATIO}x: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
