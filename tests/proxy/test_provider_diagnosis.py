"""cachewarden's first reason against Anthropic's coarse diagnosis types (provider-caching.md §2.7)."""

from __future__ import annotations

from cachewarden.proxy.explain.attribution import Reason
from cachewarden.proxy.explain.provider_diagnosis import coarse, compare, provider_type


def _reason(code: str, segment: str | None = None) -> Reason:
    return Reason(code, segment, None, 100, 0.0, "")


def test_provider_values_map_to_bounded_types() -> None:
    assert provider_type(None) == "none"
    assert provider_type({"cache_miss_reason": None}) == "inconclusive"
    miss = {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 5}}
    assert provider_type(miss) == "tools_changed"
    assert provider_type({"cache_miss_reason": {"type": "something_new"}}) == "unavailable"


def test_finer_reasons_take_the_area_they_were_found_in() -> None:
    assert coarse(_reason("tools-reordered", "tools[1]")) == "tools_changed"
    assert coarse(_reason("timestamp", "system[0]")) == "system_changed"
    assert coarse(_reason("key-order", "tools[0]")) == "tools_changed"
    assert coarse(_reason("unique-id", "messages[3].content[0]")) == "messages_changed"
    assert coarse(_reason("history-truncated", "messages[0]")) == "messages_changed"
    assert coarse(_reason("params-changed")) == "unavailable"
    assert coarse(_reason("expired")) == "none" and coarse(None) == "none"


def test_compare() -> None:
    miss = {"cache_miss_reason": {"type": "system_changed", "cache_missed_input_tokens": 900}}
    found = compare(miss, [_reason("timestamp", "system[0]"), _reason("content-changed", "messages[1]")])
    assert found.agrees and found.reason == "timestamp" and found.provider == "system_changed"
    assert not compare(miss, [_reason("tools-changed", "tools[0]")]).agrees
    assert compare(None, []).agrees
    assert compare(None, [_reason("cold")]).agrees  # Anthropic may know a conversation we never saw
