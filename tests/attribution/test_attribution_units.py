"""Unit tests: volatile-value detectors, text helpers and attribute_pair on hand-made prompts."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from cachewarden.proxy.engine.prompt import CacheControl, Prompt, Segment
from cachewarden.proxy.explain.attribution import (
    FIXES,
    attribute_pair,
    find_divergence,
    json_same,
    shared_chars,
    text_regions,
)
from cachewarden.proxy.explain.textdiff import caret_view, common_prefix, common_suffix, context_line
from cachewarden.proxy.explain.volatile import span_covering, timestamp_spans, unique_id_spans

REASON_CODES = {
    "cold", "expired", "model-changed", "params-changed", "tools-changed", "tools-reordered", "key-order",
    "whitespace", "timestamp", "unique-id", "system-changed", "history-edited", "history-truncated",
    "below-minimum", "no-breakpoint", "breakpoint-too-far", "content-changed", "unexplained",
}  # fmt: skip


def test_every_reason_code_has_a_fix() -> None:
    assert set(FIXES) == REASON_CODES


# -- volatile ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("at 2026-03-03T10:30:15.123+01:00 sharp", "2026-03-03T10:30:15.123+01:00"),
        ("Date: Tue, 03 Mar 2026 10:30:15 GMT\n", "Tue, 03 Mar 2026 10:30:15 GMT"),
        ("Today is Monday, 3 March 2026.", "Monday, 3 March 2026"),
        ("It is March 3rd, 2026 at 9:15 am.", "March 3rd, 2026 at 9:15 am"),
        ("time 10:30:15 now", "10:30:15"),
        ("ts=1772533815 ", "1772533815"),
        ("ts=1772533815123}", "1772533815123"),
        ("on 03/03/2026.", "03/03/2026"),
        ("Today is Tuesday.", "Tuesday"),
    ],
)
def test_timestamps(text: str, value: str) -> None:
    assert [text[s:e] for s, e in timestamp_spans(text)] == [value]


@pytest.mark.parametrize(
    "text", ["version 1.2.3", "answer 42", "May I help?", "we march on", "ratio 3:2", "pi is 3.14159", ""]
)
def test_not_timestamps(text: str) -> None:
    assert timestamp_spans(text) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("id 550e8400-e29b-41d4-a716-446655440000.", "550e8400-e29b-41d4-a716-446655440000"),
        ("see req_01HXYZ9ABCDEF", "req_01HXYZ9ABCDEF"),
        ("tool call_7QnX2a done", "call_7QnX2a"),
        ("traceparent 4bf92f3577b34da6a3ce929d0e0e4736", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("request_id=abc12345;", "abc12345"),
        ('{"nonce": "Zx81Kq"}', "Zx81Kq"),
        ("token dGhpcyBpcyBhIHRlc3Q9", "dGhpcyBpcyBhIHRlc3Q9"),
        ("ulid 01ARZ3NDEKTSV4RRFFQ69G5FAV", "01ARZ3NDEKTSV4RRFFQ69G5FAV"),
    ],
)
def test_unique_ids(text: str, value: str) -> None:
    assert value in [text[s:e] for s, e in unique_id_spans(text)]


@pytest.mark.parametrize(
    "text", ["a normal sentence with words", "deadbeef", "facebook", "The policy, clause 12."]
)
def test_not_unique_ids(text: str) -> None:
    assert unique_id_spans(text) == []


def test_span_covering_ignores_fragments_at_the_window_edge() -> None:
    text = "x" * 500 + " 2026-03-03 " + "y" * 500
    assert span_covering(text, 505, "timestamp") == (501, 511)
    assert span_covering(text, 100, "timestamp") is None


# -- text helpers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 100_000])
def test_common_prefix(n: int) -> None:
    a = "a" * n + "X" + "tail"
    b = "a" * n + "Y" + "tail"
    assert common_prefix(a, b) == n
    assert common_prefix(a, a) == len(a)
    assert common_prefix(a, b, 1, 1) == n - 1 if n else True
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_suffix(a, b) == 4


def test_context_line_and_caret() -> None:
    line, column = context_line("first\nsecond line here\nthird", 13)
    assert line == "second line here" and column == 7
    lines = caret_view("now 10:30 ok", "now 10:31 ok", 8, 8)
    assert lines[-1].index("^") == lines[0].index("10:30") + 4
    long = "x" * 1000 + "DIFF" + "y" * 1000
    shown, col = context_line(long, 1000)
    assert shown[col] == "D" and len(shown) < 100
    tab, col = context_line("a\tb\rc", 3)
    assert tab == "a→b␍c" and col == 3


def test_json_same() -> None:
    assert json_same({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1.0})
    assert not json_same({"a": True}, {"a": 1})
    assert not json_same([1, 2], [2, 1])
    assert json_same("é", "é")


def test_text_regions_resume_after_each_value() -> None:
    a = "Date 2026-03-03 10:30 | id=req_abc12345 | end"
    b = "Date 2026-03-04 10:31 | id=req_xyz98765 | end"
    regions = text_regions(a, b)
    assert [r.code for r in regions] == ["timestamp", "unique-id"]
    assert shared_chars(a, b)[-1] == (a.index(" | end"), len(a))


def test_text_regions_stop_at_a_real_edit() -> None:
    regions = text_regions("keep the policy short", "keep the rules short")
    assert [r.code for r in regions] == [""]
    assert regions[0].offset_previous == len("keep the ")


def test_text_regions_key_order_in_embedded_json() -> None:
    a = 'Result: {"b": 1, "a": {"x": [1, 2]}} done'
    b = 'Result: {"a": {"x": [1, 2]}, "b": 1} done'
    assert [r.code for r in text_regions(a, b)] == ["key-order"]


def test_text_regions_whitespace_only() -> None:
    assert [r.code for r in text_regions("a b\nc", "a  b\r\nc")] == ["whitespace", "whitespace"]


# -- attribute_pair on hand-made prompts ---------------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    """A token stream like counting.TokenizedPrompt: a token per 10 characters, at least one per segment."""

    tokens: list[int]
    spans: tuple[tuple[int, int], ...]
    ratio: float = 1.0

    @property
    def count(self) -> int:
        return len(self.tokens)


def stream(prompt: Prompt) -> Stream:
    spans, at = [], 0
    for seg in prompt.segments:
        n = max(1, len(seg.text) // 10)
        spans.append((at, at + n))
        at += n
    return Stream(list(range(at)), tuple(spans))


def prompt(
    *segments: Segment, model: str = "claude-sonnet-4-5", params: tuple[tuple[str, str], ...] = ()
) -> Prompt:
    return Prompt("anthropic", model, tuple(segments), params)


SYSTEM = "You are a careful assistant. " * 40


def msg(i: int, text: str, role: str = "user", mark: bool = False) -> Segment:
    return Segment(f"messages[{i}].content[0]", "text", text, role, i, CacheControl() if mark else None)


def test_pair_identical_and_appended() -> None:
    a = prompt(Segment("system", "system", SYSTEM), msg(0, "hi", mark=True))
    b = prompt(
        Segment("system", "system", SYSTEM),
        msg(0, "hi"),
        msg(1, "hello", "assistant"),
        msg(2, "more", mark=True),
    )
    assert attribute_pair(a, stream(a), a, stream(a)) == []
    assert attribute_pair(a, stream(a), b, stream(b)) == []
    assert find_divergence(a, b) is None


def test_pair_timestamp_tokens_and_dollars() -> None:
    a = prompt(Segment("system", "system", "Now: 10:30:15\n" + SYSTEM), msg(0, "hi"))
    b = prompt(
        Segment("system", "system", "Now: 10:31:15\n" + SYSTEM), msg(0, "hi"), msg(1, "yo", "assistant")
    )
    reasons = attribute_pair(a, stream(a), b, stream(b))
    assert [r.code for r in reasons] == ["timestamp"]
    tp = stream(a)
    # Everything after the changed value is shared: about all of the previous stream.
    assert tp.count - 3 <= reasons[0].tokens_lost <= tp.count
    assert reasons[0].usd_lost == 0.0  # no price table given
    div = find_divergence(a, b)
    assert div is not None and (div.segment, div.offset) == ("system", len("Now: 10:3"))


def test_pair_model_and_params() -> None:
    base = (Segment("system", "system", SYSTEM), msg(0, "hi"))
    a = prompt(*base)
    b = prompt(*base, model="claude-opus-4-1", params=(("tool_choice", '{"type":"any"}'),))
    reasons = attribute_pair(a, stream(a), b, stream(b))
    assert [r.code for r in reasons] == ["model-changed", "params-changed"]
    # Had the model not changed, the parameter change would still have cost the same tokens after
    # the tools (there are none here): the model change alone is charged for the whole prefix.
    assert reasons[0].tokens_lost == stream(a).count
    assert reasons[1].tokens_lost == 0


# -- never fails, never over-counts ------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_TEXTS = st.sampled_from(
    [
        "",
        "hello",
        "Now: 10:30",
        "Now: 10:31",
        '{"a":1,"b":2}',
        '{"b":2,"a":1}',
        "a  b",
        "a b",
        SYSTEM,
        "x" * 300,
    ]
)
_SEGMENTS = st.lists(
    st.tuples(st.sampled_from(["tool", "system", "msg"]), _TEXTS, st.sampled_from(["user", "assistant"])),
    max_size=8,
)


def _build(spec: list[tuple[str, str, str]]) -> Prompt:
    segments = []
    for i, (kind, text, role) in enumerate(spec):
        if kind == "tool":
            segments.append(Segment(f"tools[{i}]", "tool", text, name=f"t{len(text) % 3}"))
        elif kind == "system":
            segments.append(Segment(f"system[{i}]", "system", text))
        else:
            segments.append(msg(i, text, role))
    order = {"tool": 0, "system": 1, "text": 2}
    return prompt(*sorted(segments, key=lambda s: order[s.kind]))


@settings(max_examples=300, deadline=None)
@given(_SEGMENTS, _SEGMENTS)
def test_any_pair_is_explained_without_error_or_double_counting(
    a_spec: list[tuple[str, str, str]], b_spec: list[tuple[str, str, str]]
) -> None:
    a, b = _build(a_spec), _build(b_spec)
    reasons = attribute_pair(a, stream(a), b, stream(b))
    assert all(r.code in REASON_CODES and r.tokens_lost >= 0 for r in reasons)
    assert sum(r.tokens_lost for r in reasons) <= stream(a).count
    if a.segments == b.segments[: len(a.segments)]:
        assert reasons == []
