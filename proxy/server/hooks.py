"""The analyser hook API of the proxy: a ``Flow`` per request and addons with named hooks (mitmproxy style).

Order of events for one analysed request::

    body received ─► [Rewriter.rewrite(flow)]  only in canonicalize/optimize mode, before forwarding
                  ─► request sent upstream
                  ─► Analyzer.request(flow)     worker thread, beside the upstream call
    response relayed to the client (never waits for an analyzer)
                  ─► Analyzer.response(flow)    worker thread, after request() returned and the
                                                response ended; flow.usage is set when reported

Hooks fail open: any exception is logged, counted in ``analysis_errors_total{stage}`` and the
client sees nothing. Analyzers run in several threads at once (one per request), so shared state
in an analyzer needs a lock. ``flow.metadata`` carries state from ``request`` to ``response``.
An analyzer may also have a ``close()`` method: it runs once at shutdown, after the last hook.

With analysis worker processes (the default in observe mode: cli/proxy.py ``uses_processes``)
the analyzers run in worker processes instead (analysis_worker.py): each builds its own from a
factory, on a ``Metrics`` that records the updates for the forwarder (metric_records.py);
``flow.metadata`` then stays in the worker, and the forwarder gets back the model, the metric
updates and the access log's ``count`` / ``diagnosis``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from cachewarden.proxy.engine.adapters import load_body
from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.engine.usage import Provider, Usage, UsageState

from .metrics import Metrics

logger = logging.getLogger("cachewarden.proxy")

Stage = Literal["request", "response", "rewrite"]
REDACTED = "[redacted]"
# Headers whose values are credentials: never kept in a Flow, a log line or a metric.
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie", "set-cookie"}
)
_KEY_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")


@dataclass(slots=True)
class Timings:
    """Monotonic ``time.perf_counter()`` marks, plus the wall-clock time the request arrived."""

    received: float
    received_at: float = field(default_factory=time.time)
    sent: float | None = None
    first_byte: float | None = None
    done: float | None = None


@dataclass(slots=True, eq=False)
class Flow:
    """One proxied request and, once it ended, its response. Hooks may add to ``metadata`` only.

    ``route``: ``openai-chat`` | ``openai-responses`` | ``anthropic-messages`` |
    ``anthropic-count-tokens`` | ``passthrough``; only the first three are prompts the provider
    caches. ``upstream``: ``openai`` | ``anthropic`` | the name of a configured upstream.
    ``outcome`` is the ``status`` label of ``requests_total``: the HTTP status as text, or
    ``stream_error`` (upstream broke mid-stream) / ``client_disconnect`` (client left mid-stream).
    """

    id: str
    route: str
    provider: Provider | None
    upstream: str
    method: str
    path: str
    request_body: bytes
    request_headers: tuple[tuple[str, str], ...]
    key_hash: str | None
    tenant: str
    timings: Timings
    mode: str = "observe"
    model: str | None = None
    status: int | None = None
    outcome: str | None = None
    usage: Usage | None = None
    usage_raw: Mapping[str, Any] | None = None
    usage_state: UsageState | None = None
    error: str | None = None
    # The response's own end was relayed (a stream's last event): a hang-up after it is no loss.
    response_ended: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def analysed(self) -> bool:
        return self.route in ("openai-chat", "openai-responses", "anthropic-messages")


class Analyzer(Protocol):
    """An addon observing traffic. Both hooks run in a worker thread and must not block for long."""

    def request(self, flow: Flow) -> None:
        """After the request went upstream; the body is ``flow.request_body`` as forwarded."""

    def response(self, flow: Flow) -> None:
        """After the response ended (``flow.outcome``, ``flow.usage`` set) and ``request`` returned."""


class Rewriter(Protocol):
    """Canonicalisation seam: returns new body bytes to forward, or None to forward them unchanged."""

    def rewrite(self, flow: Flow) -> bytes | None: ...


# -- credentials ------------------------------------------------------------------------------------


class KeyHasher:
    """Salted hash of an API key: a stable tenant id that never reveals the key."""

    def __init__(self, salt: str | None = None) -> None:
        self._salt = (salt or secrets.token_hex(16)).encode()

    def __call__(self, headers: Iterable[tuple[str, str]]) -> str | None:
        found = {k: v for k, v in headers if k in _KEY_HEADERS}
        for name in _KEY_HEADERS:
            value = found.get(name, "").strip()
            if name == "authorization":
                scheme, _, token = value.partition(" ")
                value = token.strip() if scheme.lower() == "bearer" else value
            if value:
                return hashlib.sha256(self._salt + b"\0" + value.encode()).hexdigest()[:24]
        return None


def redact(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((k, REDACTED if k in SECRET_HEADERS else v) for k, v in headers)


# -- dispatch ---------------------------------------------------------------------------------------


def _name(analyzer: object) -> str:
    return type(analyzer).__name__


def call_hooks(
    analyzers: Sequence[Analyzer], stage: Literal["request", "response"], flow: Flow, metrics: Metrics
) -> None:
    """Runs one hook of every analyzer in order; an exception is logged, counted, and ignored."""
    for analyzer in analyzers:
        try:
            getattr(analyzer, stage)(flow)
        except Exception:
            logger.exception(
                "analyzer %s failed in %s (flow %s); request unaffected", _name(analyzer), stage, flow.id
            )
            metrics.analysis_errors.labels(
                *metrics.labels(flow.provider, flow.model, flow.tenant), stage
            ).inc()


def close_analyzers(analyzers: Sequence[Analyzer]) -> None:
    """Calls the optional ``close()`` of every analyzer at shutdown; an exception is logged only."""
    for analyzer in analyzers:
        close = getattr(analyzer, "close", None)
        if close is None:
            continue
        try:
            close()
        except Exception:
            logger.exception("analyzer %s failed to close", _name(analyzer))


def call_rewriter(rewriter: Rewriter, flow: Flow, metrics: Metrics) -> bytes:
    """The body to forward: the rewriter's, or the original when it declines or fails."""
    try:
        new = rewriter.rewrite(flow)
    except Exception:
        logger.exception(
            "rewriter %s failed (flow %s); forwarding the original body", _name(rewriter), flow.id
        )
        metrics.analysis_errors.labels(
            *metrics.labels(flow.provider, flow.model, flow.tenant), "rewrite"
        ).inc()
        return flow.request_body
    return flow.request_body if new is None else new


def parse_model(flow: Flow, load: Callable[[Flow], Any] | None = None) -> None:
    """Reads ``model`` from the JSON body (kept in ``flow.metadata["body"]`` for analyzers to reuse).
    ``load``: an analyzer's body loader (``body_loader``), else ``load_body``."""
    body = flow.metadata.get("body")  # read already by an analyzer's ``ready`` check
    if body is None:
        try:
            # The adapters' loader: orjson, bounded depth, and marked as checked so that the analysis
            # does not walk the body again.
            body = load(flow) if load is not None else load_body(flow.request_body)
        except (RequestError, RecursionError):
            return
    if isinstance(body, dict):
        flow.metadata["body"] = body
        if isinstance(body.get("model"), str):
            flow.model = body["model"]


def body_loader(analyzers: Sequence[Any]) -> Callable[[Flow], Any] | None:
    """The first analyzer's ``load_body(flow)``: the engine's parses only what a body appends to its
    tenant's previous one (engine/reading.py), the same dict ``load_body`` gives."""
    return next((a.load_body for a in analyzers if callable(getattr(a, "load_body", None))), None)


# -- the built-in analyzer --------------------------------------------------------------------------


class ReportedUsage:
    """Counts the usage providers report as ``input_tokens_total{source="reported"}``."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def request(self, flow: Flow) -> None:
        return None

    def response(self, flow: Flow) -> None:
        if flow.usage is not None:
            self.metrics.record_usage(flow.provider, flow.model, flow.usage, "reported", flow.tenant)


class JsonlSink:
    """Appends one JSON object per line to a file, or to stdout for ``-``; safe from several threads
    and several processes: a file line goes out in one ``write`` on an ``O_APPEND`` descriptor, so
    lines of the analysis worker processes (analysis_worker.py) sharing one capture never interleave."""

    def __init__(self, path: str) -> None:
        self.path = path
        # Opened at start-up so that a bad path fails the command, not the first request.
        self._fd = None if path == "-" else os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self._fd is None:
                sys.stdout.write(line)
                sys.stdout.flush()
                return
            data = memoryview(line.encode("utf-8"))
            while data:  # a regular file takes it whole; a short write only on a full disk or a signal
                data = data[os.write(self._fd, data) :]

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class Capture:
    """Opt-in (``--capture``): request bodies + reported usage as JSONL for ``cachewarden replay``.

    This is the one place prompt text leaves the process; credentials never do (no headers).
    """

    def __init__(self, sink: JsonlSink) -> None:
        self.sink = sink

    def request(self, flow: Flow) -> None:
        return None

    def response(self, flow: Flow) -> None:
        # The body as the provider sees it: a Responses request that chains to an earlier one is
        # written with the stored conversation in front (the engine analyzer puts it here).
        body = flow.metadata.get("provider_body") or flow.metadata.get("body")
        if body is None:
            try:
                body = json.loads(flow.request_body)
            except ValueError:
                return
        self.sink.write(
            {
                "timestamp": flow.timings.received_at,
                "provider": flow.provider,
                "route": flow.route,
                "upstream": flow.upstream,
                "tenant": flow.tenant,
                "status": flow.outcome,
                "request": body,
                "usage": flow.usage_raw,
            }
        )


def default_analyzers(metrics: Metrics) -> list[Analyzer]:
    """The analyzers an app gets when its factory is given none (the lead adds the engine here)."""
    return [ReportedUsage(metrics)]
