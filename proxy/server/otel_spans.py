"""One OpenTelemetry span per proxied LLM request, and the GenAI metrics, after the OTel conventions.

An ``Analyzer`` (hooks.py): its ``response`` hook runs in a worker thread once the response ended
and the engine's ``request`` hook has predicted, so the span is built after the fact with the
request's own start and end times. It continues an incoming W3C ``traceparent`` (the span sits
under the agent's own trace) and is a ``CLIENT`` span named ``{gen_ai.operation.name}
{gen_ai.request.model}``.

Attributes come from the reported usage, the prediction and its reasons only: never prompt text,
a key or a header value (the model names pass the same shape check as the metric labels).

GenAI names are still "Development" in the conventions; ``OTEL_SEMCONV_STABILITY_OPT_IN=
gen_ai_latest_experimental`` selects the newest ones (``GENAI_NAMES``): the cache-write attribute
``gen_ai.usage.cache_write.input_tokens`` (else ``…cache_creation…``) and one counter per usage
attribute, ``gen_ai.client.inference.usage.*`` (else the histogram ``gen_ai.client.token.usage``
by ``gen_ai.token.type``). ``gen_ai.client.operation.duration`` (and, for streams,
``…time_to_first_chunk``) are exported either way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cachewarden.proxy.engine.engine import Analysis
from cachewarden.proxy.explain.attribution import Reason

from .hooks import Flow
from .metrics import Metrics, safe_model
from .otel import Telemetry

if TYPE_CHECKING:
    from opentelemetry.util.types import AttributeValue

logger = logging.getLogger("cachewarden.proxy")

OPERATION = "chat"  # the conventions' operation for Chat Completions, Responses and Messages alike
INPUT, CACHE_READ, OUTPUT = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.output_tokens",
)
# The names that differ between the conventions before and after the cache-usage rename.
GENAI_NAMES: Mapping[bool, Mapping[str, str]] = {
    False: {"cache_write": "gen_ai.usage.cache_creation.input_tokens"},
    True: {"cache_write": "gen_ai.usage.cache_write.input_tokens"},
}
TOKEN_USAGE = "gen_ai.client.token.usage"
INFERENCE_USAGE = "gen_ai.client.inference.usage."  # + the usage attribute's name after gen_ai.usage.
DURATION = "gen_ai.client.operation.duration"
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
# The conventions' advice for their histograms.
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
_TOKEN_BUCKETS = [4.0**i for i in range(14)]


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _server(url: str) -> dict[str, AttributeValue]:
    """``server.address`` / ``server.port`` of an upstream URL (host and port only, never user info)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {"server.address": parts.hostname or "", "server.port": port}


class OtelAnalyzer:
    """Spans and GenAI metrics for each analysed request (see the module docstring)."""

    def __init__(
        self, telemetry: Telemetry, metrics: Metrics, upstreams: Mapping[str, str] | None = None
    ) -> None:
        """``upstreams``: upstream name → base URL, for ``server.address`` / ``server.port``."""
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.telemetry = telemetry
        self.metrics = metrics
        self.latest = telemetry.config.latest_genai
        self.cache_write_attribute = GENAI_NAMES[self.latest]["cache_write"]
        self._servers = {name: _server(url) for name, url in (upstreams or {}).items()}
        self._propagator = TraceContextTextMapPropagator()
        self._kind, self._error = SpanKind.CLIENT, Status(StatusCode.ERROR)
        meter = telemetry.meter
        self._instruments: dict[str, Any] = {}
        if meter is None:
            return
        self._instruments[DURATION] = meter.create_histogram(
            DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._instruments[TIME_TO_FIRST_CHUNK] = meter.create_histogram(
            TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time to receive the first chunk of a streamed response.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        if self.latest:
            for attribute in (INPUT, CACHE_READ, self.cache_write_attribute, OUTPUT):
                name = INFERENCE_USAGE + attribute.removeprefix("gen_ai.usage.")
                self._instruments[attribute] = meter.create_counter(
                    name, unit="{token}", description=f"Tokens, as the span attribute {attribute}."
                )
        else:
            self._instruments[TOKEN_USAGE] = meter.create_histogram(
                TOKEN_USAGE,
                unit="{token}",
                description="Number of input and output tokens used.",
                explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
            )

    def request(self, flow: Flow) -> None:
        return None

    def response(self, flow: Flow) -> None:
        if not flow.analysed:
            return
        common = self._common(flow)
        # A 2xx that also ended well (not a stream broken by the upstream or left by the client).
        failed = not (
            flow.status is not None and 200 <= flow.status < 300 and flow.outcome == str(flow.status)
        )
        if failed:
            common["error.type"] = flow.outcome or "unknown"
        if self.telemetry.tracer is not None:
            self._span(flow, common, failed)
        if self._instruments:
            self._record(flow, common)

    def close(self) -> None:
        self.telemetry.shutdown()

    # -- the parts ---------------------------------------------------------------------------------
    def _common(self, flow: Flow) -> dict[str, AttributeValue]:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": OPERATION,
            # "openai", "anthropic" (the conventions' values) or a configured upstream's name.
            "gen_ai.provider.name": flow.upstream,
            **self._servers.get(flow.upstream, {}),
        }
        if (model := safe_model(flow.model)) is not None:
            attributes["gen_ai.request.model"] = model
        if (response_model := safe_model(flow.metadata.get("response_model"))) is not None:
            attributes["gen_ai.response.model"] = response_model
        return attributes

    def _span(self, flow: Flow, common: dict[str, AttributeValue], failed: bool) -> None:
        assert self.telemetry.tracer is not None
        carrier = {k: v for k, v in flow.request_headers if k in ("traceparent", "tracestate")}
        parent = self._propagator.extract(carrier) if "traceparent" in carrier else None
        attributes = {**common, **self._usage_attributes(flow), **self._prediction_attributes(flow)}
        t = flow.timings
        # The marks are perf_counter() readings: placed on the wall clock through one anchor.
        anchor = time.time() - time.perf_counter()
        start = _ns(anchor + t.received)
        end = max(start, _ns(anchor + (t.done or t.sent or t.received)))
        model = attributes.get("gen_ai.request.model")
        span = self.telemetry.tracer.start_span(
            f"{OPERATION} {model}" if model else OPERATION,
            context=parent,
            kind=self._kind,
            attributes=attributes,
            start_time=start,
        )
        if failed:
            span.set_status(self._error)
        span.end(end_time=end)

    def _usage_attributes(self, flow: Flow) -> dict[str, AttributeValue]:
        u = flow.usage
        if u is None:
            return {}
        return {
            INPUT: u.input_total,
            CACHE_READ: u.cached,
            self.cache_write_attribute: u.cache_write,
            OUTPUT: u.output,
        }

    def _prediction_attributes(self, flow: Flow) -> dict[str, AttributeValue]:
        analysis: Analysis | None = flow.metadata.get("analysis")
        if analysis is None:
            return {}
        p = analysis.prediction
        out: dict[str, AttributeValue] = {
            "cachewarden.predicted.cached_tokens": p.cached_tokens,
            "cachewarden.predicted.cache_write_tokens": p.cache_write_tokens,
        }
        reasons: list[Reason] = flow.metadata.get("reasons") or []
        codes = [r.code for r in reasons]  # the first is the one at the divergence point
        lost = sum(max(r.tokens_lost, 0) for r in reasons)
        u = flow.usage
        if u is not None and flow.status is not None and flow.status < 400 and u.cached < p.cached_tokens:
            # A predicted hit the provider did not serve (as EngineAnalyzer counts it).
            lost += p.cached_tokens - u.cached
            codes.append("unexplained")
        if codes:
            out["cachewarden.miss.reason"] = codes[0]
            out["cachewarden.miss.tokens"] = lost
        return out

    def _record(self, flow: Flow, common: dict[str, AttributeValue]) -> None:
        attributes = dict(common)
        # Metric attributes stay bounded: the model names go through the metric label bound.
        for key in ("gen_ai.request.model", "gen_ai.response.model"):
            if key in attributes:
                attributes[key] = self.metrics.model_label(str(attributes[key]))
        t = flow.timings
        if t.sent is not None and t.done is not None:
            self._instruments[DURATION].record(t.done - t.sent, attributes)
        body = flow.metadata.get("body")
        streamed = isinstance(body, dict) and body.get("stream") is True
        if streamed and t.sent is not None and t.first_byte is not None:
            self._instruments[TIME_TO_FIRST_CHUNK].record(t.first_byte - t.sent, attributes)
        u = flow.usage
        if u is None:
            return
        if self.latest:
            for attribute, tokens in self._usage_attributes(flow).items():
                self._instruments[attribute].add(tokens, attributes)
        else:
            histogram = self._instruments[TOKEN_USAGE]
            histogram.record(u.input_total, {**attributes, "gen_ai.token.type": "input"})
            histogram.record(u.output, {**attributes, "gen_ai.token.type": "output"})
