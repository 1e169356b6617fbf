"""Anthropic counting rules found on the held-out project's "dev" half (bench/bench_counting.py).

Record cases read ../shared/data/recorded/interactions.jsonl in place (third-party data) and skip
where it is absent; the "final" half of the held-out project is never used here. Claude counts are
estimates (o200k x family ratio), so a record case asserts the mechanical rule exactly (what the
counter charges for a part) and the estimate within a tolerance of the reported count.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "recorded" / "interactions.jsonl"
TOOL_SEARCH = "pydantic/pydantic-ai:tests/cassettes/test_tool_search/"
NOT_REFERENCED = TOOL_SEARCH + "test_tool_search_eval[anthropic].yaml#1"
REFERENCED = TOOL_SEARCH + "test_anthropic_custom_callable_round_trip.yaml#1"

WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
RATE = {
    "name": "get_exchange_rate",
    "description": "Look up the current exchange rate between two currencies.",
    "input_schema": {
        "type": "object",
        "properties": {"from_currency": {"type": "string"}, "to_currency": {"type": "string"}},
    },
}


def count(body: dict[str, Any], model: str | None = None) -> int:
    prompt = parse_request(body, provider="anthropic", model=model)
    return PromptCounter(load_model_table()).tokenize(prompt).count


def stream(body: dict[str, Any]) -> int:
    """Stream tokens (before the family ratio): what a rule adds, without the ratio's rounding."""
    tp = PromptCounter(load_model_table()).tokenize(parse_request(body, provider="anthropic"))
    return len(tp.tokens) + tp.hidden


def body(tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "tools": tools, "messages": messages}


ASK = {"role": "user", "content": "What is the USD to EUR exchange rate?"}


def found(reference: dict[str, Any]) -> list[dict[str, Any]]:
    """A search call and its result holding ``reference`` (a tool_reference, or what stands for it)."""
    call = {"type": "tool_use", "id": "t1", "name": "search_tools", "input": {"q": "rate"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [reference]}
    return [ASK, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]


def test_deferred_tool_costs_nothing_until_referenced() -> None:
    deferred = {**RATE, "defer_loading": True}
    assert count(body([WEATHER, deferred], [ASK])) == count(body([WEATHER], [ASK]))
    # Nor is it in the cached prefix: the tools section is the same as without it.
    with_it = parse_request(body([WEATHER, deferred], [ASK]), provider="anthropic")
    without = parse_request(body([WEATHER], [ASK]), provider="anthropic")
    assert [s.digest for s in with_it.segments] == [s.digest for s in without.segments]


def test_tool_reference_loads_the_deferred_definition() -> None:
    deferred = {**RATE, "defer_loading": True}
    reference = {"type": "tool_reference", "tool_name": "get_exchange_rate"}
    # The definition (without defer_loading) is counted where the reference is.
    inline = {"type": "text", "text": json.dumps(RATE, separators=(",", ":"), ensure_ascii=False)}
    loaded = stream(body([WEATHER, deferred], found(reference)))
    assert loaded == stream(body([WEATHER, deferred], found(inline)))
    assert loaded > stream(body([WEATHER, deferred], found({"type": "text", "text": "-"}))) + 20
    # A reference to a tool that is not deferred loads nothing: it is the block's JSON.
    as_json = {"type": "text", "text": json.dumps(reference, separators=(",", ":"))}
    assert stream(body([WEATHER, RATE], found(reference))) == stream(body([WEATHER, RATE], found(as_json)))


@cache
def recorded() -> dict[str, dict[str, Any]]:
    wanted = {NOT_REFERENCED, REFERENCED}
    out: dict[str, dict[str, Any]] = {}
    with DATA.open(encoding="utf-8") as fh:
        for line in fh:
            if "defer_loading" in line:
                rec = json.loads(line)
                if rec["source"] in wanted:
                    out[rec["source"]] = rec
    return out


@pytest.mark.skipif(not DATA.exists(), reason="recorded provider data not present")
@pytest.mark.parametrize("source", [NOT_REFERENCED, REFERENCED])
def test_recorded_tool_search_requests(source: str) -> None:
    rec = recorded()[source]
    req = rec["request"]
    assert any(t.get("defer_loading") for t in req["tools"])
    counted = count(req, rec.get("response_model"))
    # Counting every tool in the tools section was 8.6% (887) / 5.4% (950) over. Not referenced, the
    # deferred tool costs nothing and the estimate is within 1%; loaded by a reference it is still
    # under-counted (922 for 950: on the dev records a loaded tool costs 14-33 stream tokens more than
    # its JSON; a constant for it would be fitted on held-out records, so it is not modelled), within 3%.
    tolerance = 0.01 if source == NOT_REFERENCED else 0.03
    assert abs(counted - rec["total_input_tokens"]) <= tolerance * rec["total_input_tokens"]
    if source == NOT_REFERENCED:
        kept = {**req, "tools": [t for t in req["tools"] if not t.get("defer_loading")]}
        assert counted == count(kept, rec.get("response_model"))
