"""What `cachewarden proxy --otel` exports and where: read from the standard ``OTEL_*`` variables.

Pure parsing, no OpenTelemetry import, so that a configuration that cannot work is refused at
start-up (``ConfigError``: exit 2 and one line) before anything is built. Read here:

- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (base URL; ``/v1/traces`` and ``/v1/metrics`` are appended) or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``…_METRICS_ENDPOINT`` (full URLs); default
  ``http://localhost:4318``.
- ``OTEL_EXPORTER_OTLP_PROTOCOL`` (and the per-signal ones): only ``http/protobuf``.
- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``: ``otlp`` (default) or ``none``.
- ``OTEL_EXPORTER_OTLP_TIMEOUT`` (and per signal): seconds per export, as the Python SDK reads it.
- ``OTEL_SERVICE_NAME`` (default ``cachewarden``), ``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,k=v``).
- ``OTEL_SEMCONV_STABILITY_OPT_IN``: ``gen_ai_latest_experimental`` selects the newest GenAI names.
- ``OTEL_METRIC_EXPORT_INTERVAL`` (ms, default 60000), ``OTEL_SDK_DISABLED``.

Headers (``OTEL_EXPORTER_OTLP_HEADERS``), compression and TLS files are left to the SDK, which
reads them from the process environment itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit

from cachewarden.proxy.engine.errors import ConfigError

Signal = Literal["traces", "metrics"]
DEFAULT_ENDPOINT = "http://localhost:4318"
LATEST_GENAI = "gen_ai_latest_experimental"
_EXPORTERS = ("otlp", "none")
_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class OtelConfig:
    """One signal is off when its endpoint is None. ``latest_genai``: the newest GenAI names."""

    traces_endpoint: str | None
    metrics_endpoint: str | None
    traces_timeout: float = _TIMEOUT_SECONDS
    metrics_timeout: float = _TIMEOUT_SECONDS
    service_name: str = "cachewarden"
    resource: Mapping[str, str] = field(default_factory=dict)
    latest_genai: bool = False
    metric_interval_ms: int = 60_000
    disabled: bool = False


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _url(name: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name}: expected an http(s) URL such as {DEFAULT_ENDPOINT} (got {value!r})")
    return value


def _endpoint(env: Mapping[str, str], signal: Signal) -> str | None:
    upper = signal.upper()
    exporter = (_get(env, f"OTEL_{upper}_EXPORTER") or "otlp").lower()
    if exporter not in _EXPORTERS:
        raise ConfigError(
            f"OTEL_{upper}_EXPORTER: cachewarden exports {' or '.join(_EXPORTERS)} only (got {exporter!r})"
        )
    if exporter == "none":
        return None
    for name in (f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = _get(env, name)
        if protocol is not None:
            if protocol != "http/protobuf":
                raise ConfigError(f"{name}: cachewarden exports OTLP http/protobuf only (got {protocol!r})")
            break
    own = _get(env, f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT")
    if own is not None:
        return _url(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", own)
    base = _url("OTEL_EXPORTER_OTLP_ENDPOINT", _get(env, "OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT)
    return f"{base.rstrip('/')}/v1/{signal}"


def _positive(name: str, value: str | None, default: float) -> float:
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0:
        raise ConfigError(f"{name}: expected a positive number (got {value!r})")
    return number


def _resource(value: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (value or "").split(","):
        if not item.strip():
            continue
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"OTEL_RESOURCE_ATTRIBUTES: expected key=value,… (got {item.strip()!r})")
        out[key.strip()] = unquote(raw.strip())
    return out


def read_otel_config(env: Mapping[str, str]) -> OtelConfig:
    """The export configuration in ``env``; raises ConfigError on a value that cannot work."""
    opt_in = {v.strip() for v in (env.get("OTEL_SEMCONV_STABILITY_OPT_IN") or "").split(",")}
    resource = _resource(_get(env, "OTEL_RESOURCE_ATTRIBUTES"))
    service = _get(env, "OTEL_SERVICE_NAME") or resource.pop("service.name", None) or "cachewarden"
    resource.pop("service.name", None)
    timeout = _get(env, "OTEL_EXPORTER_OTLP_TIMEOUT")
    return OtelConfig(
        traces_endpoint=_endpoint(env, "traces"),
        metrics_endpoint=_endpoint(env, "metrics"),
        traces_timeout=_positive(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            _get(env, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or timeout,
            _TIMEOUT_SECONDS,
        ),
        metrics_timeout=_positive(
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            _get(env, "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT") or timeout,
            _TIMEOUT_SECONDS,
        ),
        service_name=service,
        resource=resource,
        latest_genai=LATEST_GENAI in opt_in,
        metric_interval_ms=int(
            _positive("OTEL_METRIC_EXPORT_INTERVAL", _get(env, "OTEL_METRIC_EXPORT_INTERVAL"), 60_000)
        ),
        disabled=(_get(env, "OTEL_SDK_DISABLED") or "").lower() == "true",
    )
