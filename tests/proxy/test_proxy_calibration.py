"""Online calibration of estimated (Claude) token counts from the usage Anthropic reports."""

from __future__ import annotations

import json
from typing import Any

from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.usage import Usage
from cachewarden.proxy.server.analysis import EngineAnalyzer
from cachewarden.proxy.server.metrics import Metrics
from flow_support import request_flow
from prometheus_client import generate_latest

POLICY = " ".join(f"Clause {i} covers refunds for fare class {i % 7}." for i in range(400))


def _usage(total: int) -> Usage:
    return Usage(input_total=total, cached=0, cache_write=0, cache_write_1h=0, uncached=total, output=1)


def _body(turn: int) -> bytes:
    body: dict[str, Any] = {
        "model": "claude-sonnet-5",
        "max_tokens": 16,
        "system": POLICY,
        "messages": [{"role": "user", "content": f"question {turn}"}],
    }
    return json.dumps(body).encode()


def test_reported_usage_pulls_the_ratio_towards_the_truth() -> None:
    engine = Engine()
    analyzer = EngineAnalyzer(engine, Metrics())
    first = request_flow(_body(0), 0, "anthropic")
    analyzer.request(first)
    predicted = first.metadata["analysis"].tokenized.count
    start_ratio = first.metadata["analysis"].tokenized.ratio
    # The provider reports 30% more input tokens than the shipped ratio predicts.
    truth = round(predicted * 1.3)
    for n in range(40):
        flow = request_flow(_body(n), n, "anthropic")
        analyzer.request(flow)
        flow.usage = Usage(
            input_total=truth, cached=0, cache_write=0, cache_write_1h=0, uncached=truth, output=1
        )
        analyzer.response(flow)
    learned = engine.counter.ratio_for("claude-sonnet-5", start_ratio)
    assert learned > start_ratio * 1.2
    final = request_flow(_body(99), 99, "anthropic")
    analyzer.request(final)
    assert abs(final.metadata["analysis"].tokenized.count - truth) / truth < 0.05


def test_exact_tokenizers_are_not_calibrated() -> None:
    engine = Engine()
    analyzer = EngineAnalyzer(engine, Metrics())
    body = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": POLICY}]}).encode()
    flow = request_flow(body, 0, "anthropic")
    flow.route, flow.provider, flow.upstream = "openai-chat", "openai-chat", "openai"
    analyzer.request(flow)
    count = flow.metadata["analysis"].tokenized.count
    flow.usage = Usage(
        input_total=count * 2, cached=0, cache_write=0, cache_write_1h=0, uncached=count * 2, output=1
    )
    analyzer.response(flow)
    assert engine.counter.ratio_for("gpt-4.1", 1.0) == 1.0


def test_a_ratio_that_explains_every_report_does_not_drift() -> None:
    # The provider counts exactly as the shipped ratio does (the emulator): each report rounds
    # stream × ratio, so report / stream is off by up to half a token. The ratio must stay put,
    # or later predictions drift by a token and read as unexplained misses.
    engine = Engine()
    analyzer = EngineAnalyzer(engine, Metrics())
    start = None
    for n in range(40):
        flow = request_flow(_body(n * 7919), n, "anthropic")
        analyzer.request(flow)
        tokenized = flow.metadata["analysis"].tokenized
        start = tokenized.ratio if start is None else start
        assert tokenized.ratio == start
        flow.usage = _usage(tokenized.count)  # the exact count of the shipped ratio
        analyzer.response(flow)
    assert engine.counter.ratio_for("claude-sonnet-5", -1.0) in (-1.0, start)


def _tools_body(turn: int, tool: str = "lookup") -> dict[str, Any]:
    return {
        "model": "gpt-4.1",
        "tools": [{"type": "function", "function": {"name": tool, "parameters": {"type": "object"}}}],
        "messages": [{"role": "system", "content": POLICY}, {"role": "user", "content": f"question {turn}"}],
    }


def test_offset_per_tool_set_makes_the_next_count_exact() -> None:
    engine = Engine()
    metrics = Metrics()
    analyzer = EngineAnalyzer(engine, metrics)
    first = request_flow(json.dumps(_tools_body(0)).encode(), 0)
    analyzer.request(first)
    raw = first.metadata["count"].raw
    # The provider's rendering of this tool set costs 7 tokens more than the counter's.
    first.usage = _usage(raw + 7)
    analyzer.response(first)
    assert first.metadata["access_count"] == {"counted": raw, "calibrated": raw, "reported": raw + 7}
    second = request_flow(json.dumps(_tools_body(1)).encode(), 1)
    analyzer.request(second)
    count = second.metadata["count"]
    assert count.learned and count.count == count.raw + 7
    assert second.metadata["predicted_usage"].input_total == count.raw + 7
    # Another tool set, or another tenant, starts from the raw count.
    other = request_flow(json.dumps(_tools_body(1, tool="other")).encode(), 2)
    analyzer.request(other)
    assert other.metadata["count"].offset == 0
    stranger = request_flow(json.dumps(_tools_body(1)).encode(), 3, tenant="u")
    analyzer.request(stranger)
    assert stranger.metadata["count"].offset == 0
    second.usage = _usage(count.raw + 7)
    analyzer.response(second)
    text = generate_latest(metrics.registry).decode()
    # Two observations per stage: raw 7 tokens off both times, calibrated 7 off once and then exact
    # (the histogram has negative buckets, so it exports no _sum: the bucket le="0.0" tells).
    lines = text.splitlines()

    def at_most_zero(stage: str) -> str:
        prefix = "cachewarden_count_error_tokens_bucket{"
        return next(ln for ln in lines if ln.startswith(prefix) and 'le="0.0"' in ln and f'"{stage}"' in ln)

    assert at_most_zero("raw").endswith(" 0.0") and at_most_zero("calibrated").endswith(" 1.0")


def test_calibration_memory_is_bounded() -> None:
    engine = Engine()
    analyzer = EngineAnalyzer(engine, Metrics())
    analyzer.calibration.max_entries = 5
    for n in range(20):
        flow = request_flow(json.dumps(_tools_body(0, tool=f"t{n}")).encode(), n)
        analyzer.request(flow)
        flow.usage = _usage(flow.metadata["count"].raw + 3)
        analyzer.response(flow)
    assert len(analyzer.calibration) == 5
