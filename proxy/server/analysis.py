"""The engine in the proxy: predicts each request's cache use, explains its misses, compares with usage.

``request`` runs in a worker thread once the body has gone upstream; ``response`` once the
response ended. Both fail open (the hook dispatcher counts exceptions). State shared between
requests (the engine, the Responses chain, the count calibration) is thread-safe.

Counts are self-calibrated (``engine.calibration``): the prediction of a request is made on the
count plus what the last response with the same tools / schema / system reported beyond it; the
error before and after that correction is exported as ``count_error_tokens{stage="raw|calibrated"}``
and written to the access log (``count``: counted, calibrated, reported; numbers only).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.calibration import Calibrated, CountCalibration
from cachewarden.proxy.engine.engine import Analysis, Engine
from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.engine.reading import ConversationReader
from cachewarden.proxy.engine.usage import Usage
from cachewarden.proxy.explain.attribution import Reason, attribute
from cachewarden.proxy.explain.provider_diagnosis import compare

from .hooks import Flow
from .live_rules import LiveRules
from .metrics import Metrics
from .transforms.diagnostics import SCOPE_KEY, conversation_key, previous_messages

# Responses API: how many response ids the proxy remembers for ``previous_response_id`` chains.
_CHAIN_ENTRIES = 2_000
# Keys of the count calibration (tenant x fixed parts): ~100 bytes each.
_CALIBRATION_ENTRIES = 20_000


@dataclass(frozen=True, slots=True)
class _Chained:
    """A Responses request as the provider stores it: its whole input and its output items."""

    input_items: list[Any]
    output_items: list[Any]


def _input_items(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


class EngineAnalyzer:
    """Predict, explain and measure every analysed request (see the module docstring)."""

    def __init__(self, engine: Engine, metrics: Metrics, rules: LiveRules | None = None) -> None:
        self.engine = engine
        self.metrics = metrics
        self.rules = rules
        self._chain: OrderedDict[tuple[str, str], _Chained] = OrderedDict()
        self.calibration = CountCalibration(engine.counter, max_entries=_CALIBRATION_ENTRIES)
        # Each body read from where it parts from its conversation's previous one (the same Prompt).
        self.reader = ConversationReader()
        self._lock = threading.Lock()
        # Responses requests whose response hook has not run yet, per tenant: a chained request may
        # arrive before the hook stored the turn it chains to (the client got the bytes first).
        self._pending: dict[str, int] = {}

    # -- request ---------------------------------------------------------------------------------
    def load_body(self, flow: Flow) -> dict[str, Any]:
        """``load_body`` of the request, parsing only what it appends to its tenant's previous body
        (``ConversationReader.load``): a long conversation's next turn costs its new bytes."""
        return self.reader.load(flow.request_body, tenant=flow.tenant)

    def ready(self, flow: Flow) -> bool:
        """Whether the request hook can run now: not a Responses turn chained to an earlier one
        whose response has not been read yet while responses of the tenant are still to come (the
        analysis queue parks it meanwhile instead of blocking a worker; analysis_queue)."""
        if not flow.analysed or flow.provider != "openai-responses":
            return True
        if b"previous_response_id" not in flow.request_body:
            return True
        body = flow.metadata.get("body")
        if body is None:
            try:
                body = self.load_body(flow)
            except RequestError:
                return True
            flow.metadata["body"] = body  # the request hooks read it from there, not again
        rid = body.get("previous_response_id") if isinstance(body, dict) else None
        if not isinstance(rid, str):
            return True
        with self._lock:
            return (flow.tenant, rid) in self._chain or not self._pending.get(flow.tenant)

    def request(self, flow: Flow) -> None:
        if not flow.analysed or flow.provider is None:
            return
        body: Any = flow.metadata.get("body")
        if body is None:
            body = self.load_body(flow)
        body = self._chained(body, flow)
        flow.metadata["provider_body"] = body
        prompt = self.reader.parse(body, flow.provider, tenant=flow.tenant)
        flow.model = flow.model or prompt.model
        if flow.upstream not in ("openai", "anthropic"):
            # A named OpenAI-compatible server: its own tokenizer and cache rules (see build_engine).
            prompt = prompt.with_model(f"{flow.upstream}/{prompt.model}")
        analysis = self.engine.analyse(prompt, tenant=flow.tenant, now=flow.timings.received_at)
        reasons = attribute(analysis, self.engine.prices)
        flow.metadata["analysis"] = analysis
        flow.metadata["count"] = self.calibration.apply(flow.tenant, prompt, analysis.tokenized)
        flow.metadata["reasons"] = reasons
        self._record_prediction(flow, analysis, reasons)
        if self.rules is not None:
            for code, reason in self.rules.findings(prompt, flow.request_body):
                self.metrics.findings.labels(*self._labels(flow), code, reason).inc()

    def _labels(self, flow: Flow) -> tuple[str, ...]:
        return self.metrics.labels(flow.provider, flow.model, flow.tenant)

    def _record_prediction(self, flow: Flow, analysis: Analysis, reasons: list[Reason]) -> None:
        m, base, p = self.metrics, self._labels(flow), analysis.prediction
        count: Calibrated = flow.metadata["count"]
        # The calibration corrects the total; the correction lies in the fixed parts' rendering, which
        # the cache model already placed, so it is billed with the uncached rest (never below zero).
        uncached = max(0, p.uncached_tokens + count.offset)
        predicted = Usage(
            input_total=p.cached_tokens + p.cache_write_tokens + uncached,
            cached=p.cached_tokens,
            cache_write=p.cache_write_tokens,
            cache_write_1h=p.cache_write_1h_tokens,
            uncached=uncached,
            output=0,
        )
        flow.metadata["predicted_usage"] = predicted
        m.record_usage(flow.provider, flow.model, predicted, "predicted", flow.tenant)
        if analysis.cost is not None:
            for kind, usd in (
                ("cached", analysis.cost.cached_usd),
                ("cache_write", analysis.cost.cache_write_usd),
                ("uncached", analysis.cost.input_usd),
            ):
                m.cost_usd.labels(*base, "predicted", kind).inc(max(usd, 0.0))
        if analysis.tokenized.count:
            share = min(1.0, p.reusable_tokens / analysis.tokenized.count)
            m.stable_prefix_share.labels(*base).observe(share)
        for reason in reasons:
            m.cache_miss_tokens.labels(*base, reason.code).inc(max(reason.tokens_lost, 0))
            m.missed_savings_usd.labels(*base, reason.code).inc(max(reason.usd_lost, 0.0))
        stats = self.engine.index.stats()
        m.index_entries.labels(*base).set(stats.entries)
        m.index_tokens.labels(*base).set(stats.tokens)

    # -- response --------------------------------------------------------------------------------
    def response(self, flow: Flow) -> None:
        try:
            self._response(flow)
        finally:
            if flow.metadata.get("chained_input") is not None:
                with self._lock:
                    self._pending[flow.tenant] -= 1
                    if not self._pending[flow.tenant]:
                        del self._pending[flow.tenant]

    def _response(self, flow: Flow) -> None:
        analysis: Analysis | None = flow.metadata.get("analysis")
        if analysis is None:
            return
        response_id, output = flow.metadata.get("response_id"), flow.metadata.get("response_output")
        chained_input = flow.metadata.get("chained_input")
        if isinstance(response_id, str) and isinstance(output, list) and isinstance(chained_input, list):
            self._remember_chain(flow.tenant, response_id, _Chained(chained_input, output))
        usage = flow.usage
        if usage is None or flow.status is None or flow.status >= 400:
            return
        m, base, p = self.metrics, self._labels(flow), analysis.prediction
        m.prediction_error_tokens.labels(*base).observe(usage.cached - p.cached_tokens)
        count: Calibrated | None = flow.metadata.get("count")
        if count is not None and usage.input_total > 0:
            m.count_error_tokens.labels(*base, "raw").observe(usage.input_total - count.raw)
            m.count_error_tokens.labels(*base, "calibrated").observe(usage.input_total - count.count)
            flow.metadata["access_count"] = {
                "counted": count.raw,
                "calibrated": count.count,
                "reported": usage.input_total,
            }
            self.calibration.observe(
                flow.tenant, analysis.prompt, analysis.tokenized, usage.input_total, analysis.info.exact
            )
        message_id = flow.metadata.get("message_id")
        if flow.provider == "anthropic" and isinstance(message_id, str):
            # The scope's latest message: what --anthropic-diagnostics names as the previous one.
            scope = flow.metadata.get(SCOPE_KEY) or conversation_key(analysis.prompt)
            previous_messages(self.engine).remember(flow.tenant, scope, message_id)
        diagnostics = flow.metadata.get("diagnostics")
        if flow.provider == "anthropic" and diagnostics:
            # Anthropic's own diagnosis (the response carried the field): beside our first reason.
            found = compare(diagnostics[0], flow.metadata.get("reasons") or [])
            m.provider_diagnosis.labels(*base, found.provider, "true" if found.agrees else "false").inc()
            flow.metadata["access_diagnosis"] = {
                "type": found.provider,
                "reason": found.reason,
                "agrees": found.agrees,
            }
        if p.cached_tokens > 0 and usage.cached < p.cached_tokens:
            # Predicted a hit the provider did not serve: routing, eviction, a cache we cannot see.
            lost = p.cached_tokens - usage.cached
            m.cache_miss_tokens.labels(*base, "unexplained").inc(lost)
            missed = self.engine.prices.missed_savings(analysis.prompt.model, analysis.prompt.provider, lost)
            m.missed_savings_usd.labels(*base, "unexplained").inc(max(missed, 0.0))
        cost = self.engine.prices.cost(
            analysis.prompt.model,
            analysis.prompt.provider,
            cached=usage.cached,
            write_5m=usage.cache_write - usage.cache_write_1h,
            write_1h=usage.cache_write_1h,
            uncached=usage.uncached,
            output=usage.output,
        )
        if cost is not None:
            for kind, usd in (
                ("cached", cost.cached_usd),
                ("cache_write", cost.cache_write_usd),
                ("uncached", cost.input_usd),
                ("output", cost.output_usd),
            ):
                m.cost_usd.labels(*base, "reported", kind).inc(max(usd, 0.0))
            if cost.savings_usd > 0:
                m.savings_usd.labels(*base).inc(cost.savings_usd)

    # -- Responses API chains --------------------------------------------------------------------
    def _remember_chain(self, tenant: str, response_id: str, chained: _Chained) -> None:
        with self._lock:
            self._chain[(tenant, response_id)] = chained
            self._chain.move_to_end((tenant, response_id))
            while len(self._chain) > _CHAIN_ENTRIES:
                self._chain.popitem(last=False)

    def _chained(self, body: Any, flow: Flow) -> Any:
        """With ``previous_response_id`` the provider puts the stored input and output in front of the
        new input (instructions and tools stay the new request's own): so does the analysis."""
        if flow.provider != "openai-responses" or not isinstance(body, dict):
            return body
        rid = body.get("previous_response_id")
        with self._lock:
            # No wait here: the queue runs this hook only once ``ready`` says the turn is stored (or
            # its wait ran out; then the turn is analysed as the fresh prompt it looks like).
            earlier = self._chain.get((flow.tenant, rid)) if isinstance(rid, str) else None
            self._pending[flow.tenant] = self._pending.get(flow.tenant, 0) + 1
        history = [*earlier.input_items, *earlier.output_items] if earlier is not None else []
        merged_input = [*history, *_input_items(body.get("input"))]
        # Kept for the response hook: what the provider will hold for the next turn of the chain.
        flow.metadata["chained_input"] = merged_input
        if earlier is None:
            return body
        merged = {k: v for k, v in body.items() if k != "previous_response_id"}
        merged["input"] = merged_input
        return merged
