"""Reasons from the cache model and the index: cold, expired, below-minimum, no-breakpoint, too far."""

from __future__ import annotations

from typing import Any

import pytest
from bodies import FORMATS, NEXT_TURNS, TURNS, build, codes, diff, engine
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.explain.attribution import attribute

LONGER = TURNS + NEXT_TURNS


@pytest.mark.parametrize("fmt", FORMATS)
def test_first_request_is_cold(fmt: str) -> None:
    eng = engine()
    analysis = eng.analyse(parse_request(build(fmt), fmt), tenant="t", now=0)  # type: ignore[arg-type]
    reasons = attribute(analysis, eng.prices)
    assert [r.code for r in reasons] == ["cold"]
    assert reasons[0].tokens_lost == 0


def test_other_tenant_is_cold() -> None:
    eng = engine()
    eng.analyse(parse_request(build("openai-chat")), tenant="a", now=0)
    analysis = eng.analyse(parse_request(build("openai-chat", LONGER)), tenant="b", now=1)
    assert [r.code for r in attribute(analysis, eng.prices)] == ["cold"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_expired(fmt: str) -> None:
    eng = engine()
    eng.analyse(parse_request(build(fmt), fmt), tenant="t", now=0)  # type: ignore[arg-type]
    analysis = eng.analyse(parse_request(build(fmt, LONGER), fmt), tenant="t", now=100_000)  # type: ignore[arg-type]
    reasons = attribute(analysis, eng.prices)
    assert [r.code for r in reasons] == ["expired"]
    assert reasons[0].tokens_lost >= 0.9 * analysis.previous.tokenized.count  # type: ignore[union-attr]
    assert reasons[0].usd_lost > 0


def _short(fmt: str) -> dict[str, Any]:
    return build(fmt, [("user", "Hello there!")], system="You are terse.", tools=None)


@pytest.mark.parametrize("fmt", FORMATS)
def test_below_minimum(fmt: str) -> None:
    short = _short(fmt)
    report = diff(fmt, short, short)
    assert codes(report) == ["below-minimum"]
    assert report.next.prediction.cached_tokens == 0
    assert report.reasons[0].tokens_lost > 0


def test_no_breakpoint_without_cache_control() -> None:
    previous = build("anthropic", cache_last=False)
    del previous["system"][-1]["cache_control"]
    following = build("anthropic", LONGER, cache_last=False)
    del following["system"][-1]["cache_control"]
    report = diff("anthropic", previous, following)
    assert codes(report) == ["no-breakpoint"]
    assert report.reasons[0].tokens_lost > 2000


def test_no_breakpoint_is_kept_beside_a_change_when_nothing_was_ever_written() -> None:
    previous = build("anthropic", cache_last=False)
    del previous["system"][-1]["cache_control"]
    later = list(LONGER)
    later[3] = ("assistant", "Rewritten answer.")
    following = build("anthropic", later, cache_last=False)
    del following["system"][-1]["cache_control"]
    report = diff("anthropic", previous, following)
    assert codes(report) == ["history-edited", "no-breakpoint"]


def test_breakpoint_too_far() -> None:
    # 30 new blocks after the previous breakpoint, and the next breakpoint only on the last one:
    # the 20-block lookback does not reach back to the entry the previous request wrote.
    many = [("user", f"Note {i}: the customer adds a detail.") for i in range(30)]
    previous = build("anthropic")
    del previous["system"][-1]["cache_control"]
    following = build("anthropic", [*TURNS, ("assistant", "Noted."), *many])
    del following["system"][-1]["cache_control"]
    report = diff("anthropic", previous, following)
    assert codes(report) == ["breakpoint-too-far"]
    assert report.reasons[0].tokens_lost > 2000


def test_automatic_caching_appended_turn_reports_nothing() -> None:
    previous = build("anthropic", cache_last=False)
    previous["cache_control"] = {"type": "ephemeral"}
    following = build("anthropic", LONGER, cache_last=False)
    following["cache_control"] = {"type": "ephemeral"}
    assert diff("anthropic", previous, following).reasons == []
