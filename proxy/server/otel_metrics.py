"""The proxy's Prometheus metrics, mirrored as OpenTelemetry instruments named ``cachewarden.*``.

``mirror_metrics`` wraps each metric of a ``Metrics`` so that every ``labels(...).inc()`` /
``.observe()`` / ``.set()`` also goes to an OTel instrument: one place, the same values as
``/metrics``, and no second copy of the code that computes them. Prometheus ``/metrics`` stays as
it is (the wrapped metric is still the registered one).

Names: ``cachewarden_cache_miss_tokens_total`` → ``cachewarden.cache_miss_tokens`` (counter),
histograms keep their buckets, gauges are synchronous gauges. Labels become attributes:
``model`` → ``gen_ai.request.model``, ``reason`` → ``cachewarden.miss.reason`` (as on the spans),
any other label ``L`` → ``cachewarden.L``. ``upstream_seconds`` is not mirrored: the GenAI
conventions name it (``gen_ai.client.operation.duration``, ``…time_to_first_chunk``; otel_spans.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram

from .metrics import PREFIX, Metrics

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

# Metrics the GenAI conventions cover (exported by otel_spans.OtelAnalyzer instead).
CONVENTION_COVERED = frozenset({"upstream_seconds"})
ATTRIBUTE_NAMES: Mapping[str, str] = {"model": "gen_ai.request.model", "reason": "cachewarden.miss.reason"}
_UNITS = (
    ("_tokens", "{token}"),
    ("_usd", "{USD}"),
    ("_seconds", "s"),
    ("_share", "1"),
    ("requests", "{request}"),
    ("findings", "{finding}"),
    ("_errors", "{error}"),
    ("_dropped", "{request}"),
    ("_reports", "{response}"),
    ("_entries", "{entry}"),
)


def otel_name(prometheus_name: str) -> str:
    return "cachewarden." + prometheus_name.removeprefix(PREFIX)


def attribute_name(label: str) -> str:
    return ATTRIBUTE_NAMES.get(label, f"cachewarden.{label}")


def _unit(name: str) -> str:
    return next((unit for suffix, unit in _UNITS if name.endswith(suffix)), "1")


class _Child:
    """One labelled series: records in Prometheus, then in the OTel instrument."""

    __slots__ = ("_attributes", "_instrument", "_prometheus")

    def __init__(self, prometheus: Any, instrument: Any, attributes: dict[str, str]) -> None:
        self._prometheus, self._instrument, self._attributes = prometheus, instrument, attributes

    def inc(self, amount: float = 1) -> None:
        self._prometheus.inc(amount)
        self._instrument.add(amount, self._attributes)

    def observe(self, value: float) -> None:
        self._prometheus.observe(value)
        self._instrument.record(value, self._attributes)

    def set(self, value: float) -> None:
        self._prometheus.set(value)
        self._instrument.set(value, self._attributes)


class Mirrored:
    """A Prometheus metric whose ``labels(...)`` children also record to an OTel instrument."""

    def __init__(self, prometheus: Counter | Histogram | Gauge, instrument: Any) -> None:
        self.prometheus = prometheus
        self.instrument = instrument
        self._attribute_names: Sequence[str] = [attribute_name(n) for n in prometheus._labelnames]

    def labels(self, *values: str) -> _Child:
        attributes = dict(zip(self._attribute_names, values, strict=True))
        return _Child(self.prometheus.labels(*values), self.instrument, attributes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.prometheus, name)


def _instrument(meter: Meter, metric: Counter | Histogram | Gauge) -> Any:
    name, doc = otel_name(metric._name), metric._documentation
    if isinstance(metric, Counter):
        return meter.create_counter(name, unit=_unit(name), description=doc)
    if isinstance(metric, Histogram):
        bounds = [b for b in metric._upper_bounds if b != float("inf")]
        return meter.create_histogram(
            name, unit=_unit(name), description=doc, explicit_bucket_boundaries_advisory=bounds
        )
    return meter.create_gauge(name, unit=_unit(name), description=doc)


def mirror_metrics(metrics: Metrics, meter: Meter) -> list[str]:
    """Makes every metric of ``metrics`` record to ``meter`` too; returns the OTel names."""
    names = []
    for attribute, value in list(vars(metrics).items()):
        if not isinstance(value, Counter | Histogram | Gauge) or attribute in CONVENTION_COVERED:
            continue
        setattr(metrics, attribute, Mirrored(value, _instrument(meter, value)))
        names.append(otel_name(value._name))
    return names
