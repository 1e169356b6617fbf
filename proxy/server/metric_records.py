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

from collections.abc import Collection
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
        self.before_export = []
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
    """Applies workers' records to the forwarder's ``Metrics``, on the event loop (no lock needed).

    Lazily: ``apply`` only keeps the records, and ``flush`` (run by ``Metrics.exposition`` before
    every scrape, and whenever ``FLUSH_RECORDS`` are waiting) sums the increments per metric and
    labels before touching the registry, so a request costs the forwarder a few list appends
    instead of ~20 registry updates (each a label lookup under a lock).
    """

    # Bounds the memory kept and the loop's time in one flush (a few milliseconds).
    FLUSH_RECORDS = 5_000
    MEMO_SERIES = 20_000

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._waiting: list[tuple[int, list[Record]]] = []
        self._count = 0
        # Gauge values per (metric, labels), per worker: the exported value is their sum.
        self._gauges: dict[tuple[str, tuple[str, ...]], dict[int, float]] = {}
        self._children: dict[tuple[str, tuple[Any, ...]], Any] = {}
        metrics.before_export.append(self.flush)

    def apply(self, worker: int, records: list[Record]) -> None:
        self._waiting.append((worker, records))
        self._count += len(records)
        if self._count >= self.FLUSH_RECORDS:
            self.flush()

    def flush(self) -> None:
        waiting, self._waiting, self._count = self._waiting, [], 0
        sums: dict[tuple[str, tuple[Any, ...]], float] = {}
        for worker, records in waiting:
            for name, values, op, amount in records:
                if op == "inc":
                    key = (name, values)
                    sums[key] = sums.get(key, 0.0) + amount
                elif op == "observe":
                    self._metric(name, values).observe(amount)
                else:
                    labels = self._labels(name, values)
                    per_worker = self._gauges.setdefault((name, labels), {})
                    per_worker[worker] = amount
                    getattr(self.metrics, name).labels(*labels).set(sum(per_worker.values()))
        for (name, values), amount in sums.items():
            self._metric(name, values).inc(amount)

    def _labels(self, name: str, values: tuple[Any, ...]) -> tuple[str, ...]:
        if name in UNBASED:
            return tuple(str(v) for v in values)
        provider, model, tenant = values[:3]
        return (*self.metrics.labels(provider, model, tenant), *(str(v) for v in values[3:]))

    def _metric(self, name: str, values: tuple[Any, ...]) -> Any:
        # Each series looked up once (a registry lookup takes the metric's lock and converts the
        # values, ~5-10 µs, some 20 a request): a raw label set always maps to the same series
        # (ModelLabels keeps a model's label once given). Raw tenants are unbounded: so is not this memo.
        key = (name, values)
        child = self._children.get(key)
        if child is None:
            child = getattr(self.metrics, name).labels(*self._labels(name, values))
            if len(self._children) < self.MEMO_SERIES:
                self._children[key] = child
        return child

    def forget(self, worker: int) -> None:
        """A worker restarted with an empty index: its share of the gauges is gone."""
        self.flush()
        for (name, labels), per_worker in self._gauges.items():
            if per_worker.pop(worker, None) is not None:
                getattr(self.metrics, name).labels(*labels).set(sum(per_worker.values()))
