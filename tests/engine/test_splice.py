"""``ConversationReader.load`` parses only what a body appends to an earlier one, and gives exactly
``load_body``'s result whatever the body is: random conversations in random JSON layouts go through
random byte-level edits (append items, edit a byte anywhere, cut the body, add a key after the
items, a literal that continues a number, whitespace), and every body is compared with
``load_body`` by its exact JSON (``1`` and ``1.0`` and ``true`` differ there) or by its error.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from cachewarden.proxy.engine.adapters import load_body
from cachewarden.proxy.engine.adapters._splice import closes_items, closing_candidate
from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.engine.reading import ConversationReader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"enum": [1, "]", "[x"]}}}]
TEXTS = ["plain", 'quote " and ] bracket', "back\\slash [", "δ ünï", "12", "", "}, {"]


def _layout(draw: st.DrawFn) -> dict[str, Any]:
    """json.dumps arguments: compact, default, indented, with or without ASCII escapes."""
    return draw(
        st.sampled_from(
            [
                {"separators": (",", ":")},
                {},
                {"indent": 2},
                {"indent": 1, "ensure_ascii": False},
                {"separators": (" , ", " : "), "ensure_ascii": False},
            ]
        )
    )


def _item(draw: st.DrawFn, i: int) -> dict[str, Any]:
    text = draw(st.sampled_from(TEXTS))
    return draw(
        st.sampled_from(
            [
                {"role": "user", "content": f"{text} {i}"},
                {"role": "assistant", "content": None, "n": draw(st.sampled_from([1, 1.0, True, 12]))},
                {"role": "user", "content": [{"type": "text", "text": text}, [[]]]},
            ]
        )
    )


def _dump(body: dict[str, Any], layout: dict[str, Any]) -> bytes:
    return json.dumps(body, **layout).encode()


def _same(reader: ConversationReader, raw: bytes, tenant: str = "t") -> Any:
    """What ``reader.load`` gives for ``raw``, checked against ``load_body`` (value, types, order, error)."""
    try:
        expected: Any = load_body(raw)
    except RequestError as exc:
        with pytest.raises(RequestError) as got:
            reader.load(raw, tenant=tenant)
        assert str(got.value) == str(exc)
        return None
    body = reader.load(raw, tenant=tenant)
    assert type(body) is type(expected)
    assert orjson.dumps(body) == orjson.dumps(expected)
    return body


@st.composite
def conversations(draw: st.DrawFn) -> list[bytes]:
    """The bodies of one conversation: mostly appends, with random edits of the bytes in between."""
    layout = _layout(draw)
    key = draw(st.sampled_from(["messages", "input"]))
    order = draw(st.permutations([key, "model", "tools"]))
    items = [{"role": "system", "content": "be brief"}]
    out: list[bytes] = []
    for step in range(draw(st.integers(2, 9))):
        items = items + [_item(draw, step) for _ in range(draw(st.integers(1, 3)))]
        fields = {"model": "gpt-4o", "tools": TOOLS, key: items}
        raw = _dump({k: fields[k] for k in order}, layout)
        edit = draw(st.sampled_from(["none", "none", "none", "byte", "cut", "key_after", "space", "number"]))
        if edit == "byte" and raw:
            at = draw(st.integers(0, len(raw) - 1))
            raw = raw[:at] + draw(st.sampled_from([b"]", b",", b"1", b'"', b" ", b"\xff"])) + raw[at + 1 :]
        elif edit == "cut":
            raw = raw[: draw(st.integers(0, len(raw)))]
        elif edit == "key_after" and out:
            # Bytes that extend the earlier body but close the items first: a new key, not an item.
            previous = out[-1]
            close = previous.rfind(b"]")
            raw = previous[:close] + b'], "extra": [1' + previous[close:]
        elif edit == "space":
            raw = raw.replace(b"]", b" ]", 1)
        elif edit == "number" and out:
            # A value that goes on where the earlier one ended (12 -> 123) is not an appended item.
            previous = out[-1]
            close = previous.rfind(b"]")
            raw = previous[:close] + b"3" + previous[close:]
        out.append(raw)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(conversations(), min_size=1, max_size=3))
def test_load_equals_load_body_on_random_bodies(convs: list[list[bytes]]) -> None:
    reader = ConversationReader()
    # Conversations of one tenant interleaved, as a proxy sees them.
    longest = max(len(c) for c in convs)
    for step in range(longest):
        for conv in convs:
            if step < len(conv):
                _same(reader, conv[step])


@pytest.mark.parametrize("layout", [{"separators": (",", ":")}, {"indent": 2}, {}])
@pytest.mark.parametrize("key_first", [True, False])
def test_an_appended_turn_is_parsed_alone(layout: dict[str, Any], key_first: bool) -> None:
    """The earlier items come over as the very objects of the earlier parse: only the new turn was read."""
    reader = ConversationReader()
    items: list[Any] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi ]"}]
    previous = None
    for turn in range(5):
        items = [*items, {"role": "assistant", "content": f"answer {turn}"}]
        fields = {"messages": items, "model": "gpt-4o", "tools": TOOLS}
        if not key_first:
            fields = {"model": "gpt-4o", "tools": TOOLS, "messages": items}
        body = _same(reader, _dump(fields, layout))
        if previous is not None:
            assert body["messages"][0] is previous["messages"][0]
            assert body["tools"] is previous["tools"]
        previous = body


def test_tenants_never_extend_each_others_bodies() -> None:
    reader = ConversationReader()
    items = [{"role": "user", "content": "hello"}]
    first = _dump({"model": "m", "messages": items}, {})
    second = _dump({"model": "m", "messages": [*items, {"role": "user", "content": "again"}]}, {})
    a = reader.load(first, tenant="a")
    # Tenant b's body extends tenant a's: it is parsed whole, sharing no object with a's.
    b = reader.load(second, tenant="b")
    assert b == load_body(second) and b["messages"][0] is not a["messages"][0]
    # The same body in tenant a's own stream is an extension.
    assert reader.load(second, tenant="a")["messages"][0] is a["messages"][0]


def test_the_items_bracket_is_proved_not_guessed() -> None:
    raw = b'{"messages": [{"c": "x"}], "model": "m ]"}'
    body = load_body(raw)
    close = raw.index(b"]")
    assert closing_candidate(raw, close) == close
    assert closes_items(raw, body, "messages", close)
    inside = raw.rindex(b"]")  # inside the model's string
    assert not closes_items(raw, body, "messages", inside)
    # The same key twice: the parse keeps the second array, so the first one's bracket is not it.
    twice = b'{"messages": [1], "model": "m", "messages": [2]}'
    assert not closes_items(twice, load_body(twice), "messages", twice.index(b"]"))


def test_deep_appended_items_are_refused_as_load_body_refuses_them() -> None:
    reader = ConversationReader()
    base = {"model": "m", "messages": [{"role": "user", "content": "a"}]}
    reader.load(_dump(base, {}), tenant="t")
    grown = _dump({**base, "messages": [*base["messages"], {"role": "user", "content": "b"}]}, {})
    reader.load(grown, tenant="t")
    deep: Any = "x"
    for _ in range(260):
        deep = [deep]
    raw = _dump({**base, "messages": [*base["messages"], {"role": "user", "content": "b"}, deep]}, {})
    assert _same(reader, raw) is None


def test_many_conversations_of_one_tenant_each_extend_their_own() -> None:
    """One API key, 30 agents sharing a system prompt and tools, their turns interleaved: each body
    is parsed from where its own conversation's previous one ended."""
    reader = ConversationReader()
    system = {"role": "system", "content": "You are an agent. " * 200}
    convs: list[list[Any]] = [[system, {"role": "user", "content": f"task {c}"}] for c in range(30)]
    held: list[Any] = [None] * 30
    for turn in range(4):
        for c, items in enumerate(convs):
            items.append({"role": "assistant", "content": f"step {turn} of {c}"})
            body = _same(reader, _dump({"messages": items, "model": "m", "tools": TOOLS}, {}))
            if held[c] is not None:
                assert body["messages"][1] is held[c]["messages"][1], (turn, c)
            held[c] = body


def test_a_large_body_seen_first_is_extended_once_a_later_body_grows_it() -> None:
    """A body over the size proved at once (a conversation the proxy joins late) gets its items' end
    proved when the next body looks like its extension."""
    reader = ConversationReader()
    items: list[Any] = [{"role": "user", "content": "x" * 100_000}]
    first = _same(reader, _dump({"model": "m", "messages": items}, {}))
    items = [*items, {"role": "assistant", "content": "ok"}]
    second = _same(reader, _dump({"model": "m", "messages": items}, {}))
    assert second["messages"][0] is first["messages"][0]
