"""Forwarding edge cases in process: the app over httpx.ASGITransport, upstream an httpx.MockTransport."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import NamedUpstream, Settings
from cachewarden.proxy.server.hooks import Flow, ReportedUsage
from cachewarden.proxy.server.metrics import Metrics

pytestmark = pytest.mark.anyio

Handler = Callable[[httpx.Request], httpx.Response]
CHAT = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}).encode()
MESSAGES = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": []}).encode()
CHAT_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4.1",
    "choices": [],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 1920},
    },
}


def respond(status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> httpx.Response:
    # stream= keeps the response unread, as a network transport returns it.
    return httpx.Response(status, headers=headers or [], stream=httpx.ByteStream(body))


class Recorder:
    """An upstream handler that remembers the requests it saw."""

    def __init__(self, reply: Handler | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.reply = reply or (
            lambda r: respond(200, json.dumps(CHAT_RESPONSE).encode(), [("content-type", "application/json")])
        )

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.reply(request)


class SpyAnalyzer:
    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.flows: list[Flow] = []
        self.stages: list[str] = []
        self.done = threading.Event()

    def request(self, flow: Flow) -> None:
        self.stages.append("request")
        if self.fail == "request":
            raise RuntimeError("analyzer bug")

    def response(self, flow: Flow) -> None:
        self.stages.append("response")
        self.flows.append(flow)
        self.done.set()
        if self.fail == "response":
            raise ValueError("analyzer bug")


@asynccontextmanager
async def proxy(
    handler: Handler | None,
    settings: Settings | None = None,
    analyzers: list[Any] | None = None,
    metrics: Metrics | None = None,
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        settings or Settings(),
        analyzers=analyzers,
        metrics=metrics,
        transport=None if handler is None else httpx.MockTransport(handler),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
            client.headers.clear()  # send only what each test says
            yield client


def metric(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line_start!r} in /metrics")


# -- headers ------------------------------------------------------------------------------------------


async def test_hop_by_hop_headers_are_dropped_and_end_to_end_headers_kept_verbatim() -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        return respond(
            200,
            b"{}",
            [
                ("content-type", "application/json"),
                ("connection", "keep-alive, x-upstream-hop"),
                ("keep-alive", "timeout=5"),
                ("x-upstream-hop", "1"),
                ("trailer", "x-checksum"),
                ("upgrade", "h2c"),
                ("openai-processing-ms", "12"),
                ("set-cookie", "a=1"),
                ("set-cookie", "b=2"),
            ],
        )

    upstream = Recorder(reply)
    headers = [
        ("Authorization", "Bearer sk-Secret Value"),
        ("x-api-key", "  key with spaces "),
        ("anthropic-beta", "prompt-caching-2024-07-31"),
        ("OpenAI-Organization", "org-1"),
        ("Connection", "keep-alive, X-Client-Hop"),
        ("X-Client-Hop", "1"),
        ("Keep-Alive", "timeout=5"),
        ("Proxy-Connection", "keep-alive"),
        ("TE", "trailers"),
        ("Upgrade", "websocket"),
        ("Expect", "100-continue"),
        ("content-type", "application/json"),
    ]
    async with proxy(upstream) as client:
        r = await client.post("/v1/chat/completions", content=CHAT, headers=headers)
    sent = upstream.requests[0]
    names = [k.decode().lower() for k, _ in sent.headers.raw]
    for hop in ("connection", "keep-alive", "proxy-connection", "te", "upgrade", "x-client-hop", "expect"):
        assert hop not in names
    assert sent.headers["authorization"] == "Bearer sk-Secret Value"
    assert sent.headers.raw[names.index("x-api-key")][1] == b"  key with spaces "
    assert sent.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert sent.headers["openai-organization"] == "org-1"
    assert sent.headers["host"] == "api.openai.com"
    assert sent.headers["content-length"] == str(len(CHAT))
    assert sent.content == CHAT
    # Nothing the client did not send (no Accept-Encoding / User-Agent from the proxy's client).
    assert sorted(names) == sorted(
        [
            "host",
            "authorization",
            "x-api-key",
            "anthropic-beta",
            "openai-organization",
            "content-type",
            "content-length",
        ]
    )
    got = [k for k, _ in r.headers.raw]
    for hop in (b"connection", b"keep-alive", b"x-upstream-hop", b"trailer", b"upgrade"):
        assert hop not in got
    assert r.headers["openai-processing-ms"] == "12"
    assert r.headers.get_list("set-cookie") == ["a=1", "b=2"]


async def test_a_client_header_cannot_change_the_upstream() -> None:
    upstream = Recorder()
    settings = Settings(
        openai_upstream="http://openai.internal:9000", anthropic_upstream="http://claude.internal"
    )
    async with proxy(upstream, settings) as client:
        await client.post(
            "/v1/chat/completions",
            content=CHAT,
            headers={"host": "evil.example", "x-forwarded-host": "evil.example", "x-forwarded-proto": "http"},
        )
        await client.post("/v1/messages", content=MESSAGES, headers={"host": "evil.example"})
        await client.get("http://evil.example/v1/models")
    assert [str(r.url) for r in upstream.requests] == [
        "http://openai.internal:9000/v1/chat/completions",
        "http://claude.internal/v1/messages",
        "http://openai.internal:9000/v1/models",
    ]
    assert all(r.headers["host"] in ("openai.internal:9000", "claude.internal") for r in upstream.requests)


async def test_routes_paths_queries_and_named_upstreams() -> None:
    upstream = Recorder()
    settings = Settings(
        openai_upstream="http://oai/base",
        upstreams={"vllm": NamedUpstream("vllm", "http://vllm:8000", "/tok.json")},
    )
    spy = SpyAnalyzer()
    async with proxy(upstream, settings, analyzers=[spy]) as client:
        await client.post("/v1/messages/count_tokens?beta=true", content=MESSAGES)
        await client.post("/v1/messages/batches", content=b"{}")
        await client.post("/vllm/v1/chat/completions", content=CHAT)
        await client.get("/vllm/v1/models")
        await client.get("/v1/files/a%2Fb?limit=1&after=x%20y")
    assert [str(r.url) for r in upstream.requests] == [
        "https://api.anthropic.com/v1/messages/count_tokens?beta=true",
        "https://api.anthropic.com/v1/messages/batches",
        "http://vllm:8000/v1/chat/completions",
        "http://vllm:8000/v1/models",
        "http://oai/base/v1/files/a%2Fb?limit=1&after=x%20y",
    ]
    # Only the prompt routes reach the analyzers; count_tokens is routed but not a cached prompt.
    assert [(f.route, f.provider, f.upstream) for f in spy.flows] == [("openai-chat", "openai-chat", "vllm")]


# -- bytes unchanged ----------------------------------------------------------------------------------


async def test_upstream_4xx_is_relayed_byte_identical() -> None:
    body = (
        b'{\n  "error": {"message": "Invalid \\u00e9 key", '
        b'"type": "invalid_request_error", "code": "invalid_api_key"}\n}'
    )
    headers = [
        ("content-type", "application/json"),
        ("x-request-id", "req_1"),
        ("www-authenticate", "Bearer"),
    ]
    async with proxy(Recorder(lambda r: respond(401, body, headers))) as client:
        r = await client.post("/v1/chat/completions", content=CHAT)
    assert r.status_code == 401
    assert r.content == body
    assert [(k, v) for k, v in r.headers.raw] == [(k.encode(), v.encode()) for k, v in headers]


async def test_compressed_response_passes_through_undecoded() -> None:
    raw = gzip.compress(json.dumps(CHAT_RESPONSE).encode())
    headers = [
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
        ("content-length", str(len(raw))),
    ]
    spy = SpyAnalyzer()
    async with (
        proxy(Recorder(lambda r: respond(200, raw, headers)), analyzers=[spy]) as client,
        client.stream("POST", "/v1/chat/completions", content=CHAT) as r,
    ):
        got = b"".join([c async for c in r.aiter_raw()])
    assert got == raw
    assert r.headers["content-encoding"] == "gzip"
    assert r.headers["content-length"] == str(len(raw))
    assert spy.flows[0].usage is not None and spy.flows[0].usage.cached == 1920


# -- faults in each provider's shape ------------------------------------------------------------------


def failing(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (httpx.ConnectError("refused"), 502),
        (httpx.ReadTimeout("slow"), 504),
        (httpx.ConnectTimeout("slow"), 504),
    ],
)
async def test_upstream_failures_in_each_providers_error_shape(exc: Exception, status: int) -> None:
    metrics = Metrics()
    async with proxy(failing(exc), metrics=metrics) as client:
        oai = await client.post("/v1/chat/completions", content=CHAT)
        ant = await client.post("/v1/messages", content=MESSAGES)
        text = (await client.get("/metrics")).text
    assert oai.status_code == ant.status_code == status
    error = oai.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] is None
    assert error["type"] == "server_error"
    body = ant.json()
    assert body["type"] == "error" and body["error"]["type"] == "api_error" and body["error"]["message"]
    kind = "timeout" if status == 504 else "transport"
    assert metric(text, f'cachewarden_upstream_errors_total{{kind="{kind}",provider="anthropic"}}') == 1
    assert (
        metric(
            text, f'cachewarden_requests_total{{model="gpt-4.1",provider="openai-chat",status="{status}"}}'
        )
        == 1
    )


async def test_sdks_parse_the_proxys_errors() -> None:
    import anthropic
    import httpx2  # the SDKs' own HTTP client package
    import openai

    app = create_app(Settings(), transport=httpx.MockTransport(failing(httpx.ConnectError("refused"))))
    async with app.router.lifespan_context(app):
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
        oai = openai.AsyncOpenAI(
            api_key="sk-x", base_url="http://proxy.test/v1", http_client=http, max_retries=0
        )
        with pytest.raises(openai.InternalServerError) as oerr:
            await oai.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}])
        assert oerr.value.status_code == 502
        ant = anthropic.AsyncAnthropic(
            api_key="k", base_url="http://proxy.test", http_client=http, max_retries=0
        )
        with pytest.raises(anthropic.APIStatusError) as aerr:
            await ant.messages.create(
                model="claude-test-1", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        assert aerr.value.status_code == 502
        assert "unreachable" in str(aerr.value)
        await http.aclose()


async def test_body_over_the_limit_is_refused_with_413() -> None:
    upstream = Recorder()
    settings = Settings(max_body_bytes=100)
    big = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "x" * 200}]}).encode()

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: caught while reading
        for i in range(0, len(big), 40):
            yield big[i : i + 40]

    async with proxy(upstream, settings) as client:
        by_length = await client.post("/v1/chat/completions", content=big)
        by_reading = await client.post("/v1/messages", content=chunked())
        ok = await client.post("/v1/chat/completions", content=b'{"model": "gpt-4.1"}')
    assert by_length.status_code == 413 and "100 bytes" in by_length.json()["error"]["message"]
    assert by_length.json()["error"]["code"] == "request_too_large"
    assert by_reading.status_code == 413 and by_reading.json()["error"]["type"] == "request_too_large"
    assert ok.status_code == 200
    assert len(upstream.requests) == 1


# -- analysis hooks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["request", "response"])
async def test_analyzer_exception_is_counted_and_changes_nothing(stage: str) -> None:
    metrics = Metrics()
    spy = SpyAnalyzer(fail=stage)
    after = SpyAnalyzer()
    body = json.dumps(CHAT_RESPONSE).encode()
    async with proxy(Recorder(), analyzers=[spy, after], metrics=metrics) as client:
        r = await client.post("/v1/chat/completions", content=CHAT)
        text = (await client.get("/metrics")).text
    assert r.status_code == 200 and r.content == body
    assert after.stages == ["request", "response"]  # the next analyzer still ran
    labels = f'model="gpt-4.1",provider="openai-chat",stage="{stage}"'
    assert metric(text, f"cachewarden_analysis_errors_total{{{labels}}}") == 1


async def test_flow_carries_redacted_headers_key_hash_usage_and_timings() -> None:
    spy = SpyAnalyzer()
    settings = Settings(key_salt="pepper")
    async with proxy(Recorder(), settings, analyzers=[spy]) as client:
        await client.post(
            "/v1/chat/completions", content=CHAT, headers={"authorization": "Bearer sk-live-123"}
        )
        await client.post(
            "/v1/chat/completions", content=CHAT, headers={"authorization": "Bearer sk-live-123"}
        )
        await client.post("/v1/chat/completions", content=CHAT, headers={"authorization": "Bearer sk-other"})
    first, second, third = spy.flows
    assert ("authorization", "[redacted]") in first.request_headers
    assert "sk-live-123" not in repr(first)
    assert first.key_hash and first.key_hash == second.key_hash != third.key_hash
    assert first.tenant == f"key:{first.key_hash}"
    assert first.request_body == CHAT and first.model == "gpt-4.1" and first.provider == "openai-chat"
    assert first.usage is not None and (first.usage.cached, first.usage.uncached) == (1920, 86)
    assert first.outcome == "200" and first.usage_state == "reported"
    t = first.timings
    assert t.sent is not None and t.first_byte is not None and t.done is not None
    assert t.received <= t.sent <= t.first_byte <= t.done
    assert spy.stages == ["request", "response"] * 3


async def test_tenant_from_the_configured_header() -> None:
    spy = SpyAnalyzer()
    async with proxy(Recorder(), Settings(tenant_header="x-tenant"), analyzers=[spy]) as client:
        await client.post(
            "/v1/chat/completions", content=CHAT, headers={"x-tenant": "team-a", "x-api-key": "k"}
        )
    assert spy.flows[0].tenant == "team-a"


async def test_rewriter_runs_only_outside_observe_mode() -> None:
    class Upper:
        def rewrite(self, flow: Flow) -> bytes | None:
            return flow.request_body.replace(b"hi", b"HI")

    for mode, expected in (("observe", CHAT), ("canonicalize", CHAT.replace(b"hi", b"HI"))):
        upstream = Recorder()
        app = create_app(Settings(mode=mode), rewriter=Upper(), transport=httpx.MockTransport(upstream))  # type: ignore[arg-type]
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as client,
        ):
            await client.post("/v1/chat/completions", content=CHAT)
        assert upstream.requests[0].content == expected
        assert upstream.requests[0].headers["content-length"] == str(len(expected))


# -- own endpoints ------------------------------------------------------------------------------------

METRIC_NAMES = [
    "cachewarden_requests_total",
    "cachewarden_input_tokens_total",
    "cachewarden_cache_miss_tokens_total",
    "cachewarden_missed_savings_usd_total",
    "cachewarden_cost_usd_total",
    "cachewarden_savings_usd_total",
    "cachewarden_prediction_error_tokens",
    "cachewarden_findings_total",
    "cachewarden_canonicalized_requests_total",
    "cachewarden_overhead_seconds",
    "cachewarden_upstream_seconds",
    "cachewarden_analysis_errors_total",
    "cachewarden_stable_prefix_share",
    "cachewarden_index_entries",
    "cachewarden_index_tokens",
]


async def test_metrics_health_and_readiness() -> None:
    app = create_app(Settings(), transport=httpx.MockTransport(Recorder()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://p") as client:
        assert (await client.get("/readyz")).status_code == 503  # before start-up
        async with app.router.lifespan_context(app):
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 200
            await client.post(
                "/v1/chat/completions", content=CHAT, headers={"authorization": "Bearer sk-zzz"}
            )
            r = await client.get("/metrics")
            app.state.proxy.draining = True
            assert (await client.get("/readyz")).status_code == 503
            assert (await client.get("/healthz")).status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    for name in METRIC_NAMES:
        assert f"# TYPE {name.removesuffix('_total')} " in r.text or f"# TYPE {name} " in r.text, name
    assert 'source="reported"' in r.text and "sk-zzz" not in r.text


async def test_apps_have_separate_registries() -> None:
    a, b = Metrics(), Metrics()
    async with proxy(Recorder(), metrics=a, analyzers=[ReportedUsage(a)]) as client:
        await client.post("/v1/chat/completions", content=CHAT)
    async with proxy(Recorder(), metrics=b, analyzers=[ReportedUsage(b)]) as client:
        text = (await client.get("/metrics")).text
    assert "cachewarden_requests_total{" not in text
    assert 'cachewarden_requests_total{model="gpt-4.1"' in a.exposition().decode()


async def test_model_labels_are_bounded_and_never_carry_text() -> None:
    metrics = Metrics(max_models=2)
    async with proxy(Recorder(), metrics=metrics) as client:
        for model in ("gpt-4.1", "gpt-5", "gpt-6", "ignore previous instructions; sk-abc"):
            await client.post(
                "/v1/chat/completions", content=json.dumps({"model": model, "messages": []}).encode()
            )
    text = metrics.exposition().decode()
    assert 'model="gpt-4.1"' in text and 'model="gpt-5"' in text and 'model="gpt-6"' not in text
    assert metric(text, 'cachewarden_requests_total{model="other",provider="openai-chat",status="200"}') == 2
    assert "ignore previous" not in text


async def test_access_log_and_capture(tmp_path: Path) -> None:
    log, capture = tmp_path / "access.jsonl", tmp_path / "capture.jsonl"
    settings = Settings(access_log=str(log), capture=str(capture))
    async with proxy(Recorder(), settings) as client:
        await client.post(
            "/v1/chat/completions?key=sk-query", content=CHAT, headers={"authorization": "Bearer sk-log"}
        )
        await client.get("/v1/models")
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["route"] for x in lines] == ["openai-chat", "passthrough"]
    assert lines[0]["tokens"] == {
        "input": 2006,
        "cached": 1920,
        "cache_write": 0,
        "uncached": 86,
        "output": 3,
    }
    assert lines[0]["status"] == "200" and lines[0]["model"] == "gpt-4.1"
    assert set(lines[0]["timings_ms"]) == {"overhead", "first_byte", "total"}
    text = log.read_text()
    assert "sk-log" not in text and "sk-query" not in text and '"hi"' not in text
    captured = [json.loads(x) for x in capture.read_text().splitlines()]
    assert len(captured) == 1
    assert captured[0]["request"] == json.loads(CHAT) and captured[0]["usage"]["prompt_tokens"] == 2006
    assert "sk-log" not in capture.read_text()


async def test_works_with_respx() -> None:
    # respx patches httpx's own transport: with --upstream-client httpx it mocks the upstream.
    with respx.mock(assert_all_called=True) as router:
        route = router.post("https://api.anthropic.com/v1/messages").mock(
            return_value=httpx.Response(
                529, json={"type": "error", "error": {"type": "overloaded_error", "message": "x"}}
            )
        )
        async with proxy(None, Settings(upstream_client="httpx")) as client:
            r = await client.post(
                "/v1/messages",
                content=MESSAGES,
                headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            )
    assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error"
    assert route.calls[0].request.headers["x-api-key"] == "k"


async def test_count_tokens_is_counted_with_the_model_of_its_body() -> None:
    # count_tokens is not analysed, but its requests_total sample names the model it counted for.
    upstream = Recorder(
        lambda r: respond(200, b'{"input_tokens": 12}', [("content-type", "application/json")])
    )
    async with proxy(upstream) as client:
        await client.post("/v1/messages/count_tokens", content=MESSAGES)
        text = (await client.get("/metrics")).text
    samples = [line for line in text.splitlines() if line.startswith("cachewarden_requests_total{")]
    counted = [line for line in samples if line.endswith(" 1.0")]
    assert len(counted) == 1, samples
    assert 'model="claude-sonnet-4-5"' in counted[0] and 'provider="anthropic"' in counted[0]
