"""The ASGI app of `cachewarden proxy`: routes, the per-request exchange, and its own endpoints.

One request, one concern per layer::

    Proxy.__call__     route, read the bounded body, build the Flow
    ├─ _exchange       forward upstream, relay the response (cancelled when the client leaves)
    ├─ _request_stage  Analyzer.request hooks in a worker thread, once the body went upstream
    └─ _finish         metrics, Analyzer.response hooks (after the request stage), access log

With analysis worker processes (observe mode's default: cli/proxy.py ``uses_processes``)
``_pooled`` replaces the two stages: the body and then the response's usage go to the tenant's
worker process, and ``_complete`` counts the request and writes its log line once the worker
answered (analysis_workers.py); nothing in this process reads the body.

The request always goes upstream without waiting for analysis; analysis never changes the answer.

This module is long because one request's whole life is in one class, in the order above; what
does not need the request's state (routing, forwarding, usage, metrics, the hooks) lives in its own
module already.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import httpx
from cachewarden.proxy.engine.usage import Provider, UsageTracker
from cachewarden.proxy.server.transforms.diagnostics import STRIP_DIAGNOSTICS, diagnostics_editor
from cachewarden.proxy.server.transforms.optimize import STRIP_USAGE_CHUNK
from cachewarden.proxy.server.transforms.usage_stream import identity_encoding, stream_editor
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from .analysis_queue import AnalysisQueue
from .analysis_worker import Factory
from .analysis_workers import AnalysisPool, Done
from .config import Settings
from .forward import (
    ChunkEditor,
    Family,
    RelayResponse,
    StreamBroken,
    UpstreamError,
    build_request,
    error_response,
    make_client,
    map_upstream_errors,
    relay,
    request_headers,
    response_headers,
    upstream_url,
)
from .hooks import (
    Analyzer,
    Capture,
    Flow,
    JsonlSink,
    KeyHasher,
    Rewriter,
    Timings,
    body_loader,
    call_hooks,
    call_rewriter,
    close_analyzers,
    default_analyzers,
    parse_model,
    redact,
)
from .metrics import CONTENT_TYPE, Metrics, safe_model

logger = logging.getLogger("cachewarden.proxy")

_OPENAI_ROUTES: dict[str, tuple[str, Provider]] = {
    "/v1/chat/completions": ("openai-chat", "openai-chat"),
    "/v1/responses": ("openai-responses", "openai-responses"),
}


@dataclass(frozen=True, slots=True)
class Target:
    """Where one request goes: decided by path and method only, never by a client header."""

    route: str
    provider: Provider | None
    upstream: str
    base_url: str
    family: Family
    raw_path: bytes


class Router:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def resolve(self, method: str, path: str, raw_path: bytes) -> Target:
        s = self.settings
        first = path.split("/", 2)[1] if path.count("/") >= 2 else ""
        named = s.upstreams.get(first)
        if named is not None and raw_path.startswith(f"/{first}/".encode()):
            rest, rest_raw = path[len(first) + 1 :], raw_path[len(first) + 1 :]
            route, provider = (
                _OPENAI_ROUTES.get(rest, ("passthrough", None)) if method == "POST" else ("passthrough", None)
            )
            return Target(route, provider, named.name, named.url, "openai", rest_raw)
        if path.startswith("/v1/messages"):
            if method == "POST" and path == "/v1/messages":
                return Target(
                    "anthropic-messages",
                    "anthropic",
                    "anthropic",
                    s.anthropic_upstream,
                    "anthropic",
                    raw_path,
                )
            if method == "POST" and path == "/v1/messages/count_tokens":
                return Target(
                    "anthropic-count-tokens",
                    "anthropic",
                    "anthropic",
                    s.anthropic_upstream,
                    "anthropic",
                    raw_path,
                )
            return Target("passthrough", None, "anthropic", s.anthropic_upstream, "anthropic", raw_path)
        route, provider = (
            _OPENAI_ROUTES.get(path, ("passthrough", None)) if method == "POST" else ("passthrough", None)
        )
        return Target(route, provider, "openai", s.openai_upstream, "openai", raw_path)


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing more than ``limit`` bytes by Content-Length and while reading."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.strip().isdigit() and int(value) > limit:
            raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _always_ready(flow: Flow) -> bool:
    return True


class Proxy:
    """The ASGI endpoint for every proxied path, and the state shared by one app's requests."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        analyzers: Sequence[Analyzer],
        rewriter: Rewriter | None,
        transport: httpx.AsyncBaseTransport | None,
        workers: Factory | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.analyzers = list(analyzers)
        self._load_body = body_loader(self.analyzers)
        self.rewriter = rewriter
        self.transport = transport
        self.router = Router(settings)
        self.analysis = AnalysisQueue(settings.analysis_workers, settings.analysis_backlog)
        self.hash_key = KeyHasher(settings.key_salt)
        self._series: dict[tuple[tuple[str, ...], str], list[Any]] = {}
        self.client: httpx.AsyncClient | None = None
        self.draining = False
        self.access_log = JsonlSink(settings.access_log) if settings.access_log else None
        self.capture = JsonlSink(settings.capture) if settings.capture else None
        # Analysis in worker processes, in observe mode only: the rewriter of the other modes (and
        # --anthropic-diagnostics) shares the engine's state with the analysis (analysis_workers.py).
        self.workers = workers if settings.mode == "observe" and not settings.anthropic_diagnostics else None
        self.pool: AnalysisPool | None = None
        if self.capture is not None and self.workers is not None:
            self.capture.close()  # opened to fail at start-up on a bad path; the workers write it
            self.capture = None
        elif self.capture is not None:
            self.analyzers.append(Capture(self.capture))

    @property
    def ready(self) -> bool:
        return self.client is not None and not self.draining

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.client = make_client(self.settings, self.transport)
        self.analysis = AnalysisQueue(self.settings.analysis_workers, self.settings.analysis_backlog)
        self.draining = False
        if self.workers is not None:
            self.pool = AnalysisPool(self.settings, self.workers, self.metrics, self._completed)
            try:
                await self.pool.start()
            except BaseException:
                await self.pool.stop()
                raise
        try:
            yield
        finally:
            self.draining = True
            client, self.client = self.client, None
            await client.aclose()
            if self.pool is not None:
                # Bounded by --graceful-timeout; what is left then is counted as dropped.
                await self.pool.stop()
            # Queued analysis writes metrics and the capture file: let it finish before the sinks close.
            await anyio.to_thread.run_sync(self.analysis.shutdown)
            await anyio.to_thread.run_sync(close_analyzers, self.analyzers)
            for sink in (self.access_log, self.capture):
                if sink is not None:
                    sink.close()

    # -- one request -------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        # raw_path keeps the client's percent-encoding; some servers (httpx's ASGITransport) append the query.
        raw_path = (scope.get("raw_path") or scope["path"].encode()).split(b"?", 1)[0]
        target = self.router.resolve(method, scope["path"], raw_path)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        flow = Flow(
            id=uuid.uuid4().hex,
            route=target.route,
            provider=target.provider,
            upstream=target.upstream,
            method=method,
            path=scope["path"],
            request_body=b"",
            request_headers=redact(headers),
            key_hash=self.hash_key(headers),
            tenant="anonymous",
            timings=Timings(received=time.perf_counter()),
            mode=self.settings.mode,
        )
        flow.tenant = self._tenant(headers, flow.key_hash)
        if self.client is None:
            await self._answer_error(
                flow, target.family, 503, "cachewarden proxy is not ready", scope, receive, send
            )
            return
        try:
            flow.request_body = await read_body(scope, receive, self.settings.max_body_bytes)
        except BodyTooLarge:
            message = f"request body larger than the proxy's limit of {self.settings.max_body_bytes} bytes"
            await self._answer_error(flow, target.family, 413, message, scope, receive, send)
            return
        except ClientGone:
            return
        flow.timings.received = time.perf_counter()
        headers = request_headers(list(scope["headers"]))
        rewrites = self.settings.mode != "observe" or self.settings.anthropic_diagnostics
        if self.rewriter is not None and flow.analysed and rewrites:
            # Analyzers see the body as forwarded (hooks.Analyzer.request).
            flow.request_body = await anyio.to_thread.run_sync(
                call_rewriter, self.rewriter, flow, self.metrics
            )
            if flow.metadata.get(STRIP_USAGE_CHUNK) or flow.metadata.get(STRIP_DIAGNOSTICS):
                headers = identity_encoding(headers)  # the relay edits this stream: no compression

        if self.pool is not None:
            await self._pooled(flow, target, method, headers, scope, receive, send)
            return
        sent, request_done = anyio.Event(), anyio.Event()
        request = build_request(
            method,
            upstream_url(target.base_url, target.raw_path, scope.get("query_string", b"")),
            headers,
            flow.request_body,
            sent.set,
        )
        async with anyio.create_task_group() as analysis:
            if flow.analysed:
                analysis.start_soon(self._request_stage, flow, sent, request_done)
            else:
                request_done.set()
            try:
                await self._exchange_until_disconnect(flow, target, request, scope, receive, send)
            finally:
                sent.set()  # the request stage also runs when the upstream was never reached
            await request_done.wait()
            await self._finish(flow)

    async def _pooled(
        self,
        flow: Flow,
        target: Target,
        method: str,
        headers: list[tuple[bytes, bytes]],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """One request with the analysis in worker processes: nothing here reads the body."""
        pool = self.pool
        assert pool is not None
        # Count-tokens requests are not analysed, but counted per model (the worker reads it).
        wanted = flow.analysed or flow.route == "anthropic-count-tokens"
        submitted = False

        def on_sent() -> None:
            nonlocal submitted
            if submitted or not wanted:
                return
            submitted = True
            if not pool.submit(flow) and flow.analysed:
                m = self.metrics
                m.analysis_dropped.labels(*m.labels(flow.provider, flow.model, flow.tenant)).inc()

        request = build_request(
            method,
            upstream_url(target.base_url, target.raw_path, scope.get("query_string", b"")),
            headers,
            flow.request_body,
            on_sent,
        )
        try:
            await self._exchange_until_disconnect(flow, target, request, scope, receive, send)
        finally:
            on_sent()  # also when the upstream was never reached, as the request stage of threads
            # Labelled without the model: counted now, as with threads, not once the worker answered.
            self._count_usage_report(flow)
            if not pool.respond(flow):
                self._complete(flow, None)

    def _completed(self, flow: Flow, done: Done | None) -> None:
        """A worker's reply (None: the worker died with this request's analysis)."""
        if done is None:
            m = self.metrics
            m.analysis_dropped.labels(*m.labels(flow.provider, flow.model, flow.tenant)).inc()
        self._complete(flow, done)

    def _complete(self, flow: Flow, done: Done | None) -> None:
        """Process mode: counts the request with the model its worker read, and logs it (on the loop:
        a few counters, the forwarder's own analyzers, which must be cheap, and one log line)."""
        if done is not None:
            model, _, access_count, access_diagnosis = done
            flow.model = model or flow.model
            if access_count is not None:
                flow.metadata["access_count"] = access_count
            if access_diagnosis is not None:
                flow.metadata["access_diagnosis"] = access_diagnosis
        self._count(flow, usage_report=False)
        if flow.analysed and flow.timings.sent is not None:
            call_hooks(self.analyzers, "request", flow, self.metrics)
            call_hooks(self.analyzers, "response", flow, self.metrics)
        self._log(flow)

    def _tenant(self, headers: list[tuple[str, str]], key_hash: str | None) -> str:
        wanted = self.settings.tenant_header
        if wanted:
            value = next((v.strip() for k, v in headers if k == wanted and v.strip()), None)
            if value:
                return value[:128]
        return f"key:{key_hash}" if key_hash else "anonymous"

    async def _exchange_until_disconnect(
        self, flow: Flow, target: Target, request: httpx.Request, scope: Scope, receive: Receive, send: Send
    ) -> None:
        completed = False

        async def tracking_send(message: Message) -> None:
            nonlocal completed
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                # Before the send: a client that reads the last bytes and hangs up at once must not
                # race this flag and be counted as a mid-stream disconnect.
                completed = True
            await send(message)

        async def watch(scope_: anyio.CancelScope) -> None:
            # After the body, receive() returns only on disconnect, or (uvicorn) once the response ended.
            while (await receive())["type"] != "http.disconnect":
                pass
            if completed:
                return
            if flow.response_ended:
                # SDKs close a stream once its last event arrived, often before the final (empty)
                # body message went out: the exchange is complete, stop waiting for the upstream's end.
                flow.outcome = str(flow.status)
            else:
                flow.outcome = "client_disconnect"
                logger.info("flow %s: client disconnected; cancelling the upstream request", flow.id)
            scope_.cancel()

        async with anyio.create_task_group() as exchange:
            exchange.start_soon(watch, exchange.cancel_scope)
            await self._exchange(flow, target, request, scope, receive, tracking_send)
            exchange.cancel_scope.cancel()

    async def _exchange(
        self, flow: Flow, target: Target, request: httpx.Request, scope: Scope, receive: Receive, send: Send
    ) -> None:
        assert self.client is not None
        flow.timings.sent = time.perf_counter()
        try:
            with map_upstream_errors(target.upstream):
                upstream = await self.client.send(request, stream=True)
        except UpstreamError as exc:
            labels = self.metrics.labels(flow.provider, None)
            self.metrics.upstream_errors.labels(labels[0], exc.kind).inc()
            logger.warning("flow %s: %s (%s)", flow.id, exc.message, exc.__cause__)
            flow.error = exc.message
            await self._answer_error(flow, target.family, exc.status, exc.message, scope, receive, send)
            return
        flow.status = upstream.status_code
        tracker = None
        if flow.analysed and flow.provider is not None:
            tracker = UsageTracker(
                flow.provider, upstream.headers.get("content-type"), upstream.headers.get("content-encoding")
            )
        editor: ChunkEditor | None = stream_editor(flow, upstream.status_code, upstream.headers)
        editor = editor or diagnostics_editor(flow, upstream.status_code, upstream.headers)
        response = RelayResponse(
            relay(upstream, flow, tracker, editor),
            upstream.status_code,
            background=BackgroundTask(upstream.aclose),
        )
        # Assigned raw: a mapping would merge repeated headers such as Set-Cookie.
        response.raw_headers = response_headers(upstream.headers.raw)
        if getattr(editor, "drops_length", False):
            # The body is edited whole (transforms/diagnostics.py): its length is the relay's to set.
            response.raw_headers = [(k, v) for k, v in response.raw_headers if k.lower() != b"content-length"]
        try:
            await response(scope, receive, send)
        except StreamBroken:
            flow.outcome = "stream_error"
            self.metrics.upstream_errors.labels(flow.provider or "none", "stream").inc()
            logger.warning("flow %s: %s; closing the client connection", flow.id, flow.error)
            # Returning without the final body message makes the server close the connection, so the
            # client sees a broken stream instead of a silently truncated "complete" one.
            return
        finally:
            flow.timings.done = time.perf_counter()
            if tracker is not None:
                report = tracker.finish()
                flow.usage, flow.usage_raw, flow.usage_state = report.usage, report.raw, report.state
                flow.metadata["response_model"] = report.model
                # Anthropic: the message id and its cache diagnostics (analysis.py compares them).
                flow.metadata["message_id"] = report.message_id
                flow.metadata["diagnostics"] = report.diagnostics
                if report.response_id is not None:
                    flow.metadata["response_id"] = report.response_id
                    flow.metadata["response_output"] = report.output_items
                if flow.model is None and report.model:
                    flow.model = report.model
        flow.outcome = str(upstream.status_code)

    async def _answer_error(
        self,
        flow: Flow,
        family: Family,
        status: int,
        message: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        flow.status, flow.outcome = status, str(status)
        flow.error = flow.error or message
        await error_response(family, status, message)(scope, receive, send)
        flow.timings.done = time.perf_counter()
        if status in (413, 503):  # never forwarded: no analysis stages, only the count and the log line
            await self._finish(flow)

    async def _request_stage(self, flow: Flow, sent: anyio.Event, done: anyio.Event) -> None:
        try:
            await sent.wait()
            # One lane per tenant: its requests are analysed in the order they came (analysis_queue).
            ready = functools.partial(self._analyzers_ready, flow)
            if not await self.analysis.run(
                self._run_request_hooks, flow, droppable=True, lane=flow.tenant, ready=ready
            ):
                self.metrics.analysis_dropped.labels(
                    *self.metrics.labels(flow.provider, flow.model, flow.tenant)
                ).inc()
        except Exception:
            # Raised here it would cancel the exchange in the same task group: fail open instead.
            logger.exception("request analysis failed (flow %s); request unaffected", flow.id)
            self.metrics.analysis_errors.labels(
                *self.metrics.labels(flow.provider, flow.model, flow.tenant), "request"
            ).inc()
        finally:
            done.set()

    def _analyzers_ready(self, flow: Flow) -> bool:
        """Whether every analyzer can take the request now (an optional ``ready(flow)`` hook)."""
        return all(getattr(a, "ready", _always_ready)(flow) for a in self.analyzers)

    def _run_request_hooks(self, flow: Flow) -> None:
        parse_model(flow, self._load_body)
        call_hooks(self.analyzers, "request", flow, self.metrics)

    async def _finish(self, flow: Flow) -> None:
        """Counts the request, then runs the response hooks and the access log off the event loop."""
        if self.pool is not None:
            self._complete(flow, None)
            return
        with anyio.CancelScope(shield=True):
            if flow.model is None and flow.route == "anthropic-count-tokens":
                # Not analysed, but counted per model like the prompt it counts (off the loop).
                await anyio.to_thread.run_sync(parse_model, flow, self._load_body)
            self._count(flow)
            await self.analysis.run(self._after_response, flow, droppable=False, lane=flow.tenant)

    def _count_usage_report(self, flow: Flow) -> None:
        if flow.usage_state is not None:
            self.metrics.usage_reports.labels(flow.provider or "none", flow.usage_state).inc()

    def _count(self, flow: Flow, usage_report: bool = True) -> None:
        m, t = self.metrics, flow.timings
        base = m.labels(flow.provider, flow.model, flow.tenant)
        outcome = flow.outcome or "unknown"
        # A label set's series, each looked up once, when first used (a lookup takes the metric's
        # lock and converts the values: ~5-10 µs, each request, on the event loop). Label sets are
        # bounded; the cap only bounds this memo.
        series = self._series.get((base, outcome))
        if series is None:
            series = [m.requests.labels(*base, outcome), None, None, None]
            if len(self._series) < 4096:
                self._series[base, outcome] = series
        series[0].inc()
        if t.sent is not None:
            series[1] = series[1] or m.overhead_seconds.labels(*base)
            series[1].observe(t.sent - t.received)
            if t.first_byte is not None:
                series[2] = series[2] or m.upstream_seconds.labels(*base, "first_byte")
                series[2].observe(t.first_byte - t.sent)
            if t.done is not None and flow.outcome == str(flow.status) and flow.error is None:
                series[3] = series[3] or m.upstream_seconds.labels(*base, "total")
                series[3].observe(t.done - t.sent)
        if usage_report:
            self._count_usage_report(flow)

    def _after_response(self, flow: Flow) -> None:
        if flow.analysed and flow.timings.sent is not None:
            call_hooks(self.analyzers, "response", flow, self.metrics)
        self._log(flow)

    def _log(self, flow: Flow) -> None:
        if self.access_log is not None:
            try:
                self.access_log.write(access_record(flow))
            except Exception:
                logger.exception("access log write failed (flow %s)", flow.id)


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000, 3)


def access_record(flow: Flow) -> dict[str, Any]:
    """One access-log line: no prompt text, no header values, no query string (it may hold a key)."""
    t, u = flow.timings, flow.usage
    return {
        "ts": round(t.received_at, 3),
        "id": flow.id,
        "method": flow.method,
        "path": flow.path,
        "route": flow.route,
        "upstream": flow.upstream,
        "provider": flow.provider,
        "model": safe_model(flow.model),
        "status": flow.outcome,
        "tenant": flow.tenant,
        "request_bytes": len(flow.request_body),
        "usage_state": flow.usage_state,
        # Input tokens counted, after self-calibration, and reported (analysis.py); numbers only.
        "count": flow.metadata.get("access_count"),
        # Anthropic's cache diagnosis beside cachewarden's first reason (codes only).
        "diagnosis": flow.metadata.get("access_diagnosis"),
        "tokens": None
        if u is None
        else {
            "input": u.input_total,
            "cached": u.cached,
            "cache_write": u.cache_write,
            "uncached": u.uncached,
            "output": u.output,
        },
        "timings_ms": {
            "overhead": _ms(t.received, t.sent),
            "first_byte": _ms(t.sent, t.first_byte),
            "total": _ms(t.sent, t.done),
        },
        "error": flow.error,
    }


def create_app(
    settings: Settings | None = None,
    *,
    analyzers: Sequence[Analyzer] | None = None,
    metrics: Metrics | None = None,
    rewriter: Rewriter | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    workers: Factory | None = None,
) -> Starlette:
    """A new proxy app with its own connection pool and metrics registry.

    ``analyzers`` default to ``default_analyzers(metrics)``; pass the same ``metrics`` to the
    analyzers you build. ``rewriter`` runs before forwarding in canonicalize / optimize mode only.
    ``transport`` replaces the network (tests: ``httpx.MockTransport``). ``workers``: in observe
    mode, the analysis runs in ``settings.analysis_workers`` processes, each building its analyzers
    with this module-level function ``(settings, metrics) -> analyzers`` (analysis_workers.py);
    ``analyzers`` then run in the forwarder once a worker answered, and must be cheap.
    """
    settings = settings or Settings()
    metrics = metrics or Metrics(settings.max_model_labels, tenant_labels=settings.tenant_labels)
    proxy = Proxy(
        settings,
        metrics,
        default_analyzers(metrics) if analyzers is None else analyzers,
        rewriter,
        transport,
        workers,
    )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if proxy.ready:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "draining" if proxy.draining else "starting"}, status_code=503)

    async def metrics_endpoint(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET", "HEAD"]),
            Route("/readyz", readyz, methods=["GET", "HEAD"]),
            Route("/metrics", metrics_endpoint, methods=["GET", "HEAD"]),
            Route("/{path:path}", proxy),  # an ASGI app, every method
        ],
        lifespan=proxy.lifespan,
    )
    app.state.proxy = proxy
    app.state.metrics = metrics
    return app
