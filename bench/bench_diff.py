"""How long `cachewarden diff` takes on two 400 KB requests, and attribution's share of per-request analysis.

Three figures:
- diff, cold: what the command does (parse both bodies, a fresh Engine, analyse both, attribute);
- diff, warm: the same with the tokenizer memo already holding the segments (the proxy's steady state);
- attribution share: ``attribute`` against ``Engine.analyse`` for the same request, as the proxy runs
  them one after the other, for a miss that forces the full classification (a timestamp at the top of
  a 400 KB prompt, so every later segment is compared) and for an appended turn (the common case).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from cachewarden.proxy.cli.diff import DiffReport, diff_prompts
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.pricing import PriceTable
from cachewarden.proxy.explain.attribution import attribute

TARGET_BYTES = 400_000


def conversation(stamp: str, extra_turns: int = 0) -> dict[str, Any]:
    """An agent conversation of about 400 KB: tools, a long policy, many tool-call turns."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Tool number {i}: does one precise thing to the order system.",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}, "note": {"type": "string"}},
                    "required": ["order_id"],
                },
            },
        }
        for i in range(20)
    ]
    policy = "\n".join(
        f"Rule {i}: answer precisely, cite the policy, never guess about orders." for i in range(200)
    )
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"Current time: {stamp}\n{policy}"}]
    turn = 0
    while len(json.dumps(messages)) < TARGET_BYTES or extra_turns > 0:
        if len(json.dumps(messages)) >= TARGET_BYTES:
            extra_turns -= 1
        call_id = f"call_{turn:06d}"
        args = json.dumps({"order_id": str(1000 + turn), "note": "check status"})
        messages += [
            {
                "role": "user",
                "content": f"Question {turn}: where is order {1000 + turn}? " + "Details. " * 40,
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "tool_1", "arguments": args}}
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": json.dumps({"status": "shipped", "turn": turn}),
            },
            {"role": "assistant", "content": f"Order {1000 + turn} has shipped. " + "Explanation. " * 30},
        ]
        turn += 1
    return {"model": "gpt-4o", "tools": tools, "messages": messages}


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def main() -> None:
    table, prices = load_model_table(), PriceTable.load()
    previous_body = conversation("2026-03-03T10:30:15Z")
    next_body = conversation("2026-03-03T10:31:02Z", extra_turns=1)
    appended_body = conversation("2026-03-03T10:30:15Z", extra_turns=1)
    sizes = [len(json.dumps(b).encode()) for b in (previous_body, next_body)]
    previous_raw, next_raw = json.dumps(previous_body), json.dumps(next_body)

    def cold_diff() -> DiffReport:
        engine = Engine(table=table, prices=prices)
        return diff_prompts(parse_request(previous_raw), parse_request(next_raw), engine)

    warm_engine = Engine(table=table, prices=prices)
    previous, following = parse_request(previous_raw), parse_request(next_raw)
    diff_prompts(previous, following, warm_engine)

    def warm_diff() -> DiffReport:
        return diff_prompts(
            previous, following, Engine(table=table, prices=prices, counter=warm_engine.counter)
        )

    cold = timed(cold_diff, 5)
    warm = timed(warm_diff, 10)
    report = cold_diff()
    reasons = report.reasons

    print(
        f"requests: {sizes[0] / 1000:.0f} KB and {sizes[1] / 1000:.0f} KB, {len(following.segments)} segments"
    )
    print(f"first reason: {reasons[0].code} at {reasons[0].segment}, {reasons[0].tokens_lost:,} tokens lost")
    print(f"diff, cold (parse + fresh engine + analyse x2 + attribute): {cold * 1000:8.1f} ms per diff")
    print(f"diff, warm tokenizer memo:                                  {warm * 1000:8.1f} ms per diff")

    for label, body in (
        ("timestamp at the top (full classification)", next_body),
        ("appended turn", appended_body),
    ):
        prompt = parse_request(body)
        analyse_times, attribute_times = [], []
        for _ in range(10):
            # A fresh index holding only PREVIOUS, so each run compares with it (the tokenizer memo is warm).
            engine = Engine(table=table, prices=prices, counter=warm_engine.counter)
            engine.analyse(previous, tenant="bench", now=0)
            started = time.perf_counter()
            analysis = engine.analyse(prompt, tenant="bench", now=1)
            middle = time.perf_counter()
            found = attribute(analysis, prices)
            analyse_times.append(middle - started)
            attribute_times.append(time.perf_counter() - middle)
        assert analysis.previous is not None and (found or body is appended_body)
        a, b = statistics.median(analyse_times), statistics.median(attribute_times)
        print(
            f"{label}: analyse {a * 1000:.1f} ms, attribute {b * 1000:.1f} ms "
            f"-> attribution is {b / (a + b):.0%} of per-request analysis"
        )


if __name__ == "__main__":
    main()
