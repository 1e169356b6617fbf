"""Request shapes the client-library runs found misread: a breakpoint moved earlier, one conversation
across the Chat and Responses endpoints, a block removed from the very start, a new conversation."""

from __future__ import annotations

from typing import Any

import pytest
from bodies import FORMATS, NEXT_TURNS, POLICY, TURNS, Body, build, codes, diff

LONGER = TURNS + NEXT_TURNS
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}},
            "required": ["answer"],
        },
    },
}


def test_breakpoint_moved_from_the_system_prompt_to_the_last_tool_is_no_breakpoint() -> None:
    # The earlier entry sits at the end of the system prompt, *after* the new breakpoint: no
    # breakpoint covers it any more. That is not an entry beyond a lookback window.
    previous = build("anthropic", cache_last=False)
    following = build("anthropic", cache_last=False)
    following["system"] = POLICY  # a plain string: no cache_control on it
    following["tools"][-1]["cache_control"] = {"type": "ephemeral"}
    report = diff("anthropic", previous, following)
    assert codes(report) == ["no-breakpoint"]
    assert "after the last breakpoint" in report.reasons[0].detail
    assert report.reasons[0].tokens_lost > 2000


def test_an_entry_before_the_window_is_still_too_far() -> None:
    many = [("user", f"Note {i}: the customer adds a detail.") for i in range(30)]
    previous = build("anthropic")
    del previous["system"][-1]["cache_control"]
    following = build("anthropic", [*TURNS, ("assistant", "Noted."), *many])
    del following["system"][-1]["cache_control"]
    assert codes(diff("anthropic", previous, following)) == ["breakpoint-too-far"]


@pytest.mark.parametrize(
    ("before", "after"), [("openai-chat", "openai-responses"), ("openai-responses", "openai-chat")]
)
@pytest.mark.parametrize("longer", [False, True])
def test_one_conversation_across_chat_and_responses_without_tools_is_no_miss(
    before: str, after: str, longer: bool
) -> None:
    # One model, one rendered prompt: the cache matches rendered tokens, whatever the endpoint.
    chat = [t for t in TURNS if t[0] in ("user", "assistant")]
    more = [t for t in LONGER if t[0] in ("user", "assistant")]
    previous = build(before, chat, model="gpt-4.1", tools=None)
    following = build(after, more if longer else chat, model="gpt-4.1", tools=None)
    report = diff(None, previous, following)
    assert report.common_prefix_tokens >= report.previous.tokenized.count - 8
    assert report.reasons == []
    assert report.divergence is None


@pytest.mark.parametrize(
    ("before", "after"), [("openai-chat", "openai-responses"), ("openai-responses", "openai-chat")]
)
def test_across_chat_and_responses_only_the_rendering_is_a_reason(before: str, after: str) -> None:
    # With tools the two endpoints may frame the tools section differently (the counting model's
    # measured framing): then that is the one reason, never a model, system, tool or history change.
    report = diff(None, build(before, model="gpt-4.1"), build(after, LONGER, model="gpt-4.1"))
    if report.common_prefix_tokens >= report.previous.tokenized.count - 8:
        assert report.reasons == []
        return
    assert codes(report) == ["content-changed"]
    assert (
        "Chat Completions" in report.reasons[0].detail
        and "render the same content" in report.reasons[0].detail
    )
    assert report.reasons[0].tokens_lost > 0.9 * (
        report.previous.tokenized.count - report.common_prefix_tokens
    )
    assert report.divergence is not None and report.divergence.segment == report.reasons[0].segment


def test_a_real_edit_across_chat_and_responses_is_still_reported() -> None:
    chat = [t for t in LONGER if t[0] in ("user", "assistant")]
    previous = build("openai-chat", chat[:4], model="gpt-4.1", tools=None)
    edited = build("openai-responses", chat, model="gpt-4.1", tools=None, system=POLICY + "\nBe brief.")
    report = diff(None, previous, edited)
    assert codes(report) == ["system-changed"]


def _without(fmt: str, what: str) -> Body:
    body = build(fmt)
    if what == "tools":
        body.pop("tools")
    return body


def _with_schema(body: Body) -> Body:
    body["response_format"] = SCHEMA
    body.pop("tools", None)
    return body


@pytest.mark.parametrize("fmt", FORMATS)
def test_tools_block_removed_from_the_start_is_explained(fmt: str) -> None:
    with_tools, without = build(fmt), _without(fmt, "tools")
    removed = diff(fmt, with_tools, without)
    added = diff(fmt, without, with_tools)
    assert codes(removed) == ["tools-changed"] and codes(added) == ["tools-changed"]
    assert "removed" in removed.reasons[0].detail
    # The system prompt and history that follow the tools are what the change cost.
    assert removed.reasons[0].tokens_lost > 2000
    assert abs(removed.reasons[0].tokens_lost - added.reasons[0].tokens_lost) < 50


def test_output_schema_removed_from_the_start_is_explained() -> None:
    with_schema = _with_schema(build("openai-chat"))
    plain = build("openai-chat")
    plain.pop("tools")
    removed = diff("openai-chat", with_schema, plain)
    added = diff("openai-chat", plain, with_schema)
    assert codes(removed) == ["content-changed"] and codes(added) == ["content-changed"]
    assert "removed" in removed.reasons[0].detail and "added" in added.reasons[0].detail
    assert removed.reasons[0].tokens_lost > 2000


def test_an_unrelated_request_after_a_leading_change_stays_cold() -> None:
    # A request sharing no block with anything earlier is still cold.
    previous = build("openai-chat")
    other = build(
        "openai-chat", [("user", "A different question entirely.")], system="You are a poet.", tools=None
    )
    assert codes(diff("openai-chat", previous, other)) == ["cold"]


NEW_CONVERSATION: list[Any] = [
    ("user", "Hello, I want to change the address of order 5678 please."),
    ("call", "call_Ab12", "lookup_order", {"order_id": "5678"}),
    ("result", "call_Ab12", '{"status": "processing"}'),
    ("assistant", "Your order 5678 is still processing; I can change the address."),
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_new_conversation_on_the_same_system_prompt_is_not_a_compaction(fmt: str) -> None:
    report = diff(fmt, build(fmt, LONGER), build(fmt, NEW_CONVERSATION))
    assert "history-truncated" not in codes(report)
    assert report.reasons == []
    # What the two share (tools and system prompt) is read from the cache.
    assert report.next.prediction.cached_tokens > 2000


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_summary_in_place_of_the_history_is_still_a_compaction(fmt: str) -> None:
    summary = [
        ("user", "Summary of the conversation so far: order 1234 is in transit."),
        ("assistant", "Noted."),
    ]
    report = diff(fmt, build(fmt, LONGER), build(fmt, summary))
    assert codes(report) == ["history-truncated"]
    assert "compacted" in report.reasons[0].detail
