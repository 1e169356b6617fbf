"""bench/bench_counting_rules.py: a rule turned off is off for the block only, and the shapes pick the
bodies each rule is about. Synthetic bodies (no third-party data)."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from cachewarden.proxy.engine import framing
from cachewarden.proxy.engine.framing import framing_for

BENCH = Path(__file__).resolve().parents[2] / "bench"


@cache
def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # it imports bench_counting
    spec = importlib.util.spec_from_file_location("bench_counting_rules", BENCH / "bench_counting_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_rule_is_off_inside_the_block_and_back_after() -> None:
    before = dict(framing.FRAMING)
    with _bench()._without({"parallel_wrapper": False}):
        assert not framing_for("openai-chat", "gpt-4o").parallel_wrapper
        assert not framing_for("openai-chat", "gpt-5-mini").parallel_wrapper
    assert before == framing.FRAMING
    assert framing_for("openai-chat", "gpt-4o").parallel_wrapper


def test_shapes() -> None:
    bench = _bench()
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    merging = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    two = {"role": "assistant", "tool_calls": [call, {**call, "id": "d"}]}
    assert bench._parallel({"model": "gpt-4o", "messages": [two]})
    assert not bench._parallel({"model": "gpt-4o", "messages": [{"role": "assistant", "tool_calls": [call]}]})
    result = {"role": "tool", "tool_call_id": "c", "content": "4"}
    splitting = {"model": "gpt-4o", "messages": [{"role": "assistant", "tool_calls": [call]}, result]}
    assert bench._splitting_result(splitting)
    merged = {"model": "gpt-4o", "messages": [{"role": "assistant", "tool_calls": [merging]}, result]}
    assert not bench._splitting_result(merged)
    strict = {"type": "json_schema", "json_schema": {"name": "R", "strict": True, "schema": {}}}
    assert bench._strict({"response_format": strict})
    assert not bench._strict({"response_format": {"type": "json_schema", "json_schema": {"name": "R"}}})
    assert bench._named({"messages": [{"role": "user", "name": "u", "content": "x"}]})
    assert bench._text_then_call({"messages": [{"role": "assistant", "content": "ok", "tool_calls": [call]}]})
