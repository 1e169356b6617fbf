"""Self-calibration of counts (engine/calibration.py): keys, offsets, ratios, bounds."""

from __future__ import annotations

from typing import Any

from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.calibration import CountCalibration, fixed_digest
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def chat(*turns: str, tools: list[Any] | None = None, system: str = "Be brief.") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": system}, *({"role": "user", "content": t} for t in turns)],
    }
    if tools is not None:
        body["tools"] = tools
    return body


def test_the_key_follows_the_fixed_parts_not_the_conversation() -> None:
    key = fixed_digest(parse_request(chat("a", tools=[TOOL])))
    assert fixed_digest(parse_request(chat("a", "b", "c", tools=[TOOL]))) == key  # grows: same key
    assert fixed_digest(parse_request(chat("a"))) != key  # no tools
    assert fixed_digest(parse_request(chat("a", tools=[TOOL], system="Be long."))) != key
    assert fixed_digest(parse_request({**chat("a", tools=[TOOL]), "model": "gpt-4o"})) != key


def test_an_offset_is_learned_per_tenant_and_applied() -> None:
    counter = PromptCounter(load_model_table())
    calibration = CountCalibration(counter)
    first = parse_request(chat("a", tools=[TOOL]))
    tp = counter.tokenize(first)
    assert not calibration.apply("t", first, tp).learned
    calibration.observe("t", first, tp, tp.count + 5, exact=True)
    later = parse_request(chat("a", "b", tools=[TOOL]))
    got = calibration.apply("t", later, counter.tokenize(later))
    assert got.learned and got.offset == 5
    assert calibration.apply("u", later, counter.tokenize(later)).offset == 0
    # A difference too large to be a rendering error (server-side content) is not learned.
    calibration.observe("t", first, tp, tp.count * 3, exact=True)
    assert calibration.apply("t", later, counter.tokenize(later)).offset == 5


def test_estimated_counts_learn_the_ratio_first() -> None:
    counter = PromptCounter(load_model_table())
    calibration = CountCalibration(counter)
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "system": "policy " * 400, "messages": []}
    body["messages"] = [{"role": "user", "content": "hi"}]
    prompt = parse_request(body, provider="anthropic")
    tp = counter.tokenize(prompt)
    before = counter.ratio_for("claude-sonnet-4-5", tp.ratio)
    calibration.observe("t", prompt, tp, round(tp.count * 1.2), exact=False)
    assert counter.ratio_for("claude-sonnet-4-5", tp.ratio) > before
    assert len(calibration) == 1
