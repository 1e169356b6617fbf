"""Reading a conversation body by body from where each parts from the last gives exactly what reading
each from scratch gives: the same Prompt, the same token stream, the same prediction.

Random conversations per adapter go through random edits at random positions (append turns, edit,
insert or delete an item, switch model or tools, ``1`` becoming ``true``, tool calls whose results
are named by call id, images, documents with citations, breakpoints); each body is read by a
``ConversationReader`` and by ``parse_request``, then analysed by two engines.
"""

from __future__ import annotations

import copy
import json
import weakref
from dataclasses import replace
from typing import Any

import pytest
from cachewarden.proxy.engine import markers as markers_of
from cachewarden.proxy.engine.adapters import load_body, parse_request
from cachewarden.proxy.engine.adapters._items import first_difference
from cachewarden.proxy.engine.calibration import FixedDigests, fixed_digest
from cachewarden.proxy.engine.counting_memo import LatestStreams
from cachewarden.proxy.engine.engine import Engine, salted_tokens
from cachewarden.proxy.engine.index.memory import MemoryIndex
from cachewarden.proxy.engine.prompt import Basis, Provider
from cachewarden.proxy.engine.reading import ConversationReader
from cachewarden.proxy.explain import model_params, structure
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TOOLS_OPENAI = [
    {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "write", "description": "Write a file."}},
]
TOOLS_ANTHROPIC = [
    {"name": "read", "input_schema": {"type": "object"}},
    {"name": "write", "description": "Write a file.", "input_schema": {"type": "object"}},
]
WORDS = ["alpha", "beta 12", "gamma.", "δelta", "x" * 40, "the quick brown fox", "1", "true"]


def _chat_item(draw: st.DrawFn, i: int) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(["user", "assistant", "call", "parallel", "result", "named", "parts", "system"])
    )
    text = draw(st.sampled_from(WORDS))
    if kind in ("call", "parallel"):
        # Parallel calls render as one wrapper call, their results as one message (counting.py): a
        # body that adds or edits one of a run of results must still read as the whole run.
        calls = [
            {"id": f"c{(i + k) % 3}", "type": "function", "function": {"name": f"f{i}", "arguments": args}}
            for k, args in enumerate(
                ["{}", '{"q": 1}', "{}"][: 1 if kind == "call" else draw(st.integers(2, 3))]
            )
        ]
        return {"role": "assistant", "content": None, "tool_calls": calls}
    if kind == "result":
        return {"role": "tool", "tool_call_id": f"c{draw(st.integers(0, 2))}", "content": text}
    if kind == "named":
        return {"role": "user", "name": "bob", "content": text}
    if kind == "parts":
        # An image's estimate depends on the model: a switch of model must re-read it.
        image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}}
        return {"role": "user", "content": [{"type": "text", "text": text}, image]}
    return {"role": "user" if kind == "user" else kind, "content": text}


def _responses_item(draw: st.DrawFn, i: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "assistant", "call", "output", "reasoning"]))
    text = draw(st.sampled_from(WORDS))
    if kind == "call":
        return {"type": "function_call", "call_id": f"c{i % 3}", "name": f"f{i}", "arguments": "{}"}
    if kind == "output":
        return {"type": "function_call_output", "call_id": f"c{draw(st.integers(0, 2))}", "output": text}
    if kind == "reasoning":
        return {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}
    return {"role": kind, "content": text}


def _anthropic_item(draw: st.DrawFn, i: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["user", "assistant", "use", "result", "document", "blocks"]))
    text = draw(st.sampled_from(WORDS))
    if kind == "use":
        return {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{i}", "name": "read", "input": {}}],
        }
    if kind == "result":
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]}
    if kind == "document":
        return {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": text},
                    "citations": {"enabled": draw(st.booleans())},
                }
            ],
        }
    if kind == "blocks":
        block: dict[str, Any] = {"type": "text", "text": text}
        if draw(st.booleans()):
            block["cache_control"] = {"type": "ephemeral"}
        return {"role": "user", "content": [block, {"type": "text", "text": "and"}]}
    return {"role": kind, "content": text}


ITEMS = {"openai-chat": _chat_item, "openai-responses": _responses_item, "anthropic": _anthropic_item}
MODELS = {
    "openai-chat": ["gpt-4o", "gpt-4.1-mini"],
    "openai-responses": ["gpt-4o", "gpt-5-mini", "gpt-5.4"],  # gpt-5.4: resumes_after_result
    "anthropic": ["claude-sonnet-4-5", "claude-haiku-4-5"],
}
# Cache-affecting parameters: they salt the stream the scoped index sees (for OpenAI, its scope).
PARAMS: dict[Provider, list[dict[str, Any]]] = {
    "openai-chat": [
        {},
        {"reasoning_effort": "low"},
        {"reasoning_effort": "high"},
        {"prompt_cache_retention": "24h"},
    ],
    "openai-responses": [{}, {"reasoning": {"effort": "low"}}, {"reasoning": {"effort": "high"}}],
    "anthropic": [
        {},
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"tool_choice": {"type": "any"}},
        {"speed": "fast"},
    ],
}


def _body(
    provider: Provider, model: str, items: list[Any], tools: bool, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {**_plain_body(provider, model, items, tools), **(params or {})}


def _plain_body(provider: Provider, model: str, items: list[Any], tools: bool) -> dict[str, Any]:
    if provider == "openai-chat":
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "system", "content": "Be brief."}, *items],
        }
        if tools:
            body["tools"] = TOOLS_OPENAI
        return body
    if provider == "openai-responses":
        body = {"model": model, "instructions": "Be brief.", "input": items}
        if tools:
            body["tools"] = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
        return body
    body = {"model": model, "max_tokens": 64, "system": "Be brief.", "messages": items}
    if tools:
        body["tools"] = TOOLS_ANTHROPIC
    return body


@st.composite
def conversations(draw: st.DrawFn, provider: Provider) -> list[bytes]:
    """Bodies of one conversation under random edits (as JSON bytes, as the proxy sees them)."""
    make = ITEMS[provider]
    items = [make(draw, i) for i in range(draw(st.integers(1, 6)))]
    model, tools = MODELS[provider][0], draw(st.booleans())
    params = draw(st.sampled_from(PARAMS[provider]))
    out = [json.dumps(_body(provider, model, items, tools, params)).encode()]
    for step in range(draw(st.integers(1, 10))):
        edit = draw(
            st.sampled_from(
                ["append", "append", "append", "edit", "insert", "delete", "model", "tools", "bool", "params"]
            )
        )
        items = copy.deepcopy(items)
        at = draw(st.integers(0, max(0, len(items) - 1)))
        if edit == "append" or not items:
            items.append(make(draw, len(items) + step))
        elif edit == "edit":
            items[at] = make(draw, at + 7)
        elif edit == "insert":
            items.insert(at, make(draw, at + 11))
        elif edit == "delete" and len(items) > 1:
            del items[at]
        elif edit == "model":
            model = draw(st.sampled_from(MODELS[provider]))
        elif edit == "tools":
            tools = not tools
        elif edit == "params":
            params = draw(st.sampled_from(PARAMS[provider]))
        elif edit == "bool":
            items[at] = (
                {**items[at], "flag": 1} if items[at].get("flag") != 1 else {**items[at], "flag": True}
            )
        out.append(json.dumps(_body(provider, model, items, tools, params)).encode())
    return out


def _check(provider: Provider, bodies: list[bytes]) -> None:
    reader, inc, scratch = ConversationReader(), Engine(), Engine()
    keys = FixedDigests()
    # The scoped index as it was before parameters went into the scope: the salted stream, scoped
    # by tenant and model only. The engine's matches must be that index's, entry for entry.
    salted = MemoryIndex()
    for n, raw in enumerate(bodies):
        errors: list[str] = []
        try:
            expected = parse_request(load_body(raw), provider)
        except Exception as exc:  # the same error either way
            errors.append(str(exc))
        try:
            # As the proxy reads it: parsed from where it extends the previous body, then resumed.
            got = reader.parse(reader.load(raw, tenant="t"), provider, tenant="t")
        except Exception as exc:
            assert errors == [str(exc)], n
            continue
        assert not errors, (n, errors)
        assert got == expected, n
        a, b = inc.analyse(got, tenant="t", now=float(n)), scratch.analyse(expected, tenant="t", now=float(n))
        assert a.tokenized == b.tokenized, n
        assert a.prediction == b.prediction, n
        rules = a.info.cache
        ttl = 86_400.0 if got.param("prompt_cache_retention") == "24h" else rules.ttl_seconds
        scope, stream = Engine.scope("t", got), tuple(salted_tokens(got, a.tokenized))
        assert salted.lookup(scope, stream, now=float(n), ttl=ttl) == a.match, n
        salted.insert(scope, stream, now=float(n), entry_id=a.entry_id, ttl=ttl)
        # The calibration key, taken from the basis' where it can be, is the one digested whole.
        assert keys.of(got) == fixed_digest(expected), n
        # Entry ids are unique per analysis; what they point to is compared through the matches.
        assert replace(a.match, entry_id=None) == replace(b.match, entry_id=None), n
        # Attribution's areas, grown from the earlier prompt's where it can, are the scanned ones.
        assert structure._areas(got) == structure._scan_areas(got.segments), n
        # So are the markers and the image count, taken from the basis' where they can be.
        markers = tuple(i for i, seg in enumerate(got.segments) if seg.cache_control is not None)
        assert markers_of.MARKED.of(got) == markers, n
        assert model_params._image_count(got) == model_params._images_in(got.segments), n
        # And where it parts from its basis, which attribution takes from the basis unlooked at.
        earlier = got.basis.prompt() if got.basis is not None else None
        if earlier is not None:
            digests = zip(earlier.segments, got.segments, strict=False)
            first = next((i for i, (x, y) in enumerate(digests) if x.digest != y.digest), None)
            want = min(len(earlier.segments), len(got.segments)) if first is None else first
            assert structure.next_index(earlier.segments, got.segments) == want, n


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses", "anthropic"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_incremental_equals_scratch(provider: Provider, data: st.DataObject) -> None:
    _check(provider, data.draw(conversations(provider)))


def _chat(items: list[Any], model: str = "gpt-4o") -> bytes:
    return json.dumps(_body("openai-chat", model, items, True)).encode()


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}],
    }


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # The call that named c1 is gone: the result read after it is no longer "functions.f".
        (
            [{"role": "user", "content": "a"}, _call("c1", "f")],
            [{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "c1", "content": "r"}],
        ),
        # The call was edited to another function: the result after it is named by the new one.
        (
            [_call("c1", "f"), {"role": "user", "content": "b"}],
            [_call("c1", "g"), {"role": "tool", "tool_call_id": "c1", "content": "r"}],
        ),
        # Same bytes but for a value that == would call equal.
        ([{"role": "user", "content": "a", "flag": 1}], [{"role": "user", "content": "a", "flag": True}]),
    ],
)
def test_state_and_values_at_the_resume_point(before: list[Any], after: list[Any]) -> None:
    _check("openai-chat", [_chat(before), _chat(after)])


def test_a_switch_of_model_rereads_images() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}
    items = [{"role": "user", "content": [image]}, {"role": "user", "content": "b"}]
    _check("openai-chat", [_chat(items), _chat([*items, {"role": "user", "content": "c"}], "gpt-4.1-mini")])


def test_citations_revealed_before_the_resume_point_still_count() -> None:
    doc = {
        "role": "user",
        "content": [
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "d"},
                "citations": {"enabled": True},
            }
        ],
    }
    first = [doc, {"role": "assistant", "content": "ok"}]
    bodies = [
        json.dumps(_body("anthropic", "claude-sonnet-4-5", items, False)).encode()
        for items in (first, [*first, {"role": "user", "content": "more"}])
    ]
    _check("anthropic", bodies)
    reader = ConversationReader()
    prompts = [reader.parse(load_body(raw), tenant="t") for raw in bodies]
    assert prompts[1].basis is not None and dict(prompts[1].params).get("citations") == "on"


def test_tokenizing_resumes_from_the_earlier_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter starts where the basis' stream parts (it does not re-walk the segments it shares)."""
    items = [{"role": "user", "content": f"turn {i}"} for i in range(30)]
    reader, engine = ConversationReader(), Engine()
    engine.analyse(reader.parse(load_body(_chat(items)), tenant="t"), tenant="t", now=0.0)
    starts: list[int] = []
    original = LatestStreams.resume

    def spy(self: Any, prompt: Any) -> Any:
        found = original(self, prompt)
        starts.append(-1 if found is None else found.start)
        return found

    monkeypatch.setattr(LatestStreams, "resume", spy)
    second = reader.parse(load_body(_chat([*items, {"role": "user", "content": "new"}])), tenant="t")
    engine.analyse(second, tenant="t", now=1.0)
    assert starts == [len(second.segments) - 1]


def test_appended_turns_are_read_once() -> None:
    """The reason for all this: the second body reuses the first one's segments, not re-read copies."""
    items = [{"role": "user", "content": f"turn {i}"} for i in range(50)]
    reader = ConversationReader()
    first = reader.parse(
        load_body(json.dumps(_body("openai-chat", "gpt-4o", items, True)).encode()), tenant="t"
    )
    items.append({"role": "user", "content": "one more"})
    second = reader.parse(
        load_body(json.dumps(_body("openai-chat", "gpt-4o", items, True)).encode()), tenant="t"
    )
    assert second.basis is not None and second.basis.shared == len(first.segments)
    # Tools and the system message are re-read; every message segment is the earlier object itself.
    assert all(a is b for a, b in zip(first.segments[3:], second.segments[3:], strict=False))
    assert second.segments[-1].text == "one more"


def test_tenants_never_resume_from_each_other() -> None:
    items = [{"role": "user", "content": "shared start"}, {"role": "user", "content": "and more"}]
    raw = json.dumps(_body("openai-chat", "gpt-4o", items, False)).encode()
    reader = ConversationReader()
    reader.parse(load_body(raw), tenant="a")
    assert reader.parse(load_body(raw), tenant="b").basis is None
    assert reader.parse(load_body(raw), tenant="a").basis is not None


@pytest.mark.parametrize(
    ("a", "b", "at"),
    [
        (b"", b"", 0),
        (b"abc", b"abc", 3),
        (b"abc", b"abd", 2),
        (b"abc", b"ab", 2),
        (b"x" * 1000 + b"y", b"x" * 1001, 1000),
    ],
)
def test_first_difference(a: bytes, b: bytes, at: int) -> None:
    assert first_difference(a, b) == at == first_difference(b, a)


def test_a_stream_cut_below_its_resume_point_is_not_claimed_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter tells the index that a resumed stream starts with its basis' head (query.derived)
    only while nothing cut the stream below that head: a framing correction that drops more than the
    new segment added (a call's large negative correction here) moves every later block."""
    import cachewarden.proxy.engine.counting as counting
    from cachewarden.proxy.engine.index import query

    real = counting.framing_for
    monkeypatch.setattr(counting, "framing_for", lambda p, m: replace(real(p, m), per_tool_call=-40))
    items: list[Any] = [{"role": "user", "content": f"turn {i} " + "word " * 20} for i in range(12)]
    bodies = [
        _chat(items),
        _chat([*items, _call("c1", "f")]),
        _chat([*items, _call("c1", "f"), _call("c2", "g")]),
    ]
    _check("openai-chat", bodies)
    reader, engine = ConversationReader(), Engine()
    streams = []
    for n, raw in enumerate(bodies):
        prompt = reader.parse(reader.load(raw, tenant="t"), "openai-chat", tenant="t")
        streams.append(engine.analyse(prompt, tenant="t", now=float(n)).tokenized.tokens)
    for stream in streams[1:]:
        claim = query._derived.get(id(stream))
        if claim is not None and claim[0] is stream:
            earlier, shared = claim[1], claim[2]
            assert stream[:shared] == earlier[:shared]


def test_a_basis_resumed_twice_gives_each_prompt_its_own_stream() -> None:
    """The earlier stream's lists go to the first prompt that resumes from them, which extends them
    in place; a second one on the same basis (a retry, a branch) copies the stream instead: then
    neither branch, nor a prompt resumed from either, sees the other's turn."""
    items: list[Any] = [{"role": "user", "content": f"turn {i}"} for i in range(20)]
    inc, scratch = Engine(), Engine()
    held: dict[str, Any] = {}

    def step(name: str, basis: str | None, texts: list[str], n: int) -> None:
        raw = _chat([*items, *({"role": "user", "content": t} for t in texts)])
        prompt = parse_request(load_body(raw))
        resumed = prompt
        if basis is not None:
            earlier = held[basis]
            resumed = replace(prompt, basis=Basis(weakref.ref(earlier), len(earlier.segments)))
        held[name] = resumed
        got, want = (
            inc.analyse(resumed, tenant="t", now=float(n)),
            scratch.analyse(prompt, tenant="t", now=float(n)),
        )
        assert got.tokenized == want.tokenized, name
        assert replace(got.match, entry_id=None) == replace(want.match, entry_id=None), name

    step("base", None, [], 0)
    step("left", "base", ["left"], 1)
    step("right", "base", ["right"], 2)
    step("left2", "left", ["left", "and on"], 3)
    step("right2", "right", ["right", "and on"], 4)


def test_items_are_taken_over_unread_only_from_the_body_they_were_read_from() -> None:
    """A body ``load`` grew from an earlier one resumes that body's run without a dump or a compare
    (its first items are that body's objects); when the conversation's latest run was read from
    another body meanwhile (here one that shares every item object but an edited middle one), the
    items are compared as usual."""
    items: list[Any] = [{"role": "user", "content": f"turn {i}"} for i in range(8)]
    first, grown = _chat(items), _chat([*items, {"role": "user", "content": "next"}])
    reader = ConversationReader()
    body = reader.load(first, tenant="t")
    reader.parse(body, "openai-chat", tenant="t")
    later = reader.load(grown, tenant="t")
    assert later["messages"][0] is body["messages"][0]  # spliced: the earlier body's objects
    edited = {
        **body,
        "messages": [*body["messages"][:4], {"role": "user", "content": "edited"}, *body["messages"][5:]],
    }
    assert reader.parse(edited, "openai-chat", tenant="t") == parse_request(
        load_body(json.dumps(edited).encode())
    )
    assert reader.parse(later, "openai-chat", tenant="t") == parse_request(load_body(grown))


def test_a_grown_body_resumes_without_dumping_its_items(monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual case costs what the body appends: its items are not dumped as a whole again."""
    from cachewarden.proxy.engine.adapters import _items

    items: list[Any] = [{"role": "user", "content": f"turn {i}"} for i in range(40)]
    reader = ConversationReader()
    reader.parse(reader.load(_chat(items), tenant="t"), "openai-chat", tenant="t")
    dumped: list[int] = []
    real = _items.orjson.dumps

    def spy(value: Any, *args: Any) -> bytes:
        if isinstance(value, list):
            dumped.append(len(value))
        return real(value, *args)

    monkeypatch.setattr(_items, "orjson", type("J", (), {"dumps": staticmethod(spy)}))
    raw = _chat([*items, {"role": "user", "content": "next"}])
    got = reader.parse(reader.load(raw, tenant="t"), "openai-chat", tenant="t")
    assert not any(n > 2 for n in dumped), dumped
    assert got == parse_request(load_body(raw)) and got.basis is not None


def test_a_head_edited_in_place_is_not_part_of_the_basis() -> None:
    """A basis names only segments that are the earlier prompt's: a tool edited in place (same
    number of tools, so every message segment is still taken over) leaves the prompt without one,
    and the counter and attribution, which take a basis on trust, see the edit."""
    items: list[Any] = [{"role": "user", "content": f"turn {i}"} for i in range(6)]
    body = _body("openai-chat", "gpt-4o", items, True)
    edited = copy.deepcopy(body)
    edited["tools"][1]["function"]["description"] = "Write a file, or append to it."
    edited["messages"].append({"role": "user", "content": "next"})
    bodies = [json.dumps(body).encode(), json.dumps(edited).encode()]
    _check("openai-chat", bodies)
    reader = ConversationReader()
    first, second = (reader.parse(load_body(raw), tenant="t") for raw in bodies)
    assert second.basis is None
    assert structure.next_index(first.segments, second.segments) == 1


@pytest.mark.parametrize("provider", ["openai-chat", "anthropic"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_interleaved_conversations_of_one_tenant_equal_scratch(
    provider: Provider, data: st.DataObject
) -> None:
    # Many conversations share a tenant's scope: each request resumes (and its walk adopts) the
    # earlier one of its own conversation, not the scope's last one, and still equals scratch.
    runs = [data.draw(conversations(provider)) for _ in range(data.draw(st.integers(2, 3)))]
    order = data.draw(st.permutations([i for i, run in enumerate(runs) for _ in run]))
    at = [0] * len(runs)
    bodies = []
    for i in order:
        bodies.append(runs[i][at[i]])
        at[i] += 1
    _check(provider, bodies)


def test_a_result_added_to_the_results_of_parallel_calls_rereads_them_all() -> None:
    """The results of parallel calls are one rendered message (counting._parallel_run): the body that
    adds the second result must not resume after the first one, which the earlier body closed."""
    calls = [
        {"id": f"c{k}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for k in (0, 1)
    ]
    items = [
        {"role": "user", "content": "both"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c0", "content": "one"},
    ]
    bodies = [_chat(items), _chat([*items, {"role": "tool", "tool_call_id": "c1", "content": "two"}])]
    _check("openai-chat", bodies)
