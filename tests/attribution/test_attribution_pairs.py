"""Reason codes from pairs of realistic requests, in all three request formats."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from bodies import (
    EXTRA_TOOL,
    FORMATS,
    NEXT_TURNS,
    POLICY,
    TOOLS,
    TURNS,
    Body,
    build,
    codes,
    diff,
    with_system,
)

LONGER = TURNS + NEXT_TURNS


def system_path(fmt: str) -> str:
    return {"openai-chat": "messages[0]", "openai-responses": "instructions", "anthropic": "system[0]"}[fmt]


def tool_path(fmt: str, i: int) -> str:
    return f"tools[{i}]"


def first(report: Any) -> Any:
    assert report.reasons, "expected at least one reason"
    return report.reasons[0]


# -- negatives ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_identical_request_reports_nothing(fmt: str) -> None:
    report = diff(fmt, build(fmt), build(fmt))
    assert report.reasons == []
    assert report.divergence is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_appended_turn_reports_nothing(fmt: str) -> None:
    report = diff(fmt, build(fmt), build(fmt, LONGER))
    assert report.reasons == []
    assert report.divergence is None
    assert report.next.prediction.cached_tokens > 2000


def test_rolling_breakpoint_is_not_a_change() -> None:
    previous = build("anthropic")
    following = build("anthropic", LONGER)
    # The breakpoint moved from the previous last block to the new last block, and one more on a middle turn.
    following["messages"][3]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "5m"}
    report = diff("anthropic", previous, following)
    assert report.reasons == []
    assert report.divergence is None


def test_breakpoint_removed_from_an_earlier_block_is_not_a_change() -> None:
    previous = build("anthropic")
    following = build("anthropic", LONGER)
    del following["system"][-1]["cache_control"]
    report = diff("anthropic", previous, following)
    assert "history-edited" not in codes(report)
    assert report.divergence is None


@pytest.mark.parametrize("fmt", FORMATS)
def test_unchanged_timestamp_is_not_reported(fmt: str) -> None:
    stamped = "Today is Monday, 3 March 2026 at 10:30:15 UTC.\n\n" + POLICY
    report = diff(fmt, with_system(fmt, stamped), with_system(fmt, stamped, LONGER))
    assert report.reasons == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_unchanged_timestamp_beside_a_real_edit_is_not_a_timestamp(fmt: str) -> None:
    stamped = "Today is Monday, 3 March 2026 at 10:30:15 UTC.\n\n" + POLICY
    edited = stamped.replace("never promise what", "never guarantee what", 1)
    report = diff(fmt, with_system(fmt, stamped), with_system(fmt, edited, LONGER))
    assert codes(report) == ["system-changed"]


# -- volatile values ---------------------------------------------------------------------------------


STAMPS = [
    ("2026-03-03T10:30:15Z", "2026-03-03T10:31:02Z"),
    ("Mon, 03 Mar 2026 10:30:15 GMT", "Mon, 03 Mar 2026 10:31:02 GMT"),
    ("Today is Monday, 3 March 2026", "Today is Tuesday, 4 March 2026"),
    ("March 3, 2026", "March 4, 2026"),
    ("Current time: 10:30", "Current time: 10:31"),
    ("ts=1772533815", "ts=1772533876"),
    ("ts=1772533815123", "ts=1772533876456"),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("old", "new"), STAMPS)
def test_timestamp_in_system(fmt: str, old: str, new: str) -> None:
    report = diff(fmt, with_system(fmt, f"{old}\n\n{POLICY}"), with_system(fmt, f"{new}\n\n{POLICY}", LONGER))
    reason = first(report)
    assert reason.code == "timestamp", report.reasons
    assert reason.segment == system_path(fmt)
    assert report.divergence is not None and report.divergence.segment == system_path(fmt)
    assert reason.offset == report.divergence.offset
    assert reason.offset is not None and reason.offset <= len(old)
    # Everything of the previous request was shared with the next one: nearly all of it is lost.
    assert reason.tokens_lost >= 0.9 * report.previous.tokenized.count
    assert reason.usd_lost > 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_timestamp_in_an_earlier_user_message(fmt: str) -> None:
    turns = [("user", "[sent 2026-03-03 10:30:15] " + str(TURNS[0][1])), *TURNS[1:]]
    later = [("user", "[sent 2026-03-03 10:31:40] " + str(TURNS[0][1])), *LONGER[1:]]
    report = diff(fmt, build(fmt, turns), build(fmt, later))
    assert codes(report) == ["timestamp"]


UNIQUE = [
    ("Request ID: 550e8400-e29b-41d4-a716-446655440000", "Request ID: 9b2f0c1e-7d4a-4f3e-8a11-0c9d2e5b7a64"),
    ("session_id=sess_7f3a9c2e1b", "session_id=sess_0b8d4e6f2a"),
    ("trace 4bf92f3577b34da6a3ce929d0e0e4736", "trace 7d1e0a4b9c2f4e58b3a6d0c1e2f3a4b5"),
    ("nonce: Zx81KqPw", "nonce: Qa93LmRt"),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("old", "new"), UNIQUE)
def test_unique_id_in_system(fmt: str, old: str, new: str) -> None:
    report = diff(fmt, with_system(fmt, f"{POLICY}\n\n{old}"), with_system(fmt, f"{POLICY}\n\n{new}", LONGER))
    assert first(report).code == "unique-id", report.reasons
    assert first(report).segment == system_path(fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_timestamp_and_id_in_one_block_are_both_reported(fmt: str) -> None:
    old = f"Date: 2026-03-03T10:30:15Z\n{POLICY}\nRequest-Id: req_8Hk2Lq9Zp4"
    new = f"Date: 2026-03-03T10:31:02Z\n{POLICY}\nRequest-Id: req_3Tm7Nx1Wc6"
    report = diff(fmt, with_system(fmt, old), with_system(fmt, new, LONGER))
    assert codes(report) == ["timestamp", "unique-id"]
    # Additive: the timestamp costs the policy between the two, the id what follows it.
    stamp, ident = report.reasons
    assert stamp.tokens_lost > ident.tokens_lost > 0


# -- serialisation -----------------------------------------------------------------------------------


def _reorder_properties(tools: list[dict[str, Any]], i: int) -> list[dict[str, Any]]:
    tools = copy.deepcopy(tools)
    props = tools[i]["parameters"]["properties"]
    tools[i]["parameters"]["properties"] = dict(reversed(list(props.items())))
    return tools


@pytest.mark.parametrize("fmt", FORMATS)
def test_key_order_in_tool_schema(fmt: str) -> None:
    report = diff(fmt, build(fmt), build(fmt, LONGER, tools=_reorder_properties(TOOLS, 1)))
    assert codes(report) == ["key-order"]
    assert first(report).segment == tool_path(fmt, 1)
    assert "order" in first(report).detail


def _with_call_arguments(turns: list[Any], index: int, arguments: Any) -> list[Any]:
    turns = list(turns)
    kind, call_id, name, _ = turns[index]
    turns[index] = (kind, call_id, name, arguments)
    return turns


@pytest.mark.parametrize("fmt", FORMATS)
def test_key_order_in_tool_call_arguments(fmt: str) -> None:
    swapped = {"include_history": True, "order_id": "1234"}
    report = diff(fmt, build(fmt), build(fmt, _with_call_arguments(LONGER, 1, swapped)))
    assert codes(report) == ["key-order"]


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
def test_unicode_escaping_in_tool_call_arguments_is_key_order(fmt: str) -> None:
    raw = '{"city": "Orléans", "units": "metric"}'
    escaped = '{"city": "Orl\\u00e9ans", "units": "metric"}'
    report = diff(
        fmt,
        build(fmt, _with_call_arguments(TURNS, 5, raw)),
        build(fmt, _with_call_arguments(LONGER, 5, escaped)),
    )
    assert codes(report) == ["key-order"]
    assert "escaping" in first(report).detail


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
def test_spacing_in_tool_call_arguments_is_key_order(fmt: str) -> None:
    compact = '{"order_id":"1234","include_history":true}'
    spaced = '{"order_id": "1234", "include_history": true}'
    report = diff(
        fmt,
        build(fmt, _with_call_arguments(TURNS, 1, compact)),
        build(fmt, _with_call_arguments(LONGER, 1, spaced)),
    )
    assert codes(report) == ["key-order"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_json_in_tool_result_text_with_other_escaping(fmt: str) -> None:
    def with_result(turns: list[Any], text: str) -> list[Any]:
        turns = list(turns)
        turns[2] = ("result", turns[2][1], text)
        return turns

    old = 'Order found: {"status": "in transit", "city": "Orléans"} — anything else?'
    new = 'Order found: {"status": "in transit", "city": "Orl\\u00e9ans"} — anything else?'
    report = diff(fmt, build(fmt, with_result(TURNS, old)), build(fmt, with_result(LONGER, new)))
    assert codes(report) == ["key-order"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "mangle",
    [
        lambda s: s.replace("\n\n", "\r\n\r\n"),
        lambda s: s + "   \n",
        lambda s: s.replace("Follow this policy.", "Follow  this policy."),
    ],
    ids=["crlf", "trailing", "double-space"],
)
def test_whitespace(fmt: str, mangle: Any) -> None:
    report = diff(fmt, with_system(fmt, POLICY), with_system(fmt, mangle(POLICY), LONGER))
    assert codes(report) == ["whitespace"]
    assert first(report).segment == system_path(fmt)


# -- tools ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_tools_reordered(fmt: str) -> None:
    swapped = [TOOLS[1], TOOLS[0], *TOOLS[2:]]
    report = diff(fmt, build(fmt), build(fmt, LONGER, tools=swapped))
    assert codes(report) == ["tools-reordered"]
    assert first(report).segment == "tools[0]"
    assert report.divergence is not None and report.divergence.segment == "tools[0]"
    assert first(report).tokens_lost >= 0.9 * report.previous.tokenized.count


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_description_edited(fmt: str) -> None:
    edited = copy.deepcopy(TOOLS)
    edited[2]["description"] = "Open a ticket for a human agent."
    report = diff(fmt, build(fmt), build(fmt, LONGER, tools=edited))
    assert codes(report) == ["tools-changed"]
    assert first(report).segment == "tools[2]"
    assert "description" in first(report).detail


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_added_in_the_middle(fmt: str) -> None:
    added = [*TOOLS[:2], EXTRA_TOOL, *TOOLS[2:]]
    report = diff(fmt, build(fmt), build(fmt, LONGER, tools=added))
    assert codes(report) == ["tools-changed"]
    assert first(report).segment == "tools[2]"
    assert "issue_refund" in first(report).detail and "added" in first(report).detail


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_removed(fmt: str) -> None:
    report = diff(fmt, build(fmt), build(fmt, LONGER, tools=[*TOOLS[:1], *TOOLS[2:]]))
    assert codes(report) == ["tools-changed"]
    assert "get_weather" in first(report).detail and "removed" in first(report).detail


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_reordered_and_edited(fmt: str) -> None:
    tools = copy.deepcopy(TOOLS)
    tools[1]["description"] = "Weather now, for one city."
    report = diff(fmt, build(fmt), build(fmt, LONGER, tools=[tools[1], tools[0], *tools[2:]]))
    assert codes(report) == ["tools-reordered", "tools-changed"]
    assert first(report).segment == "tools[0]"
    # Both are paid for, and they add up to at most the previous request.
    assert all(r.tokens_lost >= 0 for r in report.reasons)
    assert sum(r.tokens_lost for r in report.reasons) <= report.previous.tokenized.count + 2


# -- system ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_system_edited(fmt: str) -> None:
    edited = POLICY.replace("On refunds:", "On refunds and returns:", 1)
    report = diff(fmt, with_system(fmt, POLICY), with_system(fmt, edited, LONGER))
    assert codes(report) == ["system-changed"]
    assert first(report).offset == POLICY.index("On refunds:") + len("On refunds")


def _two_system_blocks(fmt: str, blocks: list[str], turns: list[Any]) -> Body:
    if fmt == "anthropic":
        return build(fmt, turns, system=blocks)
    if fmt == "openai-chat":
        body = build(fmt, turns, system=None)
        body["messages"][:0] = [{"role": "system", "content": b} for b in blocks]
        return body
    body = build(fmt, turns, system=None)
    body["input"][:0] = [{"role": "developer", "content": b} for b in blocks]
    return body


@pytest.mark.parametrize("fmt", FORMATS)
def test_system_blocks_swapped(fmt: str) -> None:
    head, tail = POLICY[:3000], POLICY[3000:]
    report = diff(
        fmt, _two_system_blocks(fmt, [head, tail], TURNS), _two_system_blocks(fmt, [tail, head], LONGER)
    )
    assert codes(report) == ["system-changed"]
    assert "reordered" in first(report).detail


# -- history -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_earlier_turn_rewritten(fmt: str) -> None:
    later = list(LONGER)
    later[3] = ("assistant", "Order 1234 is with DHL; it should arrive in two days.")
    report = diff(fmt, build(fmt), build(fmt, later))
    assert codes(report) == ["history-edited"]
    assert report.divergence is not None
    assert first(report).segment == report.divergence.segment


@pytest.mark.parametrize("fmt", FORMATS)
def test_messages_reordered(fmt: str) -> None:
    # Two user turns swapped (the same messages, another order).
    turns = [("user", "First question."), ("assistant", "First answer."), ("user", "Second question.")]
    turns += [("assistant", "Second answer."), ("user", "Third question.")]
    swapped = [turns[2], turns[1], turns[0], *turns[3:], ("assistant", "Third answer."), ("user", "Thanks.")]
    report = diff(fmt, build(fmt, turns), build(fmt, swapped))
    assert codes(report) == ["history-edited"]
    assert "reordered" in first(report).detail


@pytest.mark.parametrize("fmt", FORMATS)
def test_sliding_window_drops_oldest_turns(fmt: str) -> None:
    # The window drops the first exchange (user + tool call + result + answer) and keeps the rest.
    report = diff(fmt, build(fmt), build(fmt, LONGER[4:]))
    assert codes(report) == ["history-truncated"]
    assert "oldest" in first(report).detail
    assert first(report).tokens_lost > 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_compaction_replaces_old_turns_with_a_summary(fmt: str) -> None:
    summary = ("user", "Summary so far: order 1234 is in transit with DHL, arriving in two days.")
    report = diff(fmt, build(fmt), build(fmt, [summary, ("assistant", "Noted."), *LONGER[4:]]))
    assert codes(report) == ["history-truncated"]
    assert "summary" in first(report).detail


# -- model and parameters -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "other"),
    [("openai-chat", "gpt-4.1"), ("openai-responses", "gpt-4.1"), ("anthropic", "claude-opus-4-1")],
)
def test_model_changed(fmt: str, other: str) -> None:
    report = diff(fmt, build(fmt), build(fmt, LONGER, model=other))
    assert codes(report) == ["model-changed"]
    assert report.divergence is None
    assert first(report).tokens_lost >= 0.9 * report.previous.tokenized.count


def test_model_changed_and_history_edited_reports_both() -> None:
    later = list(LONGER)
    later[4] = ("user", "Thanks. What's the weather like in Orléans this week?")
    report = diff("openai-chat", build("openai-chat"), build("openai-chat", later, model="gpt-4.1"))
    assert codes(report) == ["history-edited", "model-changed"]


@pytest.mark.parametrize(
    ("key", "before", "after"),
    [
        ("tool_choice", {"type": "auto"}, {"type": "any"}),
        ("thinking", None, {"type": "enabled", "budget_tokens": 2048}),
    ],
)
def test_anthropic_params_changed(key: str, before: Any, after: Any) -> None:
    previous, following = build("anthropic"), build("anthropic", LONGER)
    if before is not None:
        previous[key] = before
    following[key] = after
    report = diff("anthropic", previous, following)
    assert codes(report) == ["params-changed"]
    assert key in first(report).detail
    # The tools cache survives a parameter change: they are not lost.
    assert first(report).segment == "system[0]"
    assert first(report).tokens_lost < report.previous.tokenized.count


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
def test_openai_reasoning_effort_changed(fmt: str) -> None:
    previous, following = build(fmt, model="o3"), build(fmt, LONGER, model="o3")
    if fmt == "openai-chat":
        previous["reasoning_effort"], following["reasoning_effort"] = "low", "high"
    else:
        previous["reasoning"], following["reasoning"] = {"effort": "low"}, {"effort": "high"}
    report = diff(fmt, previous, following)
    assert codes(report) == ["params-changed"]
    assert "reasoning_effort" in first(report).detail


def test_anthropic_image_added_is_params_changed() -> None:
    later = [*LONGER, ("image", "https://example.com/receipt.png")]
    report = diff("anthropic", build("anthropic"), build("anthropic", later))
    assert codes(report) == ["params-changed"]
    assert "image" in first(report).detail


def test_anthropic_image_removed_is_params_changed() -> None:
    turns = [("image", "https://example.com/parcel.png"), *TURNS]
    report = diff("anthropic", build("anthropic", turns), build("anthropic", LONGER))
    assert first(report).code == "params-changed"


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
def test_openai_image_in_a_new_turn_is_an_append(fmt: str) -> None:
    later = [*LONGER, ("image", "https://example.com/receipt.png")]
    assert diff(fmt, build(fmt), build(fmt, later)).reasons == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_same_size_image_swap_is_content_changed(fmt: str) -> None:
    turns = [("image", "https://example.com/a.png"), *TURNS]
    later = [("image", "https://example.com/b.png"), *LONGER]
    report = diff(fmt, build(fmt, turns), build(fmt, later))
    assert codes(report) == ["content-changed"]
    assert "image" in first(report).detail


def test_output_schema_changed_is_content_changed() -> None:
    def with_schema(body: Body, required: list[str]) -> Body:
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": required}
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
        return body

    report = diff(
        "openai-chat",
        with_schema(build("openai-chat"), ["answer"]),
        with_schema(build("openai-chat", LONGER), []),
    )
    assert codes(report) == ["content-changed"]
    assert first(report).segment == "response_format"


def test_output_schema_key_order() -> None:
    def with_schema(body: Body, schema: dict[str, Any]) -> Body:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
        return body

    a = {"type": "object", "properties": {"answer": {"type": "string"}}}
    b = {"properties": {"answer": {"type": "string"}}, "type": "object"}
    report = diff(
        "openai-chat", with_schema(build("openai-chat"), a), with_schema(build("openai-chat", LONGER), b)
    )
    assert codes(report) == ["key-order"]


# -- several reasons -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_tools_reordered_and_timestamp_in_system(fmt: str) -> None:
    old = f"Now: 2026-03-03T10:30:15Z\n{POLICY}"
    new = f"Now: 2026-03-03T10:35:00Z\n{POLICY}"
    swapped = [TOOLS[3], *TOOLS[:3]]
    report = diff(fmt, with_system(fmt, old), with_system(fmt, new, LONGER, tools=swapped))
    assert codes(report) == ["tools-reordered", "timestamp"]
    total = sum(r.tokens_lost for r in report.reasons)
    assert 0.9 * report.previous.tokenized.count <= total <= report.previous.tokenized.count + 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_reasons_json_shape(fmt: str) -> None:
    from cachewarden.proxy.cli.diff import as_json

    report = diff(
        fmt, with_system(fmt, "Now: 10:30\n" + POLICY), with_system(fmt, "Now: 10:31\n" + POLICY, LONGER)
    )
    out = as_json(report)
    assert set(out) == {
        "provider",
        "model",
        "previous_tokens",
        "tokens",
        "common_prefix_tokens",
        "predicted",
        "divergence",
        "reasons",
    }
    assert set(out["predicted"]) == {"cached_tokens", "cache_write_tokens", "uncached_tokens"}
    assert out["divergence"] == {"segment": system_path(fmt), "offset": len("Now: 10:3")}
    assert [set(r) for r in out["reasons"]] == [{"code", "segment", "tokens_lost", "detail"}]
    json.dumps(out)
