"""Optimize mode: the Anthropic breakpoint rule, OpenAI prompt_cache_key, and the stream-usage round trip
(the proxy asks for usage, reads it, and hands the client the stream it asked for), in units and
end to end over real sockets with the official SDKs in front of the emulator."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.prompt import Provider
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.hooks import Flow, Timings
from cachewarden.proxy.server.metrics import Metrics
from cachewarden.proxy.server.transforms.optimize import (
    STRIP_USAGE_CHUNK,
    BreakpointPlanner,
    Optimizer,
    ReuseCounter,
    cache_key_for,
    request_stream_usage,
)
from cachewarden.proxy.server.transforms.rewriter import CacheRewriter
from cachewarden.proxy.server.transforms.usage_stream import (
    UsageChunkStripper,
    drop_null_usage,
    edit_chat_event,
    identity_encoding,
)
from cachewarden.proxy.testing import metric_sum, scrape, serving

MODEL = "claude-sonnet-5"  # minimum cacheable prefix: 1024 tokens in the model table
POLICY = " ".join(
    f"Rule {i}: answer questions about topic {i} using section {i} of the handbook." for i in range(150)
)
ROUTES: dict[Provider, str] = {
    "openai-chat": "openai-chat",
    "openai-responses": "openai-responses",
    "anthropic": "anthropic-messages",
}


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


def flow(
    provider: Provider = "anthropic",
    *,
    tenant: str = "team-a",
    at: float = 1000.0,
    upstream: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Flow:
    return Flow(
        id="f",
        route=ROUTES[provider],
        provider=provider,
        upstream=upstream or ("anthropic" if provider == "anthropic" else "openai"),
        method="POST",
        path="/v1/x",
        request_body=b"",
        request_headers=headers,
        key_hash=None,
        tenant=tenant,
        timings=Timings(received=0.0, received_at=at),
    )


def messages_body(question: str = "What is rule 3?", system: Any = POLICY, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 100,
        "system": system,
        "messages": [{"role": "user", "content": question}],
        **extra,
    }


def breakpoints(body: dict[str, Any]) -> int:
    text = json.dumps(body)
    return text.count('"cache_control"')


# -- reuse counting ----------------------------------------------------------------------------------


def test_reuse_counter_runs_within_the_ttl() -> None:
    counter = ReuseCounter(max_entries=2)
    assert counter.seen("a", 0, 300) == 0
    assert counter.sight("a", 0, 300) == 1
    assert counter.sight("a", 299, 300) == 2  # each sighting refreshes, as a cache read does
    assert counter.sight("a", 598, 300) == 3
    assert counter.sight("a", 898, 300) == 1  # lapsed: the provider's entry would have expired
    counter.sight("b", 900, 300)
    counter.sight("c", 900, 300)
    assert counter.seen("a", 900, 300) == 0  # bounded: least recently seen dropped


# -- the Anthropic breakpoint rule ---------------------------------------------------------------------


def test_no_breakpoint_on_the_first_sighting_then_one_on_the_reused_system(engine: Engine) -> None:
    planner = BreakpointPlanner(engine)
    first = messages_body("What is rule 3?")
    assert planner.apply(first, "team-a", 1000.0) is False
    assert breakpoints(first) == 0
    second = messages_body("What is rule 7?")  # another question: only tools + system are reused
    assert planner.apply(second, "team-a", 1010.0) is True
    assert second["system"] == [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in second  # no automatic breakpoint: this history was never seen


def test_block_system_gets_the_mark_on_its_last_block(engine: Engine) -> None:
    planner = BreakpointPlanner(engine)
    system = [{"type": "text", "text": "Preamble."}, {"type": "text", "text": POLICY}]
    for n, at in enumerate((0.0, 5.0)):
        body = messages_body(f"q{n}", system=json.loads(json.dumps(system)))
        placed = planner.apply(body, "t", at)
    assert placed and body["system"][1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["system"][0]


def test_a_continuing_conversation_gets_automatic_caching(engine: Engine) -> None:
    planner = BreakpointPlanner(engine)
    turn1 = messages_body("What is rule 3?", system="Be brief.")
    turn1["messages"][0]["content"] = POLICY  # long history, short system
    planner.apply(json.loads(json.dumps(turn1)), "t", 0.0)
    turn2 = json.loads(json.dumps(turn1))
    turn2["messages"] += [
        {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
        {"role": "user", "content": "And rule 4?"},
    ]
    assert planner.apply(turn2, "t", 10.0) is True
    assert turn2["cache_control"] == {"type": "ephemeral"}
    assert turn2["system"] == "Be brief."  # the system prefix alone is below the minimum: no mark there
    assert breakpoints(turn2) <= 4


def test_a_repeated_request_counts_as_reused_history(engine: Engine) -> None:
    planner = BreakpointPlanner(engine)
    planner.apply(messages_body(), "t", 0.0)
    again = messages_body()
    assert planner.apply(again, "t", 1.0)
    assert again["cache_control"] == {"type": "ephemeral"} and "cache_control" in again["system"][0]
    assert breakpoints(again) == 2


def test_no_breakpoint_below_the_minimum(engine: Engine) -> None:
    planner = BreakpointPlanner(engine)
    for n in range(4):
        body = messages_body("What is rule 3?", system="You are terse.")
        assert planner.apply(body, "t", float(n)) is False
        assert breakpoints(body) == 0


@pytest.mark.parametrize(
    "marked",
    [
        {"cache_control": {"type": "ephemeral"}},
        {"system": [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
                }
            ]
        },
        {"tools": [{"name": "f", "input_schema": {}, "cache_control": {"type": "ephemeral"}}]},
    ],
)
def test_no_breakpoint_when_the_client_placed_one(engine: Engine, marked: dict[str, Any]) -> None:
    planner = BreakpointPlanner(engine)
    for at in (0.0, 1.0, 2.0):
        body = messages_body(**marked)
        before = json.dumps(body)
        assert planner.apply(body, "t", at) is False
        assert json.dumps(body) == before


def test_reuse_is_per_tenant_and_within_the_ttl(engine: Engine) -> None:
    planner = BreakpointPlanner(engine)
    planner.apply(messages_body("a"), "team-a", 0.0)
    assert planner.apply(messages_body("b"), "team-b", 1.0) is False  # another tenant's first sighting
    assert planner.apply(messages_body("c"), "team-a", 400.0) is False  # team-a again, after the 5 min TTL
    assert planner.apply(messages_body("d"), "team-a", 410.0) is True


def test_optimizer_leaves_named_upstreams_alone(engine: Engine) -> None:
    optimizer = Optimizer(engine)
    body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    assert optimizer.apply(body, flow("openai-chat", upstream="vllm")) == []
    assert "prompt_cache_key" not in body and "stream_options" not in body


# -- prompt_cache_key ----------------------------------------------------------------------------------


def test_prompt_cache_key_is_stable_per_tenant_and_never_the_key(engine: Engine) -> None:
    optimizer = Optimizer(engine)
    api_key_tenant = "key:0123456789abcdef01234567"  # how the proxy names a tenant without a header
    keys: list[str] = []
    for tenant in (api_key_tenant, api_key_tenant, "team-b"):
        body: dict[str, Any] = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
        assert optimizer.apply(body, flow("openai-chat", tenant=tenant)) == ["prompt-cache-key"]
        keys.append(body["prompt_cache_key"])
    assert keys[0] == keys[1] != keys[2]
    assert re.fullmatch(r"cw-[0-9a-f]{32}", keys[0])
    assert "0123456789abcdef" not in keys[0] and "team-b" not in keys[2]
    responses: dict[str, Any] = {"model": "gpt-5", "input": "hi"}
    optimizer.apply(responses, flow("openai-responses", tenant=api_key_tenant))
    assert responses["prompt_cache_key"] == keys[0]


def test_prompt_cache_key_per_session_when_configured(engine: Engine) -> None:
    optimizer = Optimizer(engine, session_header="x-session-id")
    seen = []
    for session in ("s1", "s1", "s2"):
        body: dict[str, Any] = {"model": "gpt-5", "input": "hi"}
        optimizer.apply(body, flow("openai-responses", headers=(("x-session-id", session),)))
        seen.append(body["prompt_cache_key"])
    assert seen[0] == seen[1] != seen[2]
    assert seen[0] == cache_key_for("team-a", "s1") != cache_key_for("team-a")


def test_the_clients_own_prompt_cache_key_wins(engine: Engine) -> None:
    body = {"model": "gpt-5", "input": "hi", "prompt_cache_key": "mine"}
    assert Optimizer(engine).apply(body, flow("openai-responses")) == []
    assert body["prompt_cache_key"] == "mine"


def test_rewriter_sets_the_key_only_in_optimize_mode(engine: Engine) -> None:
    request = json.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}).encode()
    f = flow("openai-chat")
    f.request_body = request
    assert CacheRewriter(Metrics()).rewrite(f) is None
    metrics = Metrics()
    out = CacheRewriter(metrics, mode="optimize", optimizer=Optimizer(engine)).rewrite(f)
    assert out is not None and json.loads(out)["prompt_cache_key"].startswith("cw-")
    sample = metrics.registry.get_sample_value(
        "cachewarden_canonicalized_requests_total",
        {"provider": "openai-chat", "model": "gpt-5", "transform": "prompt-cache-key"},
    )
    assert sample == 1.0


# -- stream usage: the request side -------------------------------------------------------------------


def test_request_stream_usage_only_when_the_client_did_not_ask() -> None:
    assert request_stream_usage({"stream": False}) is False
    body: dict[str, Any] = {"stream": True}
    assert request_stream_usage(body) and body["stream_options"] == {"include_usage": True}
    body = {"stream": True, "stream_options": {"include_obfuscation": False, "include_usage": False}}
    assert request_stream_usage(body)
    assert body["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert request_stream_usage({"stream": True, "stream_options": {"include_usage": True}}) is False


def test_the_rewriter_flags_the_flow_for_the_relay(engine: Engine) -> None:
    rewriter = CacheRewriter(Metrics(), mode="optimize", optimizer=Optimizer(engine))
    for stream_options, flagged in ((None, True), ({"include_usage": True}, False)):
        body: dict[str, Any] = {"model": "gpt-4.1", "messages": [], "stream": True, "prompt_cache_key": "k"}
        if stream_options is not None:
            body["stream_options"] = stream_options
        f = flow("openai-chat")
        f.request_body = json.dumps(body).encode()
        rewriter.rewrite(f)
        assert bool(f.metadata.get(STRIP_USAGE_CHUNK)) is flagged


def test_identity_encoding_replaces_accept_encoding() -> None:
    headers = [(b"accept-encoding", b"gzip, br"), (b"x-a", b"1")]
    assert identity_encoding(headers) == [(b"x-a", b"1"), (b"accept-encoding", b"identity")]


# -- stream usage: what the client sees ---------------------------------------------------------------

CHUNK = (
    '{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}],'
    '"usage":null}'
)
USAGE = (
    '{"id":"c","object":"chat.completion.chunk","choices":[],'
    '"usage":{"prompt_tokens":9,"completion_tokens":1}}'
)


def test_drop_null_usage_edits_the_text_minimally() -> None:
    assert drop_null_usage(CHUNK) == CHUNK.replace(',"usage":null', "")
    assert drop_null_usage('{"usage": null, "a": 1}') == '{"a": 1}'
    assert (
        drop_null_usage('{ "a" : "\\"usage\\":null" ,\n "usage" : null }') == '{ "a" : "\\"usage\\":null" }'
    )
    assert drop_null_usage('{"usage":null}') == "{}"
    assert drop_null_usage('{"a":{"usage":null}}') is None  # only the top-level member
    assert drop_null_usage('{"usage":{"prompt_tokens":1}}') is None


def test_edit_chat_event() -> None:
    assert (
        edit_chat_event(f"data: {CHUNK}\n\n".encode())
        == f"data: {CHUNK}\n\n".replace(',"usage":null', "").encode()
    )
    assert edit_chat_event(f"data: {USAGE}\n\n".encode()) == b""
    assert edit_chat_event(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"
    error = b'data: {"error":{"message":"x"}}\n\n'
    assert edit_chat_event(error) == error
    crlf = f"data:{CHUNK}\r\n\r\n".encode()
    assert edit_chat_event(crlf) == f"data:{CHUNK}\r\n\r\n".replace(',"usage":null', "").encode()
    filtered = b'data: {"choices":[],"prompt_filter_results":[],"usage":null}\n\n'  # Azure: kept, minus usage
    assert edit_chat_event(filtered) == b'data: {"choices":[],"prompt_filter_results":[]}\n\n'


def test_stripper_handles_events_split_anywhere() -> None:
    upstream = f"data: {CHUNK}\n\ndata: {CHUNK}\n\ndata: {USAGE}\n\ndata: [DONE]\n\n".encode()
    expected = f"data: {CHUNK}\n\ndata: {CHUNK}\n\ndata: [DONE]\n\n".replace(',"usage":null', "").encode()
    for size in (1, 7, 64, len(upstream)):
        stripper = UsageChunkStripper()
        out = b"".join(stripper.feed(upstream[i : i + size]) for i in range(0, len(upstream), size))
        assert out + stripper.flush() == expected


def test_stripper_gives_up_on_an_oversized_event() -> None:
    stripper = UsageChunkStripper(limit=16)
    big = b"data: " + b"x" * 40
    assert stripper.feed(big) == big
    assert stripper.feed(f"\n\ndata: {USAGE}\n\n".encode()) == f"\n\ndata: {USAGE}\n\n".encode()


# -- end to end: SDKs -> proxy (optimize) -> emulator, over real sockets -------------------------------

# uvicorn as ``cachewarden proxy`` runs it: no Server / Date headers of its own.
AS_THE_CLI: dict[str, Any] = {"server_header": False, "date_header": False, "timeout": 15}


@pytest.fixture
def stack() -> Iterator[tuple[str, str]]:
    """(emulator URL, optimize-mode proxy URL in front of it)."""
    with serving(create_emulator(), "emulator", **AS_THE_CLI) as emulator:
        settings = Settings(mode="optimize", openai_upstream=emulator.url, anthropic_upstream=emulator.url)
        with serving(build(settings), "proxy", **AS_THE_CLI) as proxy:
            yield emulator.url, proxy.url


def metric(proxy_url: str, name: str, labels: dict[str, str], until: Callable[[float], bool]) -> float:
    """The sample's value, polled until ``until`` holds (the proxy counts after the response ended)."""
    deadline = time.monotonic() + 5
    while True:
        value = metric_sum(scrape(proxy_url), name, **labels)
        if until(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def test_anthropic_conversation_without_cache_control_reads_from_the_third_request(
    stack: tuple[str, str],
) -> None:
    _, proxy = stack
    client = anthropic.Anthropic(api_key="sk-ant-e2e", base_url=proxy, max_retries=0)
    history: list[Any] = []
    usage = []
    try:
        for question in ("What is rule 3?", "And rule 4?", "And rule 5?", "And rule 6?"):
            history.append({"role": "user", "content": question})
            reply = client.messages.create(model=MODEL, max_tokens=100, system=POLICY, messages=history)
            history.append({"role": "assistant", "content": reply.content[0].text})  # type: ignore[union-attr]
            usage.append(reply.usage)
    finally:
        client.close()
    assert [u.cache_read_input_tokens for u in usage][:2] == [0, 0]
    assert usage[0].cache_creation_input_tokens == 0  # first sighting: no breakpoint, no write premium
    assert usage[1].cache_creation_input_tokens  # reused: breakpoints placed and written
    assert all(u.cache_read_input_tokens and u.cache_read_input_tokens > 1024 for u in usage[2:])
    labels = {"provider": "anthropic", "model": MODEL, "transform": "cache-breakpoint"}
    assert metric(proxy, "cachewarden_canonicalized_requests_total", labels, lambda v: v == 3) == 3
    # The analysis saw the body as forwarded, breakpoints included: it predicts the reads (without
    # them it would predict none; a token of rounding between estimator and emulator is not ours).
    read = sum(u.cache_read_input_tokens or 0 for u in usage)
    predicted = {"provider": "anthropic", "model": MODEL, "source": "predicted", "kind": "cached"}

    def close(v: float) -> bool:
        return abs(v - read) <= 0.01 * read

    assert close(metric(proxy, "cachewarden_input_tokens_total", predicted, close))


def _normalised(raw: bytes) -> bytes:
    """A stream without what differs per call (ids, timestamps)."""
    raw = re.sub(rb'"id":"chatcmpl-[0-9a-zA-Z]+"', b'"id":"X"', raw)
    return re.sub(rb'"created":\d+', b'"created":0', raw)


def test_streamed_chat_without_include_usage_looks_like_a_direct_call(stack: tuple[str, str]) -> None:
    emulator, proxy = stack
    request = {
        "model": "gpt-4.1",
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "stream": True,
    }
    headers = {"authorization": "Bearer sk-e2e"}
    raw = []
    for base in (emulator, proxy):
        with httpx.stream("POST", base + "/v1/chat/completions", json=request, headers=headers) as response:
            # Decoded: the emulator compresses for a client that accepts it, while the proxy asks
            # the upstream for identity so that it can edit the stream; the client reads the same.
            raw.append(b"".join(response.iter_bytes()))
    assert b'"usage"' not in raw[0]
    assert _normalised(raw[1]) == _normalised(raw[0])  # byte for byte, but for ids and timestamps

    sdk_chunks = []
    for base in (emulator, proxy):
        with openai.OpenAI(api_key="sk-e2e", base_url=base + "/v1", max_retries=0) as client:
            stream = client.chat.completions.create(
                model="gpt-4.1", messages=[{"role": "user", "content": "Tell me a story."}], stream=True
            )
            sdk_chunks.append([chunk.to_dict() for chunk in stream])
    direct, proxied = sdk_chunks
    assert [{k: v for k, v in c.items() if k not in ("id", "created")} for c in proxied] == [
        {k: v for k, v in c.items() if k not in ("id", "created")} for c in direct
    ]
    assert all(c["choices"] and "usage" not in c for c in proxied)  # no usage chunk, no usage key
    # ... while the proxy asked for usage upstream and counted it.
    usage_labels = {"provider": "openai-chat", "model": "gpt-4.1", "transform": "stream-usage"}
    assert metric(proxy, "cachewarden_canonicalized_requests_total", usage_labels, lambda v: v == 2) == 2
    reports = {"provider": "openai-chat", "state": "reported"}
    assert metric(proxy, "cachewarden_usage_reports_total", reports, lambda v: v == 2) == 2
    labels = {"provider": "openai-chat", "model": "gpt-4.1", "source": "reported", "kind": "uncached"}
    assert metric(proxy, "cachewarden_input_tokens_total", labels, lambda v: v > 0) > 0


def test_a_client_that_asked_for_usage_still_gets_it(stack: tuple[str, str]) -> None:
    _, proxy = stack
    with openai.OpenAI(api_key="sk-e2e", base_url=proxy + "/v1", max_retries=0) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4.1",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all("usage" in c.to_dict() for c in chunks)


def test_responses_get_a_prompt_cache_key_upstream(stack: tuple[str, str]) -> None:
    _, proxy = stack
    with openai.OpenAI(api_key="sk-e2e", base_url=proxy + "/v1", max_retries=0) as client:
        response = client.responses.create(model="gpt-4.1", input="hi")
    assert response.prompt_cache_key is not None and response.prompt_cache_key.startswith("cw-")
    assert "sk-e2e" not in response.prompt_cache_key
