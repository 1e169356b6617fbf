"""The Prometheus metrics of the proxy (names and labels: DESIGN.md § Metrics), one registry per app.

Every metric carries ``provider`` and ``model`` labels plus the ones DESIGN.md names. Label values
stay bounded and free of prompt text and keys: ``model`` goes through ``ModelLabels`` (a shape
check, an optional allow-list, then the first N distinct values; everything else is "other").

Beyond DESIGN.md, two operational counters:
- ``upstream_errors_total{provider, kind}``: kind = ``timeout`` | ``transport`` (answered 504 / 502)
  | ``stream`` (the upstream broke a response mid-way; that request also counts as
  ``requests_total{status="stream_error"}``).
- ``usage_reports_total{provider, state}``: state = ``reported`` | ``missing`` | ``unparsed``
  (compressed with br/zstd, too large, malformed).
- ``analysis_worker_restarts_total`` (no labels): analysis worker processes (observe mode's
  default) that died and were started again; the analysis they held is in ``analysis_dropped_total``.

Every counter whose extra labels take known values (stages, transforms, error kinds, usage states,
reason codes, token kinds) is exported at 0 from start-up, for each provider with model ``none``,
and again for each (provider, model) the first time it is seen: a dashboard panel or an alert
operand then reads 0, not "No data", before the first such event.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection

from cachewarden.proxy.engine.prompt import PROVIDERS
from cachewarden.proxy.engine.usage import Usage
from cachewarden.proxy.explain.attribution import FIXES
from cachewarden.proxy.server.transforms.canonicalize import SAFE_TRANSFORMS, UNSAFE_TRANSFORMS
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

PREFIX = "cachewarden_"
CONTENT_TYPE = CONTENT_TYPE_LATEST
OTHER = "other"
NONE = "none"
_MODEL_SHAPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,79}$")
_BASE = ("provider", "model")

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
_ERROR_BUCKETS = tuple(
    sorted(
        {-s * m for s in (1, 10, 100, 1000, 10000) for m in (1, 5)}
        | {s * m for s in (1, 10, 100, 1000, 10000) for m in (1, 5)}
        | {0}
    )
)
_SHARE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)

# The known values of the bounded labels, exported at 0 before their first event.
ANALYSIS_STAGES = ("request", "response", "rewrite")  # hooks.call_hooks / call_rewriter
UPSTREAM_ERROR_KINDS = ("timeout", "transport", "stream")
USAGE_STATES = ("reported", "missing", "unparsed")  # engine.usage.UsageState
INDEX_STAGES = ("lookup", "insert", "mark", "marks", "clear")  # engine.index.resilient
TOKEN_KINDS = ("cached", "cache_write", "uncached")
COST_KINDS = {"predicted": TOKEN_KINDS, "reported": (*TOKEN_KINDS, "output")}
# Anthropic's cache diagnostics (provider-caching.md §2.7), plus "none" (null: no divergence) and
# "inconclusive" ({"cache_miss_reason": null}: the comparison was still running).
DIAGNOSIS_TYPES = (
    "model_changed",
    "system_changed",
    "tools_changed",
    "messages_changed",
    "previous_message_not_found",
    "unavailable",
    "none",
    "inconclusive",
)


def safe_model(model: str | None) -> str | None:
    """The model name if it looks like a model id, else "other" (a body can put any text there)."""
    if model is None:
        return None
    return model if _MODEL_SHAPE.match(model) else OTHER


class ModelLabels:
    """Maps a model name from a request body (untrusted text) to a bounded label value. Thread-safe."""

    def __init__(self, limit: int = 64, known: Callable[[str], bool] | None = None) -> None:
        self._limit = limit
        self._known = known
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, model: str | None) -> str:
        if not model:
            return NONE
        # A body can put anything in "model" (a prompt, a key): only id-shaped values become labels.
        if not _MODEL_SHAPE.match(model) or (self._known is not None and not self._known(model)):
            return OTHER
        with self._lock:
            if model in self._seen:
                return model
            if len(self._seen) < self._limit:
                self._seen.add(model)
                return model
        return OTHER


class Metrics:
    """All metric objects of one app, on their own registry (never the process-global one)."""

    def __init__(
        self,
        max_models: int = 64,
        known_models: Callable[[str], bool] | None = None,
        tenant_labels: Collection[str] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Run before every export: updates kept aside to be applied in bulk (metric_records.Applier).
        self.before_export: list[Callable[[], None]] = []
        self.model_label = ModelLabels(max_models, known_models)
        # A `tenant` label exists only when the operator names the tenants it may carry: tenant ids
        # can be unbounded (one per API key), and a label must never become a side channel.
        self.tenant_labels = frozenset(tenant_labels) if tenant_labels else None
        _base = _BASE if self.tenant_labels is None else (*_BASE, "tenant")

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(PREFIX + name, doc, (*_base, *labels), registry=self.registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...], *labels: str) -> Histogram:
            return Histogram(PREFIX + name, doc, (*_base, *labels), buckets=buckets, registry=self.registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(PREFIX + name, doc, _base, registry=self.registry)

        self.requests = counter("requests", "Requests proxied, by final status.", "status")
        self.input_tokens = counter(
            "input_tokens", "Input tokens, predicted or reported, by how they are billed.", "source", "kind"
        )
        self.cache_miss_tokens = counter("cache_miss_tokens", "Input tokens that missed the cache.", "reason")
        self.missed_savings_usd = counter(
            "missed_savings_usd", "Dollars a cache hit would have saved.", "reason"
        )
        self.cost_usd = counter("cost_usd", "Cost in dollars, predicted or reported.", "source", "kind")
        self.savings_usd = counter("savings_usd", "Dollars saved by cache reads.")
        self.prediction_error_tokens = histogram(
            "prediction_error_tokens", "Reported cached tokens minus predicted cached tokens.", _ERROR_BUCKETS
        )
        self.provider_diagnosis = counter(
            "provider_diagnosis",
            "Anthropic's own cache diagnosis, and whether cachewarden's first reason agrees with it.",
            "type",
            "agrees",
        )
        self.count_error_tokens = histogram(
            "count_error_tokens",
            "Reported minus counted input tokens, before (raw) and after (calibrated) self-calibration.",
            _ERROR_BUCKETS,
            "stage",
        )
        self.findings = counter("findings", "Rule findings in proxied requests.", "code", "reason")
        self.canonicalized_requests = counter(
            "canonicalized_requests", "Requests rewritten before forwarding, by transform.", "transform"
        )
        self.overhead_seconds = histogram(
            "overhead_seconds", "Time the proxy adds before forwarding a received request.", _OVERHEAD_BUCKETS
        )
        self.upstream_seconds = histogram(
            "upstream_seconds",
            "Upstream latency: first response byte and whole response.",
            _LATENCY_BUCKETS,
            "phase",
        )
        self.analysis_errors = counter(
            "analysis_errors", "Exceptions in analysis (request unaffected).", "stage"
        )
        self.stable_prefix_share = histogram(
            "stable_prefix_share",
            "Share of input tokens reused from the best earlier request.",
            _SHARE_BUCKETS,
        )
        self.index_entries = gauge("index_entries", "Prompts held in the prefix index.")
        self.index_tokens = gauge("index_tokens", "Tokens held in the prefix index.")
        self.upstream_errors = Counter(
            PREFIX + "upstream_errors",
            "Upstream failures: timeout / transport (answered 504 / 502), stream (broken mid-response).",
            ("provider", "kind"),
            registry=self.registry,
        )
        self.analysis_dropped = counter(
            "analysis_dropped", "Requests forwarded unanalysed because the analysis backlog was full."
        )
        self.index_backend_errors = Counter(
            PREFIX + "index_backend_errors",
            "Failed calls to a shared prefix index (Redis); the local index answered instead.",
            ("stage",),
            registry=self.registry,
        )
        self.usage_reports = Counter(
            PREFIX + "usage_reports",
            "Responses by whether their usage could be read.",
            ("provider", "state"),
            registry=self.registry,
        )
        self.analysis_worker_restarts = Counter(
            PREFIX + "analysis_worker_restarts",
            "Analysis worker processes that died and were started again (their analysis in flight dropped).",
            registry=self.registry,
        )
        self._seeded: set[tuple[str, ...]] = set()
        self._seed_lock = threading.Lock()
        for provider in (*PROVIDERS, NONE):
            for kind in UPSTREAM_ERROR_KINDS:
                self.upstream_errors.labels(provider, kind)
            for state in USAGE_STATES:
                self.usage_reports.labels(provider, state)
            self._seed((provider, NONE) if self.tenant_labels is None else (provider, NONE, OTHER))
        for stage in INDEX_STAGES:
            self.index_backend_errors.labels(stage)

    def _seed(self, base: tuple[str, ...]) -> None:
        """Creates, at 0, every bounded child of the counters for one set of base label values."""
        with self._seed_lock:
            if base in self._seeded:
                return
            self._seeded.add(base)
        for stage in ANALYSIS_STAGES:
            self.analysis_errors.labels(*base, stage)
        for transform in (*SAFE_TRANSFORMS, *UNSAFE_TRANSFORMS):
            self.canonicalized_requests.labels(*base, transform)
        for reason in FIXES:
            self.cache_miss_tokens.labels(*base, reason)
            self.missed_savings_usd.labels(*base, reason)
        for source, kinds in COST_KINDS.items():
            for kind in kinds:
                self.cost_usd.labels(*base, source, kind)
        for source in COST_KINDS:
            for kind in TOKEN_KINDS:
                self.input_tokens.labels(*base, source, kind)
        self.savings_usd.labels(*base)
        self.analysis_dropped.labels(*base)
        if base[0] == "anthropic":
            for kind in DIAGNOSIS_TYPES:
                for agrees in ("true", "false"):
                    self.provider_diagnosis.labels(*base, kind, agrees)

    def labels(self, provider: str | None, model: str | None, tenant: str | None = None) -> tuple[str, ...]:
        """The base label values: provider, model and, when configured, the tenant (allow-listed
        tenants by name, every other one as "other")."""
        if self.tenant_labels is None:
            base: tuple[str, ...] = (provider or NONE, self.model_label(model))
        else:
            shown = tenant if tenant is not None and tenant in self.tenant_labels else OTHER
            base = (provider or NONE, self.model_label(model), shown)
        # Unlocked membership test first: after the first request of a model this is all it costs.
        if base not in self._seeded:
            self._seed(base)
        return base

    def record_usage(
        self, provider: str | None, model: str | None, usage: Usage, source: str, tenant: str | None = None
    ) -> None:
        """Adds a Usage as input_tokens_total{source} (``reported`` from the response, ``predicted``)."""
        base = self.labels(provider, model, tenant)
        for kind, tokens in (
            ("cached", usage.cached),
            ("cache_write", usage.cache_write),
            ("uncached", usage.uncached),
        ):
            self.input_tokens.labels(*base, source, kind).inc(tokens)

    def exposition(self) -> bytes:
        for hook in self.before_export:
            hook()
        return generate_latest(self.registry)
