"""Canonicalize mode: each transform before / after, idempotence and JSON-equality (hypothesis), the
rewriter's refusals and counters, and the proxy forwarding original bytes in observe mode."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import httpx
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.engine.prompt import Provider
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings, load_settings
from cachewarden.proxy.server.hooks import Flow, Timings
from cachewarden.proxy.server.metrics import Metrics
from cachewarden.proxy.server.transforms.canonicalize import (
    SAFE_TRANSFORMS,
    TRANSFORMS,
    UNSAFE_TRANSFORMS,
    Transform,
    canonical_arguments,
    canonicalize,
    newlines,
    normalise_newlines,
    output_schema_keys,
    select,
    tool_call_keys,
    tool_order,
    tool_schema_keys,
)
from cachewarden.proxy.server.transforms.rewriter import CacheRewriter, build_rewriter
from hypothesis import given, settings
from hypothesis import strategies as st

ROUTES: dict[Provider, str] = {
    "openai-chat": "openai-chat",
    "openai-responses": "openai-responses",
    "anthropic": "anthropic-messages",
}


def keys(value: Any) -> Any:
    """Key order made visible: dicts become lists of (key, value) pairs, recursively."""
    if isinstance(value, dict):
        return [(k, keys(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [keys(v) for v in value]
    return value


def run(fn: Any, body: dict[str, Any], provider: Provider) -> tuple[dict[str, Any], bool]:
    out = copy.deepcopy(body)
    changed = fn(out, provider)
    return out, changed


# -- tool schemas ------------------------------------------------------------------------------------

SCHEMA = {"type": "object", "required": ["b"], "properties": {"b": {"type": "string"}, "a": {"enum": [3, 1]}}}
SORTED_SCHEMA = {
    "properties": {"a": {"enum": [3, 1]}, "b": {"type": "string"}},
    "required": ["b"],
    "type": "object",
}


def test_tool_schema_keys_chat() -> None:
    body = {
        "model": "gpt-4.1",
        "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA, "description": "d"}}],
        "messages": [],
    }
    out, changed = run(tool_schema_keys, body, "openai-chat")
    assert changed
    tool = out["tools"][0]["function"]
    assert keys(tool["parameters"]) == keys(SORTED_SCHEMA)
    assert list(tool) == ["name", "parameters", "description"]  # the tool's own keys keep their order
    assert out == body  # JSON-equal
    assert run(tool_schema_keys, out, "openai-chat") == (out, False)


def test_tool_schema_keys_responses_and_anthropic() -> None:
    responses = {
        "model": "gpt-5",
        "tools": [{"type": "function", "name": "f", "parameters": SCHEMA}],
        "input": "x",
    }
    out, changed = run(tool_schema_keys, responses, "openai-responses")
    assert changed and keys(out["tools"][0]["parameters"]) == keys(SORTED_SCHEMA)
    anthropic = {
        "model": "claude-sonnet-4-5",
        "tools": [{"name": "f", "input_schema": SCHEMA}],
        "messages": [],
    }
    out, changed = run(tool_schema_keys, anthropic, "anthropic")
    assert changed and keys(out["tools"][0]["input_schema"]) == keys(SORTED_SCHEMA)


def test_output_schema_keys_per_provider() -> None:
    chat = {
        "model": "gpt-4.1",
        "messages": [],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": SCHEMA, "strict": True},
        },
    }
    out, changed = run(output_schema_keys, chat, "openai-chat")
    assert changed and keys(out["response_format"]["json_schema"]["schema"]) == keys(SORTED_SCHEMA)
    assert list(out["response_format"]["json_schema"]) == ["name", "schema", "strict"]
    responses = {
        "model": "gpt-5",
        "input": "x",
        "text": {"format": {"type": "json_schema", "schema": SCHEMA}},
    }
    out, changed = run(output_schema_keys, responses, "openai-responses")
    assert changed and keys(out["text"]["format"]["schema"]) == keys(SORTED_SCHEMA)
    anthropic = {
        "model": "claude-sonnet-4-5",
        "messages": [],
        "output_format": {"type": "json_schema", "schema": SCHEMA},
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
    }
    out, changed = run(output_schema_keys, anthropic, "anthropic")
    assert changed
    assert (
        keys(out["output_format"]["schema"])
        == keys(out["output_config"]["format"]["schema"])
        == keys(SORTED_SCHEMA)
    )


def test_sorted_schemas_are_left_alone() -> None:
    body = {
        "model": "gpt-4.1",
        "messages": [],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": SORTED_SCHEMA}}],
    }
    assert run(tool_schema_keys, body, "openai-chat") == (body, False)


# -- tool-call inputs ----------------------------------------------------------------------------------


def test_anthropic_tool_use_input_sorted_recursively() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "w",
                        "input": {"z": {"y": 1, "x": [{"b": 1, "a": 2}]}, "a": 0},
                    },
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
        ],
    }
    out, changed = run(tool_call_keys, body, "anthropic")
    assert changed
    block = out["messages"][1]["content"][1]
    assert keys(block["input"]) == [("a", 0), ("z", [("x", [[("a", 2), ("b", 1)]]), ("y", 1)])]
    assert list(block) == ["type", "id", "name", "input"]
    assert out == body


def test_chat_arguments_reserialised_only_when_json_objects() -> None:
    def body(arguments: str) -> dict[str, Any]:
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
        return {
            "model": "gpt-4.1",
            "messages": [{"role": "assistant", "content": None, "tool_calls": [call]}],
        }

    out, changed = run(
        tool_call_keys, body('{"city": "Paris", "days": 3, "unit": {"z": 1, "a": "é"}}'), "openai-chat"
    )
    assert changed
    assert (
        out["messages"][0]["tool_calls"][0]["function"]["arguments"]
        == '{"city":"Paris","days":3,"unit":{"a":"é","z":1}}'
    )
    for untouched in (
        '["b", "a"]',
        '"text"',
        "not json",
        '{"a": NaN}',
        '{"a": 1, "a": 2}',
        '{"a": 1e999}',
        "",
    ):
        assert run(tool_call_keys, body(untouched), "openai-chat")[1] is False, untouched
    big = '{"n":123456789012345678901234567890}'
    assert canonical_arguments(big) == big  # integers keep every digit


def test_responses_function_call_arguments() -> None:
    body = {
        "model": "gpt-5",
        "input": [
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"b":1,"a":2}'},
            {"type": "function_call_output", "call_id": "c", "output": '{"b":1,"a":2}'},
        ],
    }
    out, changed = run(tool_call_keys, body, "openai-responses")
    assert changed and out["input"][0]["arguments"] == '{"a":2,"b":1}'
    assert out["input"][1]["output"] == '{"b":1,"a":2}'  # tool output is data, not a call


# -- unsafe transforms -------------------------------------------------------------------------------


def test_tool_order_sorts_by_name_and_keeps_breakpoints_in_place() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "messages": [],
        "tools": [
            {"name": "zeta", "input_schema": {}},
            {"name": "alpha", "input_schema": {}},
            {"type": "web_search_20250305", "name": "web_search"},
            {"name": "mid", "input_schema": {}, "cache_control": {"type": "ephemeral"}},
        ],
    }
    out, changed = run(tool_order, body, "anthropic")
    assert changed
    assert [t["name"] for t in out["tools"]] == ["alpha", "mid", "web_search", "zeta"]
    assert ["cache_control" in t for t in out["tools"]] == [
        False,
        False,
        False,
        True,
    ]  # still caches all tools
    assert run(tool_order, out, "anthropic") == (out, False)
    chat = {"tools": [{"type": "function", "function": {"name": n}} for n in ("b", "a")], "messages": []}
    out, changed = run(tool_order, chat, "openai-chat")
    assert changed and [t["function"]["name"] for t in out["tools"]] == ["a", "b"]
    responses = {
        "tools": [
            {"type": "web_search"},
            {"type": "function", "name": "b"},
            {"type": "function", "name": "a"},
        ]
    }
    out, _ = run(tool_order, responses, "openai-responses")
    assert out["tools"] == [
        responses["tools"][2],
        responses["tools"][1],
        responses["tools"][0],
    ]  # unnamed last


def test_newlines_in_system_and_tool_text_only() -> None:
    assert normalise_newlines("a  \r\nb\t\r\n\r\nc \r") == "a\nb\n\nc"
    assert normalise_newlines("a\r \n") == "a\n"  # one pass: no CRLF left behind for a second one
    anthropic = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "Be brief.  \r\nReally."}],
        "tools": [
            {
                "name": "f",
                "description": "Find.\r\n",
                "input_schema": {"properties": {"q": {"description": "q \n"}}},
            }
        ],
        "messages": [{"role": "user", "content": "hi  \r\n"}],
    }
    out, changed = run(newlines, anthropic, "anthropic")
    assert changed
    assert out["system"][0]["text"] == "Be brief.\nReally."
    assert out["tools"][0]["description"] == "Find.\n"
    assert out["tools"][0]["input_schema"]["properties"]["q"]["description"] == "q\n"
    assert out["messages"] == anthropic["messages"]  # user text is not the proxy's to edit
    assert run(newlines, {"system": "x \r\n", "messages": []}, "anthropic")[0]["system"] == "x\n"
    chat = {
        "messages": [
            {"role": "developer", "content": "rules \r\n"},
            {"role": "system", "content": [{"type": "text", "text": "more\r\n"}]},
            {"role": "user", "content": "q \r\n"},
        ]
    }
    out, _ = run(newlines, chat, "openai-chat")
    assert [m["content"] for m in out["messages"]] == [
        "rules\n",
        [{"type": "text", "text": "more\n"}],
        "q \r\n",
    ]
    responses = {
        "instructions": "i \r\n",
        "input": [{"role": "system", "content": [{"type": "input_text", "text": "s "}]}],
    }
    out, _ = run(newlines, responses, "openai-responses")
    assert out["instructions"] == "i\n" and out["input"][0]["content"][0]["text"] == "s"


def test_selection_safe_by_default_unsafe_by_name() -> None:
    assert SAFE_TRANSFORMS == ("tool-schema-keys", "output-schema-keys", "tool-call-keys")
    assert UNSAFE_TRANSFORMS == ("tool-order", "newlines")
    assert [t.name for t in select()] == list(SAFE_TRANSFORMS)
    assert [t.name for t in select(["newlines"])] == [*SAFE_TRANSFORMS, "newlines"]
    with pytest.raises(ValueError, match="unknown"):
        select(["tool-schema-keys"])


# -- hypothesis: idempotence and JSON-equality ---------------------------------------------------------

names = st.sampled_from(["a", "b", "type", "z", "é", "properties", "description", "name", "A", "1"])
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from("ab \t\r\n"), max_size=6)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(names, json_values, max_size=4)
text = st.text(alphabet=st.sampled_from("ab \t\r\n"), max_size=8)
arguments = st.one_of(objects.map(json.dumps), text, json_values.map(json.dumps))


@st.composite
def bodies(draw: st.DrawFn) -> tuple[Provider, dict[str, Any]]:
    provider: Provider = draw(st.sampled_from(["openai-chat", "openai-responses", "anthropic"]))
    tool_names = st.lists(st.sampled_from(["a", "b", "c"]) | st.none(), max_size=4)
    body: dict[str, Any] = {"model": "m"}
    if provider == "anthropic":
        body["tools"] = [
            {
                **({"name": n} if n else {"type": "web"}),
                "description": draw(text),
                "input_schema": draw(objects),
            }
            | ({"cache_control": {"type": "ephemeral"}} if draw(st.booleans()) else {})
            for n in draw(tool_names)
        ]
        body["system"] = draw(
            text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2)
        )
        body["output_format"] = {"type": "json_schema", "schema": draw(objects)}
        body["messages"] = [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "a", "input": draw(objects)}],
            },
            {"role": "user", "content": draw(text)},
        ]
    elif provider == "openai-chat":
        body["tools"] = [
            {"type": "function", "function": {"name": n, "parameters": draw(objects)}}
            for n in draw(tool_names)
        ]
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": draw(objects)},
        }
        body["messages"] = [
            {"role": "system", "content": draw(text)},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "a", "arguments": draw(arguments)}}
                ],
            },
        ]
    else:
        body["instructions"] = draw(text)
        body["tools"] = [
            {"type": "function", "name": n, "parameters": draw(objects)} for n in draw(tool_names)
        ]
        body["text"] = {"format": {"type": "json_schema", "schema": draw(objects)}}
        body["input"] = [{"type": "function_call", "call_id": "c", "name": "a", "arguments": draw(arguments)}]
    return provider, body


def parsed_arguments(value: Any) -> Any:
    """Equality as the provider sees it: ``arguments`` strings compared as parsed JSON when they parse."""
    if isinstance(value, dict):
        out = {k: parsed_arguments(v) for k, v in value.items()}
        if isinstance(value.get("arguments"), str):
            with contextlib.suppress(ValueError):
                out["arguments"] = ("json", json.loads(value["arguments"]))
        return out
    if isinstance(value, list):
        return [parsed_arguments(v) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(bodies(), st.sampled_from(TRANSFORMS))
def test_each_transform_is_idempotent(case: tuple[Provider, dict[str, Any]], transform: Transform) -> None:
    provider, body = case
    once, _ = run(transform.apply, body, provider)
    twice, changed_again = run(transform.apply, once, provider)
    assert not changed_again
    assert keys(twice) == keys(once)


@settings(max_examples=300, deadline=None)
@given(bodies(), st.sampled_from([t for t in TRANSFORMS if t.safe]))
def test_safe_transforms_keep_the_body_json_equal(
    case: tuple[Provider, dict[str, Any]], transform: Transform
) -> None:
    provider, body = case
    out, changed = run(transform.apply, body, provider)
    assert parsed_arguments(out) == parsed_arguments(body)  # dict equality ignores key order
    if not changed:
        assert keys(out) == keys(body)  # "unchanged" means byte-for-byte the same order too


@settings(max_examples=200, deadline=None)
@given(bodies(), st.sets(st.sampled_from(UNSAFE_TRANSFORMS)))
def test_the_composition_is_idempotent(case: tuple[Provider, dict[str, Any]], unsafe: set[str]) -> None:
    provider, body = case
    chosen = select(unsafe)
    once = copy.deepcopy(body)
    canonicalize(once, provider, chosen)
    twice = copy.deepcopy(once)
    assert canonicalize(twice, provider, chosen) == []
    assert keys(twice) == keys(once)


# -- the rewriter ------------------------------------------------------------------------------------


def flow(
    body: bytes | dict[str, Any], provider: Provider = "openai-chat", upstream: str | None = None
) -> Flow:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Flow(
        id="f",
        route=ROUTES[provider],
        provider=provider,
        upstream=upstream or ("anthropic" if provider == "anthropic" else "openai"),
        method="POST",
        path="/v1/x",
        request_body=raw,
        request_headers=(),
        key_hash=None,
        tenant="t",
        timings=Timings(received=0.0),
    )


UNSORTED_CHAT = {
    "model": "gpt-4.1",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}],
    "messages": [{"role": "user", "content": "héllo"}],
    "temperature": 0.5,
}


def counter(metrics: Metrics, transform: str, provider: str = "openai-chat", model: str = "gpt-4.1") -> float:
    value = metrics.registry.get_sample_value(
        "cachewarden_canonicalized_requests_total",
        {"provider": provider, "model": model, "transform": transform},
    )
    return value or 0.0


def test_rewriter_reserialises_only_the_transformed_subtrees() -> None:
    metrics = Metrics()
    out = CacheRewriter(metrics).rewrite(flow(UNSORTED_CHAT))
    assert out is not None
    assert (
        out
        == json.dumps(
            {
                **UNSORTED_CHAT,
                "tools": [{"type": "function", "function": {"name": "f", "parameters": SORTED_SCHEMA}}],
            },
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()
    )
    assert list(json.loads(out)) == ["model", "tools", "messages", "temperature"]
    assert counter(metrics, "tool-schema-keys") == 1 and counter(metrics, "output-schema-keys") == 0


def test_rewriter_returns_none_when_nothing_changes_or_the_body_is_not_strict_json() -> None:
    rewriter = CacheRewriter(Metrics())
    canonical = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
    assert rewriter.rewrite(flow(canonical)) is None
    unsorted_params = (
        b'{"model":"gpt-4.1","tools":[{"type":"function",'
        b'"function":{"name":"f","parameters":{"b":1,"a":2}}}],'
    )
    for bad in (
        b"not json",
        b"[1, 2]",
        b"\xff\xfe",
        unsorted_params + b'"messages":[],"x":NaN}',
        unsorted_params + b'"messages":[],"x":1,"x":2}',
        unsorted_params + b'"messages":[],"x":"\\ud800"}',
        unsorted_params + b'"messages":[]',
        b"[" * 100_000 + b"]" * 100_000,
    ):
        assert rewriter.rewrite(flow(bad)) is None, bad[:60]
    assert rewriter.rewrite(flow(unsorted_params + b'"messages":[]}')) is not None


def test_rewriter_applies_unsafe_transforms_only_when_named() -> None:
    body = {"model": "gpt-4.1", "messages": [{"role": "system", "content": "x \r\n"}]}
    assert CacheRewriter(Metrics()).rewrite(flow(body)) is None
    metrics = Metrics()
    out = CacheRewriter(metrics, unsafe=["newlines"]).rewrite(flow(body))
    assert out is not None and json.loads(out)["messages"][0]["content"] == "x\n"
    assert counter(metrics, "newlines") == 1


def test_rewriter_leaves_passthrough_routes_alone() -> None:
    f = flow(UNSORTED_CHAT)
    f.route = "passthrough"
    assert CacheRewriter(Metrics()).rewrite(f) is None


def test_build_rewriter_per_mode() -> None:
    from cachewarden.proxy.engine.engine import Engine

    engine = Engine()
    assert build_rewriter(Settings(mode="observe"), Metrics(), engine) is None
    rewriter = build_rewriter(
        Settings(mode="canonicalize", unsafe_transforms=("tool-order",)), Metrics(), engine
    )
    assert rewriter is not None and rewriter.optimizer is None
    assert [t.name for t in rewriter.transforms] == [*SAFE_TRANSFORMS, "tool-order"]
    optimizing = build_rewriter(Settings(mode="optimize"), Metrics(), engine)
    assert optimizing is not None and optimizing.optimizer is not None
    assert build(Settings(mode="observe")).state.proxy.rewriter is None
    assert isinstance(build(Settings(mode="canonicalize")).state.proxy.rewriter, CacheRewriter)


# -- through the app ---------------------------------------------------------------------------------


class Upstream:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.read())
        return httpx.Response(200, json={"id": "x", "choices": [], "usage": {"prompt_tokens": 1}})


async def send(app_settings: Settings, rewriter: Any, body: bytes) -> tuple[Upstream, Metrics]:
    upstream = Upstream()
    metrics = Metrics()
    app = create_app(
        app_settings, metrics=metrics, rewriter=rewriter, transport=httpx.MockTransport(upstream)
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client,
    ):
        response = await client.post("/v1/chat/completions", content=body)
        assert response.status_code == 200
    return upstream, metrics


RAW = json.dumps(UNSORTED_CHAT, indent=2).encode()


@pytest.mark.anyio
async def test_observe_mode_forwards_the_original_bytes_even_when_a_transform_applies() -> None:
    rewriter = CacheRewriter(Metrics())
    assert rewriter.rewrite(flow(RAW)) is not None  # it would apply
    upstream, _ = await send(Settings(mode="observe"), rewriter, RAW)
    assert upstream.bodies == [RAW]
    upstream, _ = await send(Settings(mode="canonicalize"), rewriter, RAW)
    assert upstream.bodies[0] != RAW and json.loads(upstream.bodies[0]) == UNSORTED_CHAT


@pytest.mark.anyio
async def test_a_failing_rewriter_forwards_the_original_body_and_counts_an_error() -> None:
    def boom(body: dict[str, Any], provider: Provider) -> bool:
        raise RuntimeError("transform bug")

    rewriter = CacheRewriter(Metrics())
    rewriter.transforms = (Transform("boom", True, boom),)
    upstream, metrics = await send(Settings(mode="canonicalize"), rewriter, RAW)
    assert upstream.bodies == [RAW]
    errors = metrics.registry.get_sample_value(
        "cachewarden_analysis_errors_total",
        {"provider": "openai-chat", "model": "gpt-4.1", "stage": "rewrite"},
    )
    assert errors == 1.0


@pytest.mark.anyio
async def test_applied_transforms_are_counted_by_the_app() -> None:
    metrics = Metrics()
    await send(Settings(mode="canonicalize"), CacheRewriter(metrics), RAW)
    assert counter(metrics, "tool-schema-keys") == 1.0


# -- configuration -----------------------------------------------------------------------------------


def test_unsafe_transforms_flag_env_and_file(tmp_path: Any) -> None:
    assert load_settings(["--unsafe-transforms", "newlines,tool-order"], env={}).unsafe_transforms == (
        "tool-order",
        "newlines",
    )
    assert load_settings([], env={"CACHEWARDEN_UNSAFE_TRANSFORMS": "newlines"}).unsafe_transforms == (
        "newlines",
    )
    config = tmp_path / "c.yaml"
    config.write_text("unsafe-transforms: [tool-order]\nsession-header: X-Session-Id\n")
    loaded = load_settings(["--config", str(config)], env={})
    assert loaded.unsafe_transforms == ("tool-order",) and loaded.session_header == "x-session-id"
    assert load_settings([], env={}).unsafe_transforms == ()
    with pytest.raises(ConfigError, match="unknown unsafe transform"):
        load_settings(["--unsafe-transforms", "tool-schema-keys"], env={})
