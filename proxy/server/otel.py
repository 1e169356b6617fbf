"""The OpenTelemetry pipelines of `cachewarden proxy --otel`: providers, exporters, export health.

OpenTelemetry is an optional extra (``cachewarden[otel]``): this module imports it only inside
``open_telemetry``, so the proxy and this module import without it, and ``--otel`` without the
extra is a ``ConfigError`` (exit 2, one line).

Export never touches a request: spans go through a ``BatchSpanProcessor`` (a bounded queue that
drops when full, exported from its own thread) and metrics through a periodic reader (its own
thread). An export that fails (dead endpoint, refused batch, an exception in the exporter) is
counted in ``cachewarden_otel_export_errors_total{signal}`` and logged at most once a minute per
signal; the SDK's own per-attempt log lines are kept out of the proxy's log in favour of that one.
The providers are this app's own: the process-global OpenTelemetry providers are left alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cachewarden.proxy import __version__
from cachewarden.proxy.engine.errors import ConfigError
from prometheus_client import Counter

from .metrics import PREFIX, Metrics
from .otel_config import OtelConfig, Signal

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.trace import Tracer

logger = logging.getLogger("cachewarden.proxy")

LOG_INTERVAL_SECONDS = 60.0
# Bound on the metrics' last export at shutdown (the spans' last one is bounded by the exporter's
# timeout, OTEL_EXPORTER_OTLP_TIMEOUT, and skipped when the one before it failed).
SHUTDOWN_SECONDS = 5.0
# The SDK loggers that report each failed export attempt: ExportHealth reports instead.
_SDK_EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.common.http",
)
# The batch processor's logger ("Queue full, dropping span."): each message once a minute.
_SDK_BATCH_LOGGER = "opentelemetry.sdk._shared_internal"


def _safe_endpoint(url: str) -> str:
    """The endpoint without user info, query or fragment (where a token might sit), for a log line."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


class ExportHealth:
    """Counts failed exports per signal; logs one line per signal at most every ``interval`` s."""

    def __init__(
        self,
        errors: Counter,
        endpoints: dict[Signal, str],
        clock: Callable[[], float] = time.monotonic,
        interval: float = LOG_INTERVAL_SECONDS,
    ) -> None:
        self._errors = errors
        self._endpoints = endpoints
        self._clock = clock
        self._interval = interval
        self._lock = threading.Lock()
        self._logged_at: dict[Signal, float] = {}
        self._unlogged: dict[Signal, int] = {}
        self._down: set[Signal] = set()
        # Set at shutdown: a signal whose last export failed drops the rest instead of retrying.
        self.closing = False

    def skip(self, signal: Signal) -> bool:
        with self._lock:
            return self.closing and signal in self._down

    def succeeded(self, signal: Signal) -> None:
        with self._lock:
            self._down.discard(signal)

    def failed(self, signal: Signal, why: str) -> None:
        self._errors.labels(signal).inc()
        now = self._clock()
        with self._lock:
            self._down.add(signal)
            self._unlogged[signal] = self._unlogged.get(signal, 0) + 1
            last = self._logged_at.get(signal)
            if last is not None and now - last < self._interval:
                return
            count, self._unlogged[signal] = self._unlogged[signal], 0
            self._logged_at[signal] = now
        logger.warning(
            "OpenTelemetry %s export to %s failed (%s; %d failure(s) since the last report); "
            "requests are unaffected, the data of failed exports is dropped",
            signal,
            _safe_endpoint(self._endpoints.get(signal, "?")),
            why,
            count,
        )


class _QuietSdkExportLogs(logging.Filter):
    """Drops the SDK's per-attempt export messages (ExportHealth logs a summary instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.CRITICAL


class _OncePerMinute(logging.Filter):
    """Lets each distinct message through at most once every LOG_INTERVAL_SECONDS."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[object, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(record.msg)
            if last is not None and now - last < LOG_INTERVAL_SECONDS:
                return False
            self._last[record.msg] = now
        return True


def _quiet_sdk_logs() -> None:
    """Process-wide, once: the SDK's export loggers speak through ExportHealth or once a minute."""
    wanted: list[tuple[str, type[logging.Filter]]] = [(n, _QuietSdkExportLogs) for n in _SDK_EXPORT_LOGGERS]
    wanted.append((_SDK_BATCH_LOGGER, _OncePerMinute))
    for name, kind in wanted:
        sdk_logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in sdk_logger.filters):
            sdk_logger.addFilter(kind())


@dataclass(slots=True)
class Telemetry:
    """This app's OpenTelemetry providers; ``tracer`` / ``meter`` are None when a signal is off."""

    config: OtelConfig
    tracer: Tracer | None
    meter: Meter | None
    health: ExportHealth
    _tracer_provider: TracerProvider | None
    _meter_provider: MeterProvider | None
    _closed: bool = False

    def shutdown(self) -> None:
        """Exports what is queued, then stops the export threads. With a dead endpoint, one attempt
        per signal: after a failed one, the rest is dropped (counted) instead of retried."""
        if self._closed:
            return
        self._closed = True
        self.health.closing = True
        try:
            if self._tracer_provider is not None:
                self._tracer_provider.shutdown()
            if self._meter_provider is not None:
                self._meter_provider.shutdown(timeout_millis=SHUTDOWN_SECONDS * 1000)
        except Exception:
            logger.exception("OpenTelemetry shutdown failed; some telemetry may be lost")


def _import_error() -> ConfigError:
    return ConfigError("--otel: OpenTelemetry is not installed; pip install 'cachewarden[otel]'")


def open_telemetry(config: OtelConfig, metrics: Metrics) -> Telemetry:
    """Builds the providers and exporters of ``config``; raises ConfigError without the extra."""
    try:
        from opentelemetry.sdk.resources import Resource
    except ImportError as exc:
        raise _import_error() from exc
    errors = Counter(
        PREFIX + "otel_export_errors",
        "Failed OpenTelemetry exports (the data is dropped; requests are unaffected).",
        ("signal",),
        registry=metrics.registry,
    )
    for signal in ("traces", "metrics"):
        errors.labels(signal)  # exported at 0 from start-up
    endpoints: dict[Signal, str] = {}
    if config.traces_endpoint is not None:
        endpoints["traces"] = config.traces_endpoint
    if config.metrics_endpoint is not None:
        endpoints["metrics"] = config.metrics_endpoint
    health = ExportHealth(errors, endpoints)
    if config.disabled:
        logger.info("OTEL_SDK_DISABLED=true: --otel exports nothing")
        return Telemetry(config, None, None, health, None, None)
    _quiet_sdk_logs()
    resource = Resource.create(
        {"service.version": __version__, **config.resource, "service.name": config.service_name}
    )
    tracer_provider = _tracer_provider(config, resource, health) if config.traces_endpoint else None
    meter_provider = _meter_provider(config, resource, health) if config.metrics_endpoint else None
    return Telemetry(
        config,
        tracer_provider.get_tracer("cachewarden", __version__) if tracer_provider else None,
        meter_provider.get_meter("cachewarden", __version__) if meter_provider else None,
        health,
        tracer_provider,
        meter_provider,
    )


def _tracer_provider(config: OtelConfig, resource: Any, health: ExportHealth) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class CountingSpanExporter(SpanExporter):
        def __init__(self, inner: SpanExporter) -> None:
            self.inner = inner

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            if health.skip("traces"):
                health.failed("traces", "still unreachable at shutdown")
                return SpanExportResult.FAILURE
            try:
                result = self.inner.export(spans)
            except Exception as exc:
                health.failed("traces", type(exc).__name__)
                return SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                health.succeeded("traces")
            else:
                health.failed("traces", f"{len(spans)} span(s) not accepted")
            return result

        def shutdown(self) -> None:
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return self.inner.force_flush(timeout_millis)

    exporter = OTLPSpanExporter(endpoint=config.traces_endpoint, timeout=config.traces_timeout)
    provider = TracerProvider(resource=resource)
    # Bounded queue (OTEL_BSP_MAX_QUEUE_SIZE, default 2048): a span that does not fit is dropped.
    provider.add_span_processor(BatchSpanProcessor(CountingSpanExporter(exporter)))
    return provider


def _meter_provider(config: OtelConfig, resource: Any, health: ExportHealth) -> MeterProvider:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        MetricsData,
        PeriodicExportingMetricReader,
    )

    class CountingMetricExporter(MetricExporter):
        def __init__(self, inner: MetricExporter) -> None:
            super().__init__(
                preferred_temporality=inner._preferred_temporality,
                preferred_aggregation=inner._preferred_aggregation,
            )
            self.inner = inner

        def export(
            self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            if health.skip("metrics"):
                health.failed("metrics", "still unreachable at shutdown")
                return MetricExportResult.FAILURE
            try:
                result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:
                health.failed("metrics", type(exc).__name__)
                return MetricExportResult.FAILURE
            if result is MetricExportResult.SUCCESS:
                health.succeeded("metrics")
            else:
                health.failed("metrics", "the batch was not accepted")
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return self.inner.force_flush(timeout_millis)

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    exporter = OTLPMetricExporter(endpoint=config.metrics_endpoint, timeout=config.metrics_timeout)
    reader = PeriodicExportingMetricReader(
        CountingMetricExporter(exporter), export_interval_millis=config.metric_interval_ms
    )
    return MeterProvider(resource=resource, metric_readers=[reader])
