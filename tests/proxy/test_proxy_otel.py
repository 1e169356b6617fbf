"""`cachewarden proxy --otel`: spans and metrics over OTLP/HTTP, beside Prometheus.

Real parts end to end: the official SDKs → the proxy → the emulator, and the OpenTelemetry SDK's
own OTLP/HTTP exporter → a receiver this test serves on 127.0.0.1, decoded with opentelemetry-proto.
Nothing waits on a clock: the proxy's shutdown drains its analysis and flushes the exporters, so
once the proxy has stopped, the receiver holds everything.
"""

from __future__ import annotations

import gzip
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anthropic
import anyio.to_thread
import openai
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.server.config import Settings, load_settings
from cachewarden.proxy.server.metrics import Metrics
from cachewarden.proxy.server.otel import ExportHealth
from cachewarden.proxy.server.otel_config import read_otel_config
from cachewarden.proxy.testing import free_port, metric_sum, serving
from openai.types.chat import ChatCompletionChunk
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

API_KEY = "sk-otel-test-key-0123456789"
HEADER_SECRET = "header-value-never-exported"
PROMPT_MARKER = "prompt-text-never-exported"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
RULES = [
    f"Rule {i}: for a question about item {i}, cite section {i * 7 % 13} in {10 + i} words."
    for i in range(150)
]
SYSTEM = "\n".join([PROMPT_MARKER, *RULES[:100], "Current time: 2026-12-01T08:00:00Z", *RULES[100:]])
# The same instructions with another time in the middle: a cache buster.
BUSTED = SYSTEM.replace("08:00:00Z", "08:15:00Z")


# -- the OTLP/HTTP receiver --------------------------------------------------------------------------


@dataclass
class Receiver:
    """Accepts OTLP/HTTP protobuf exports and keeps their bodies, as a Collector would receive them."""

    bodies: dict[str, list[bytes]] = field(default_factory=lambda: {"/v1/traces": [], "/v1/metrics": []})
    lock: threading.Lock = field(default_factory=threading.Lock)
    # A stalled collector: set when an export arrived, which then waits for ``hold`` to be set.
    arrived: threading.Event = field(default_factory=threading.Event)
    hold: threading.Event | None = None

    def app(self) -> Starlette:
        async def export(request: Request) -> Response:
            body = await request.body()
            self.arrived.set()
            if self.hold is not None:
                await anyio.to_thread.run_sync(self.hold.wait)
            if request.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            with self.lock:
                self.bodies[request.url.path].append(body)
            answer = (
                ExportTraceServiceResponse()
                if request.url.path == "/v1/traces"
                else ExportMetricsServiceResponse()
            )
            return Response(answer.SerializeToString(), media_type="application/x-protobuf")

        return Starlette(
            routes=[
                Route("/v1/traces", export, methods=["POST"]),
                Route("/v1/metrics", export, methods=["POST"]),
            ]
        )

    def spans(self) -> list[Span]:
        out = []
        for body in self.bodies["/v1/traces"]:
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    out.extend(scope_spans.spans)
        return out

    def resources(self) -> list[dict[str, Any]]:
        out = []
        for body in self.bodies["/v1/traces"]:
            for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
                out.append(attributes(resource_spans.resource.attributes))
        return out

    def metrics(self) -> dict[str, Any]:
        """The last export of each metric (cumulative temporality: the last one holds all)."""
        found: dict[str, Any] = {}
        for body in self.bodies["/v1/metrics"]:
            for resource_metrics in ExportMetricsServiceRequest.FromString(body).resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for m in scope_metrics.metrics:
                        found[m.name] = m
        return found

    def raw(self) -> bytes:
        return b"".join(b for bodies in self.bodies.values() for b in bodies)


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


def points(metric: Any) -> list[Any]:
    kind = metric.WhichOneof("data")
    return list(getattr(metric, kind).data_points)


# -- one workload through the proxy -----------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """What the client saw: the provider, whether it streamed, the usage as the SDK reported it."""

    provider: str
    streamed: bool
    input: int
    cached: int
    cache_write: int
    output: int
    text: str
    traced: bool = False


def workload(url: str) -> list[Sent]:
    headers = {"x-tenant": HEADER_SECRET}
    traced = {**headers, "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    sent: list[Sent] = []
    client = openai.OpenAI(api_key=API_KEY, base_url=url + "/v1", max_retries=0)
    messages: list[Any] = [{"role": "system", "content": SYSTEM}]
    for turn in range(3):
        messages.append({"role": "user", "content": f"Question {turn} about item {turn}?"})
        streamed = turn == 1
        if not streamed:
            reply = client.chat.completions.create(
                model="gpt-4.1", messages=messages, extra_headers=traced if turn == 2 else headers
            )
            text, usage = reply.choices[0].message.content or "", reply.usage
        else:
            # Read to the end of the body: the SDK's own iterator closes the connection at [DONE],
            # before the last (empty) chunk, and the proxy may then see a client that left early.
            with client.chat.completions.with_streaming_response.create(
                model="gpt-4.1",
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers=headers,
            ) as response:
                lines = [line.removeprefix("data: ") for line in response.iter_lines()]
            chunks = [ChatCompletionChunk.model_validate_json(d) for d in lines if d and d != "[DONE]"]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            usage = chunks[-1].usage
        assert usage is not None and usage.prompt_tokens_details is not None
        cached = usage.prompt_tokens_details.cached_tokens or 0
        sent.append(
            Sent("openai", streamed, usage.prompt_tokens, cached, 0, usage.completion_tokens, text, turn == 2)
        )
        messages.append({"role": "assistant", "content": text})
    busted = [{"role": "system", "content": BUSTED}, *messages[1:]]
    reply = client.chat.completions.create(model="gpt-4.1", messages=busted, extra_headers=headers)
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    cached = usage.prompt_tokens_details.cached_tokens or 0
    text = reply.choices[0].message.content or ""
    sent.append(Sent("openai", False, usage.prompt_tokens, cached, 0, usage.completion_tokens, text))
    client.close()

    claude = anthropic.Anthropic(api_key=API_KEY, base_url=url, max_retries=0)
    history: list[Any] = []
    for turn in range(2):
        history.append({"role": "user", "content": f"Question {turn} about item {turn}?"})
        kwargs: dict[str, Any] = {
            "model": "claude-sonnet-5",
            "max_tokens": 64,
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "messages": history,
            "extra_headers": headers,
        }
        if turn == 0:
            message = claude.messages.create(**kwargs)
        else:
            with claude.messages.stream(**kwargs) as stream:
                message = stream.get_final_message()
        u = message.usage
        read, write = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
        text = "".join(b.text for b in message.content if b.type == "text")
        sent.append(
            Sent("anthropic", turn == 1, u.input_tokens + read + write, read, write, u.output_tokens, text)
        )
        history.append({"role": "assistant", "content": text or "ok"})
    claude.close()
    return sent


@dataclass
class Run:
    sent: list[Sent]
    receiver: Receiver
    prometheus: dict[tuple[str, tuple[tuple[str, str], ...]], float]


@contextmanager
def proxied(env: Mapping[str, str], *, otel: bool = True) -> Iterator[tuple[str, Any]]:
    with serving(create_emulator(), "emulator") as emulator:
        settings = Settings(
            openai_upstream=emulator.url, anthropic_upstream=emulator.url, otel=otel, tenant_header="x-tenant"
        )
        app = build(settings, env=env)
        with serving(app, "proxy") as proxy:
            yield proxy.url, app.state.metrics


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def run(extra_env: Mapping[str, str] | None = None) -> Run:
    receiver = Receiver()
    with serving(receiver.app(), "otlp") as otlp:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            "OTEL_SERVICE_NAME": "agent-sidecar",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test,team=platform",
            **(extra_env or {}),
        }
        with proxied(env) as (url, metrics):
            sent = workload(url)
        # The proxy has stopped: its analysis drained and the exporters flushed into the receiver.
        return Run(sent, receiver, samples(metrics))


@pytest.fixture(scope="module")
def default_run() -> Run:
    return run()


@pytest.fixture(scope="module")
def latest_run() -> Run:
    return run({"OTEL_SEMCONV_STABILITY_OPT_IN": "http,gen_ai_latest_experimental"})


# -- spans ------------------------------------------------------------------------------------------


def expected_span(s: Sent, cache_write_name: str) -> dict[str, Any]:
    model = "gpt-4.1" if s.provider == "openai" else "claude-sonnet-5"
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": s.provider,
        "gen_ai.request.model": model,
        "gen_ai.usage.input_tokens": s.input,
        "gen_ai.usage.cache_read.input_tokens": s.cached,
        cache_write_name: s.cache_write,
        "gen_ai.usage.output_tokens": s.output,
        # The emulator is the reference model of each provider's cache: the prediction is exact.
        "cachewarden.predicted.cached_tokens": s.cached,
        "cachewarden.predicted.cache_write_tokens": s.cache_write,
    }


def span_by_usage(r: Run) -> dict[tuple[str, int, int], Span]:
    found = {}
    for span in r.receiver.spans():
        a = attributes(span.attributes)
        found[
            (a["gen_ai.provider.name"], a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"])
        ] = span
    return found


@pytest.mark.parametrize(
    ("fixture", "cache_write_name", "other_name"),
    [
        ("default_run", "gen_ai.usage.cache_creation.input_tokens", "gen_ai.usage.cache_write.input_tokens"),
        ("latest_run", "gen_ai.usage.cache_write.input_tokens", "gen_ai.usage.cache_creation.input_tokens"),
    ],
)
def test_one_span_per_request_with_the_reported_usage(
    fixture: str, cache_write_name: str, other_name: str, request: pytest.FixtureRequest
) -> None:
    r: Run = request.getfixturevalue(fixture)
    spans = r.receiver.spans()
    assert len(spans) == len(r.sent) == 6
    by_usage = span_by_usage(r)
    assert len(by_usage) == len(r.sent), "every request has a span of its own"
    for s in r.sent:
        span = by_usage[(s.provider, s.input, s.output)]
        a = attributes(span.attributes)
        subset = {k: a.get(k) for k in expected_span(s, cache_write_name)}
        assert subset == expected_span(s, cache_write_name), s
        assert other_name not in a
        assert a["gen_ai.response.model"].startswith(a["gen_ai.request.model"])
        assert a["server.address"] == "127.0.0.1" and a["server.port"] > 0
        assert span.name == f"chat {a['gen_ai.request.model']}"
        assert span.kind == Span.SPAN_KIND_CLIENT
        assert span.status.code != span.status.STATUS_CODE_ERROR, (s, a.get("error.type"))
        assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
    assert any(s.cached > 0 for s in r.sent) and any(s.cache_write > 0 for s in r.sent)


def test_the_first_request_of_a_scope_misses_as_cold_and_miss_tokens_add_up(default_run: Run) -> None:
    by_usage = span_by_usage(default_run)
    for provider in ("openai", "anthropic"):
        first = next(s for s in default_run.sent if s.provider == provider)
        a = attributes(by_usage[(provider, first.input, first.output)].attributes)
        assert a["cachewarden.miss.reason"] == "cold"
        assert a["cachewarden.miss.tokens"] == 0  # nothing earlier to lose
    busted = [s for s in default_run.sent if s.provider == "openai"][-1]
    a = attributes(by_usage[("openai", busted.input, busted.output)].attributes)
    lost = {
        dict(labels)["reason"]: v
        for (name, labels), v in default_run.prometheus.items()
        if name == "cachewarden_cache_miss_tokens_total"
        and v > 0
        and dict(labels)["provider"] == "openai-chat"
    }
    assert lost == {a["cachewarden.miss.reason"]: a["cachewarden.miss.tokens"]}
    assert a["cachewarden.miss.reason"] == "timestamp"
    # The spans' miss tokens are the Prometheus miss counter, request by request.
    span_total = sum(
        attributes(s.attributes).get("cachewarden.miss.tokens", 0) for s in default_run.receiver.spans()
    )
    assert span_total == metric_sum(default_run.prometheus, "cachewarden_cache_miss_tokens_total")


def test_an_incoming_traceparent_is_continued(default_run: Run) -> None:
    spans = default_run.receiver.spans()
    traced = [s for s in spans if s.trace_id.hex() == TRACE_ID]
    assert len(traced) == 1 and traced[0].parent_span_id.hex() == PARENT_ID
    (s,) = [s for s in default_run.sent if s.traced]
    assert attributes(traced[0].attributes)["gen_ai.usage.input_tokens"] == s.input
    # Requests without one start their own trace.
    assert all(not span.parent_span_id for span in spans if span is not traced[0])
    assert len({span.trace_id for span in spans}) == len(spans)


def test_resource_from_the_standard_variables(default_run: Run) -> None:
    for resource in default_run.receiver.resources():
        assert resource["service.name"] == "agent-sidecar"
        assert resource["deployment.environment.name"] == "test" and resource["team"] == "platform"


def test_no_key_prompt_text_or_header_value_is_exported(default_run: Run, latest_run: Run) -> None:
    for r in (default_run, latest_run):
        raw = r.receiver.raw()
        assert raw and r.receiver.bodies["/v1/metrics"]
        for secret in (API_KEY, HEADER_SECRET, PROMPT_MARKER, "Question 1", "Rule 7"):
            assert secret.encode() not in raw


def test_a_failed_request_has_an_error_span() -> None:
    receiver = Receiver()
    with (
        serving(receiver.app(), "otlp") as otlp,
        proxied({"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url}) as (url, _),
    ):
        client = openai.OpenAI(api_key=API_KEY, base_url=url + "/v1", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(
                model="gpt-4.1",
                messages=[{"role": "user", "content": "hello"}],
                extra_headers={"x-emulator-fault": "status=429"},
            )
        client.close()
    (span,) = receiver.spans()
    a = attributes(span.attributes)
    assert span.status.code == span.status.STATUS_CODE_ERROR and a["error.type"] == "429"
    assert span.name == "chat gpt-4.1" and "gen_ai.usage.input_tokens" not in a
    (point,) = points(receiver.metrics()["gen_ai.client.operation.duration"])
    assert attributes(point.attributes)["error.type"] == "429" and point.count == 1


# -- metrics ----------------------------------------------------------------------------------------


def total(metric: Any, key: str, wanted: str) -> int:
    return sum(p.as_int for p in points(metric) if attributes(p.attributes).get(key) == wanted)


def test_genai_metrics_with_the_default_names(default_run: Run) -> None:
    m, sent = default_run.receiver.metrics(), default_run.sent
    assert not any(name.startswith("gen_ai.client.inference.usage.") for name in m)
    usage = points(m["gen_ai.client.token.usage"])
    for token_type, expected in (("input", [s.input for s in sent]), ("output", [s.output for s in sent])):
        chosen = [p for p in usage if attributes(p.attributes)["gen_ai.token.type"] == token_type]
        assert sum(p.sum for p in chosen) == sum(expected)
        assert sum(p.count for p in chosen) == len(sent)
    duration = points(m["gen_ai.client.operation.duration"])
    assert sum(p.count for p in duration) == len(sent)
    assert {attributes(p.attributes)["gen_ai.provider.name"] for p in duration} == {"openai", "anthropic"}
    first_chunk = points(m["gen_ai.client.operation.time_to_first_chunk"])
    assert sum(p.count for p in first_chunk) == sum(s.streamed for s in sent) == 2


def test_genai_metrics_with_the_latest_names(latest_run: Run) -> None:
    m, sent = latest_run.receiver.metrics(), latest_run.sent
    assert "gen_ai.client.token.usage" not in m
    expected = {
        "gen_ai.client.inference.usage.input_tokens": sum(s.input for s in sent),
        "gen_ai.client.inference.usage.cache_read.input_tokens": sum(s.cached for s in sent),
        "gen_ai.client.inference.usage.cache_write.input_tokens": sum(s.cache_write for s in sent),
        "gen_ai.client.inference.usage.output_tokens": sum(s.output for s in sent),
    }
    for name, total in expected.items():
        assert m[name].WhichOneof("data") == "sum" and m[name].sum.is_monotonic
        assert sum(p.as_int for p in points(m[name])) == total, name


def test_prometheus_metrics_are_mirrored_as_cachewarden_instruments(default_run: Run) -> None:
    m, prom = default_run.receiver.metrics(), default_run.prometheus
    tokens = m["cachewarden.input_tokens"]
    assert tokens.unit == "{token}"
    for p in points(tokens):
        a = attributes(p.attributes)
        provider = a["cachewarden.provider"]
        labels = {"provider": provider, "source": a["cachewarden.source"], "kind": a["cachewarden.kind"]}
        assert p.as_int == metric_sum(prom, "cachewarden_input_tokens_total", **labels), a
    assert total(m["cachewarden.requests"], "cachewarden.status", "200") == len(default_run.sent)
    timestamp = total(m["cachewarden.cache_miss_tokens"], "cachewarden.miss.reason", "timestamp")
    assert timestamp == metric_sum(prom, "cachewarden_cache_miss_tokens_total", reason="timestamp") > 0
    share = m["cachewarden.stable_prefix_share"]
    assert share.WhichOneof("data") == "histogram"
    assert list(points(share)[0].explicit_bounds)[:3] == [0.1, 0.2, 0.3]
    assert "cachewarden.index_entries" in m and m["cachewarden.index_entries"].WhichOneof("data") == "gauge"
    # Covered by the conventions' own instrument instead.
    assert "cachewarden.upstream_seconds" not in m
    # And Prometheus /metrics is as it was.
    assert metric_sum(prom, "cachewarden_requests_total", status="200") == len(default_run.sent)


# -- a dead endpoint --------------------------------------------------------------------------------


def comparable(sent: list[Sent]) -> list[tuple[Any, ...]]:
    return [(s.provider, s.streamed, s.input, s.cached, s.cache_write, s.output, s.text) for s in sent]


def test_a_dead_endpoint_changes_nothing_for_the_client(caplog: pytest.LogCaptureFixture) -> None:
    with proxied({}, otel=False) as (url, _):
        baseline = workload(url)
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": dead, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    with caplog.at_level(logging.INFO), proxied(env) as (url, metrics):
        assert comparable(workload(url)) == comparable(baseline)
    prom = samples(metrics)
    for signal in ("traces", "metrics"):
        assert metric_sum(prom, "cachewarden_otel_export_errors_total", signal=signal) >= 1
        warnings = [r for r in caplog.records if f"OpenTelemetry {signal} export" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert dead.split("//")[1] in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]
    assert metric_sum(prom, "cachewarden_requests_total", status="200") == len(baseline)
    assert metric_sum(prom, "cachewarden_analysis_errors_total") == 0


def test_a_stalled_collector_never_holds_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "1")  # the batch processor exports every millisecond
    receiver = Receiver(hold=threading.Event())
    with serving(receiver.app(), "otlp") as otlp:
        # A held export must not time out however slow the machine: it is released, not abandoned.
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            "OTEL_METRIC_EXPORT_INTERVAL": "100",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "300",
        }
        try:
            with proxied(env) as (url, _):
                client = openai.OpenAI(api_key=API_KEY, base_url=url + "/v1", max_retries=0)
                messages: list[Any] = [{"role": "user", "content": "hello"}]
                client.chat.completions.create(model="gpt-4.1", messages=messages)
                client.close()
                assert receiver.arrived.wait(60), "the first export should reach the collector"
                # The collector holds that export (and so the exporter) while the workload runs.
                with proxied({}, otel=False) as (plain, _):
                    baseline = workload(plain)
                assert comparable(workload(url)) == comparable(baseline)
                receiver.hold.set()  # the collector recovers: what was queued is delivered
        finally:
            receiver.hold.set()
    assert len(receiver.spans()) == 1 + len(baseline)


def test_export_failures_are_counted_each_and_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    errors = PromCounter("otel_export_errors", "test", ("signal",), registry=CollectorRegistry())
    health = ExportHealth(
        errors, {"traces": "http://user:token@collector:4318/v1/traces?k=v"}, clock=lambda: now[0]
    )
    with caplog.at_level(logging.WARNING, logger="cachewarden.proxy"):
        for t in (0, 1, 30, 59.9):
            now[0] = 1000 + t
            health.failed("traces", "ConnectionError")
        now[0] = 1061
        health.failed("traces", "ConnectionError")
        health.failed("metrics", "ConnectionError")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "1 failure(s)" in lines[0] and "4 failure(s)" in lines[1] and "metrics" in lines[2]
    assert all("token" not in line and "k=v" not in line for line in lines)
    assert "http://collector:4318/v1/traces" in lines[0]
    assert errors.labels("traces")._value.get() == 5


# -- configuration ----------------------------------------------------------------------------------


def test_otel_setting_from_flag_environment_and_file() -> None:
    assert load_settings([], env={}).otel is False
    assert load_settings(["--otel"], env={}).otel is True
    assert load_settings([], env={"CACHEWARDEN_OTEL": "true"}).otel is True
    with pytest.raises(ConfigError, match="CACHEWARDEN_OTEL"):
        load_settings([], env={"CACHEWARDEN_OTEL": "maybe"})


def test_otel_variables() -> None:
    c = read_otel_config({})
    assert c.traces_endpoint == "http://localhost:4318/v1/traces"
    assert c.metrics_endpoint == "http://localhost:4318/v1/metrics"
    assert (c.service_name, c.latest_genai, c.disabled) == ("cachewarden", False, False)
    c = read_otel_config(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318/",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "https://metrics:9000/ingest",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,k8s.pod.name=a%2Cb",
            "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2.5",
        }
    )
    assert c.traces_endpoint is None and c.metrics_endpoint == "https://metrics:9000/ingest"
    assert c.service_name == "from-attrs" and dict(c.resource) == {"k8s.pod.name": "a,b"}
    assert c.latest_genai and c.metrics_timeout == 2.5


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
        ({"OTEL_METRICS_EXPORTER": "prometheus"}, "OTEL_METRICS_EXPORTER"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "team"}, "OTEL_RESOURCE_ATTRIBUTES"),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "-1"}, "TIMEOUT"),
    ],
)
def test_a_configuration_that_cannot_work_is_refused(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        read_otel_config(env)
    settings = Settings(
        openai_upstream="http://127.0.0.1:9", anthropic_upstream="http://127.0.0.1:9", otel=True
    )
    with pytest.raises(ConfigError, match=named):
        build(settings, env=env)


def cli(
    args: list[str], env: Mapping[str, str], block_otel: bool = False
) -> subprocess.CompletedProcess[str]:
    """``cachewarden ARGS`` in a fresh interpreter; with ``block_otel`` OpenTelemetry cannot be imported."""
    code = [
        "import builtins, sys",
        "real = builtins.__import__",
        "def guard(name, *args, **kwargs):",
        "    if name == 'opentelemetry' or name.startswith('opentelemetry.'):",
        "        raise ImportError(name)",
        "    return real(name, *args, **kwargs)",
        *(["builtins.__import__ = guard"] if block_otel else []),
        "from cachewarden.proxy.cli import main",
        f"sys.exit(main({args!r}))",
    ]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEWARDEN_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-c", "\n".join(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
        stdin=subprocess.DEVNULL,
    )


def test_the_command_refuses_at_start_with_exit_2_and_one_line() -> None:
    proc = cli(["proxy", "--otel", "--port", "0"], {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("cachewarden proxy: error: OTEL_EXPORTER_OTLP_PROTOCOL")


def test_without_the_extra_the_proxy_modules_import_and_otel_is_refused() -> None:
    code = "\n".join(
        [
            "import builtins",
            "real = builtins.__import__",
            "def guard(name, *args, **kwargs):",
            "    if name == 'opentelemetry' or name.startswith('opentelemetry.'):",
            "        raise ImportError(name)",
            "    return real(name, *args, **kwargs)",
            "builtins.__import__ = guard",
            "import cachewarden.proxy.server.otel, cachewarden.proxy.server.otel_spans",
            "import cachewarden.proxy.server.otel_metrics, cachewarden.proxy.server.otel_config",
            "from cachewarden.proxy.cli.proxy import build",
            "from cachewarden.proxy.server.config import Settings",
            "build(Settings())",
        ]
    )
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    proc = cli(["proxy", "--otel", "--port", "0"], {}, block_otel=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "cachewarden[otel]" in proc.stderr


def test_each_prometheus_metric_has_an_otel_twin_or_a_convention() -> None:
    from cachewarden.proxy.server.otel_metrics import CONVENTION_COVERED, Mirrored, mirror_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import Gauge, Histogram

    prometheus = {k for k, v in vars(Metrics()).items() if isinstance(v, PromCounter | Histogram | Gauge)}
    metrics, provider = Metrics(), MeterProvider()
    names = mirror_metrics(metrics, provider.get_meter("test"))
    wrapped = {k for k, v in vars(metrics).items() if isinstance(v, Mirrored)}
    assert wrapped | CONVENTION_COVERED == prometheus and not wrapped & CONVENTION_COVERED
    assert len(names) == len(set(names)) == len(wrapped)
    assert "cachewarden.requests" in names and "cachewarden.cache_miss_tokens" in names
    provider.shutdown()
