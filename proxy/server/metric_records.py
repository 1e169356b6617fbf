"""Metric updates made in an analysis worker process, applied to the registry the forwarder exports.

A worker process (analysis_worker.py) runs the same analyzers as the in-process threads, on a
``RecordingMetrics``: it has every metric attribute of ``Metrics``, but ``.labels(...).inc()`` /
``.observe()`` / ``.set()`` append a compact record instead of touching a registry. The forwarder
applies the records of each analysed request to its own ``Metrics`` (``Applier``), so every
metric name, label and bounded label value stays what ``Metrics`` makes it: the base labels are
recorded raw (provider, model and tenant as the analyzer saw them) and bounded again by the
forwarder's ``Metrics.labels`` (one ``ModelLabels`` for all workers, so N workers never admit N
times the model limit), and a model first seen in a worker is seeded at 0 like any other.

Gauges (the prefix index's size) are per worker: each worker holds the index of its own tenants,
so the exported value is the sum of the workers' latest values.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from .metrics import Metrics

# One update: (attribute of Metrics, label values, "inc" | "observe" | "set", amount). The label
# values of a metric with base labels start with the raw (provider, model, tenant).
Record = tuple[str, tuple[Any, ...], str, float]

# Metrics of Metrics without the provider/model base labels (their label values are used as given).
UNBASED = frozenset({"upstream_errors", "index_backend_errors", "usage_reports"})
BASED = (
    "requests",
    "input_tokens",
    "cache_miss_tokens",
    "missed_savings_usd",
    "cost_usd",
    "savings_usd",
    "prediction_error_tokens",
    "provider_diagnosis",
    "count_error_tokens",
    "findings",
    "canonicalized_requests",
    "overhead_seconds",
    "upstream_seconds",
    "analysis_errors",
    "stable_prefix_share",
    "index_entries",
    "index_tokens",
    "analysis_dropped",
)


class _Child:
    __slots__ = ("_key", "_sink")

    def __init__(self, sink: RecordingMetrics, key: tuple[str, tuple[Any, ...]]) -> None:
        self._sink, self._key = sink, key

    def inc(self, amount: float = 1.0) -> None:
        self._sink.add(self._key, "inc", amount)

    def observe(self, amount: float) -> None:
        self._sink.add(self._key, "observe", amount)

    def set(self, value: float) -> None:
        self._sink.add(self._key, "set", value)


class _Recorded:
    __slots__ = ("_name", "_sink")

    def __init__(self, sink: RecordingMetrics, name: str) -> None:
        self._sink, self._name = sink, name

    def labels(self, *values: Any) -> _Child:
        return _Child(self._sink, (self._name, values))


class RecordingMetrics(Metrics):
    """``Metrics`` without a registry: updates are kept as records until ``drain()`` (see the doc)."""

    def __init__(self, tenant_labels: Collection[str] | None = None) -> None:  # no registry: no super()
        self.tenant_labels = frozenset(tenant_labels) if tenant_labels else None
        # Counter increments of one drain summed per (metric, labels); observations and sets kept.
        self._sums: dict[tuple[str, tuple[Any, ...]], float] = {}
        self._others: list[Record] = []
        for name in (*BASED, *UNBASED):
            setattr(self, name, _Recorded(self, name))

    def labels(self, provider: str | None, model: str | None, tenant: str | None = None) -> tuple[str, ...]:
        # Raw: the forwarder bounds them (its ModelLabels is the one every worker shares).
        return (provider, model, tenant)  # type: ignore[return-value]

    def add(self, key: tuple[str, tuple[Any, ...]], op: str, amount: float) -> None:
        if op == "inc":
            self._sums[key] = self._sums.get(key, 0.0) + amount
        else:
            self._others.append((key[0], key[1], op, amount))

    def drain(self) -> list[Record]:
        out: list[Record] = [(name, values, "inc", amount) for (name, values), amount in self._sums.items()]
        out += self._others
        self._sums, self._others = {}, []
        return out

    def exposition(self) -> bytes:
        raise RuntimeError("a worker's metrics are exported by the forwarder")


class Applier:
    """Applies workers' records to the forwarder's ``Metrics`` (on the event loop: no lock needed)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        # Gauge values per (metric, labels), per worker: the exported value is their sum.
        self._gauges: dict[tuple[str, tuple[str, ...]], dict[int, float]] = {}

    def apply(self, worker: int, records: Iterable[Record]) -> None:
        m = self.metrics
        for name, values, op, amount in records:
            if name in UNBASED:
                labels: tuple[str, ...] = tuple(str(v) for v in values)
            else:
                provider, model, tenant = values[:3]
                labels = (*m.labels(provider, model, tenant), *(str(v) for v in values[3:]))
            metric: Any = getattr(m, name)
            if op == "inc":
                metric.labels(*labels).inc(amount)
            elif op == "observe":
                metric.labels(*labels).observe(amount)
            else:
                per_worker = self._gauges.setdefault((name, labels), {})
                per_worker[worker] = amount
                metric.labels(*labels).set(sum(per_worker.values()))

    def forget(self, worker: int) -> None:
        """A worker restarted with an empty index: its share of the gauges is gone."""
        for (name, labels), per_worker in self._gauges.items():
            if per_worker.pop(worker, None) is not None:
                getattr(self.metrics, name).labels(*labels).set(sum(per_worker.values()))
