"""One analysis worker process: the analyzers of its share of the tenants, off the forwarding process.

Started by analysis_workers.py as ``python -m cachewarden.proxy.server.analysis_worker IN OUT``
(two pipe descriptors). It lowers its own scheduling priority (``os.nice``), so under CPU load the
forwarding process runs first and analysis waits; its CPU is in the proxy's process group.

Messages are length-prefixed pickles (``frame``), both ways:

    forwarder -> worker   ("config", Settings, factory, index)   first, once
                          ("req", request state)                 once the body went upstream
                          ("resp", flow id, response state)      once the response ended
                          ("stop",)                              at shutdown: drain, then exit
    worker -> forwarder   ("ready", pid)
                          ("done", flow id, model, metric records, access count, access diagnosis)

Every tenant is one worker's (a stable hash), and the worker runs its requests on one ``Lane``
(analysis_queue.py) in the order they came: a request's hooks (once it is its tenant's earliest and
its response ended or ``START_DELAY`` passed), then its response's hooks once the response came
and the request's hooks ran. A chained Responses turn is parked by the engine
analyzer's ``ready`` until the turn it chains to was read, as with threads: this worker owns the
tenant's chain store. The capture is written here (hooks.JsonlSink: one ``O_APPEND`` write per
line), so each tenant's lines are in the order its one worker analysed them.

SIGINT / SIGTERM are ignored: a Ctrl-C reaches the whole process group, and the worker must drain
when the forwarder says so (or exit when its pipe closes, if the forwarder died), not die first.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import signal
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .analysis_queue import Lane, Work
from .config import Settings
from .hooks import (
    Analyzer,
    Capture,
    Flow,
    JsonlSink,
    Timings,
    body_loader,
    call_hooks,
    close_analyzers,
    parse_model,
)
from .metric_records import Record, RecordingMetrics

logger = logging.getLogger("cachewarden.proxy")

HEADER = struct.Struct("<I")
# Below the forwarder (nice 0): analysis yields the CPU to forwarding.
NICENESS = 10
# A request's analysis starts once its response ended, or this long after it went upstream.
START_DELAY = 0.05
# The worker's collector (``tune_gc``): a young collection every this many allocations, not 700.
GC_THRESHOLD = (50_000, 20, 10)
# Builds a worker's analyzers from the settings and the worker's (recording) metrics; it is pickled
# by reference, so it must be a module-level function.
Factory = Callable[[Settings, Any], Sequence[Analyzer]]


def frame(message: object) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def split_frames(buffer: bytearray) -> list[Any]:
    """The complete messages at the front of ``buffer`` (removed from it); a partial one stays."""
    out: list[Any] = []
    start = 0
    while len(buffer) - start >= HEADER.size:
        (size,) = HEADER.unpack_from(buffer, start)
        end = start + HEADER.size + size
        if end > len(buffer):
            break
        out.append(pickle.loads(memoryview(buffer)[start + HEADER.size : end]))
        start = end
    if start:
        del buffer[:start]
    return out


# -- what crosses the pipe of one flow --------------------------------------------------------------


def request_state(flow: Flow) -> tuple[Any, ...]:
    t = flow.timings
    return (
        flow.id,
        flow.route,
        flow.provider,
        flow.upstream,
        flow.method,
        flow.path,
        flow.request_body,
        flow.request_headers,
        flow.key_hash,
        flow.tenant,
        flow.mode,
        flow.model,
        t.received,
        t.received_at,
        t.sent,
    )


def flow_from_state(state: tuple[Any, ...]) -> Flow:
    (fid, route, provider, upstream, method, path, body, headers, key_hash, tenant, mode, model) = state[:12]
    received, received_at, sent = state[12:]
    return Flow(
        id=fid,
        route=route,
        provider=provider,
        upstream=upstream,
        method=method,
        path=path,
        request_body=body,
        request_headers=headers,
        key_hash=key_hash,
        tenant=tenant,
        timings=Timings(received=received, received_at=received_at, sent=sent),
        mode=mode,
        model=model,
    )


# What the response hooks read of the forwarder's metadata (usage_stream / UsageTracker wrote it).
RESPONSE_METADATA = ("response_model", "message_id", "diagnostics", "response_id", "response_output")


def response_state(flow: Flow) -> tuple[Any, ...]:
    t = flow.timings
    meta = {k: flow.metadata[k] for k in RESPONSE_METADATA if k in flow.metadata}
    return (
        flow.status,
        flow.outcome,
        flow.usage,
        flow.usage_raw,
        flow.usage_state,
        flow.error,
        flow.response_ended,
        t.sent,
        t.first_byte,
        t.done,
        meta,
    )


def apply_response_state(flow: Flow, state: tuple[Any, ...]) -> None:
    (flow.status, flow.outcome, flow.usage, flow.usage_raw, flow.usage_state, flow.error) = state[:6]
    flow.response_ended = state[6]
    t = flow.timings
    t.sent, t.first_byte, t.done = state[7:10]
    flow.metadata.update(state[10])
    if flow.model is None and state[10].get("response_model"):
        flow.model = state[10]["response_model"]  # as the forwarder does when the body named none


# -- the worker --------------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Job:
    flow: Flow
    arrived: float = field(default_factory=time.monotonic)
    responded: bool = False  # the response message came
    requested: bool = False  # the request hooks ran
    records: list[Record] = field(default_factory=list)


def _always_ready(flow: Flow) -> bool:
    return True


class Worker:
    """The analyzers of one worker process, on one lane, reporting to ``send``."""

    def __init__(self, settings: Settings, factory: Factory, send: Callable[[object], None]) -> None:
        self.metrics = RecordingMetrics(settings.tenant_labels)
        self.analyzers = list(factory(settings, self.metrics))
        self._load_body = body_loader(self.analyzers)
        self.capture = JsonlSink(settings.capture) if settings.capture else None
        if self.capture is not None:
            self.analyzers.append(Capture(self.capture))
        self.send = send
        self.jobs: dict[str, _Job] = {}
        # Each tenant's requests not analysed yet, in arrival order: only the first may start.
        self.waiting: dict[str, deque[_Job]] = {}
        self.lane = Lane("cachewarden-analysis")

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "req":
            flow = flow_from_state(message[1])
            job = _Job(flow)
            self.jobs[flow.id] = job
            self.waiting.setdefault(flow.tenant, deque()).append(job)
            self.lane.submit(Work(self._request, job, Future(), self._ready(job)))
        elif kind == "resp":
            job_or_none = self.jobs.get(message[1])
            if job_or_none is None:
                return
            job = job_or_none
            apply_response_state(job.flow, message[2])
            job.responded = True
            self.lane.submit(Work(self._response, job, Future(), lambda: job.requested))

    def _ready(self, job: _Job) -> Callable[[], bool]:
        """When a request's analysis may start: it is its tenant's earliest, its response ended or
        ``START_DELAY`` passed, and every analyzer is ready (a chained Responses turn: the turn it
        chains to was read). The delay keeps the analysis off the cores while a fast upstream's
        answer is relayed (a worker woken beside the relay costs the relay its core for a moment);
        a provider's answer takes longer, and the analysis runs during it."""
        flow = job.flow
        queue = self.waiting[flow.tenant]
        checks = [getattr(a, "ready", _always_ready) for a in self.analyzers]

        def ready() -> bool:
            if queue[0] is not job:
                return False
            if not job.responded and time.monotonic() - job.arrived < START_DELAY:
                return False
            return all(check(flow) for check in checks)

        return ready

    def _request(self, job: _Job) -> None:
        flow = job.flow
        try:
            parse_model(flow, self._load_body)
            if flow.analysed:
                call_hooks(self.analyzers, "request", flow, self.metrics)
        except Exception:
            logger.exception("request analysis failed (flow %s); request unaffected", flow.id)
            self.metrics.analysis_errors.labels(
                *self.metrics.labels(flow.provider, flow.model, flow.tenant), "request"
            ).inc()
        finally:
            job.requested = True
            job.records += self.metrics.drain()
            queue = self.waiting[flow.tenant]
            if queue and queue[0] is job:
                queue.popleft()
            else:  # run out of turn (its wait ran out, or at shutdown): out of the line all the same
                queue.remove(job)
            if not queue:
                del self.waiting[flow.tenant]

    def _response(self, job: _Job) -> None:
        flow = job.flow
        try:
            if flow.analysed and flow.timings.sent is not None:
                call_hooks(self.analyzers, "response", flow, self.metrics)
        finally:
            self.jobs.pop(flow.id, None)
            records = job.records + self.metrics.drain()
            meta = flow.metadata
            self.send(
                ("done", flow.id, flow.model, records, meta.get("access_count"), meta.get("access_diagnosis"))
            )

    def close(self) -> None:
        """Runs what is queued and parked, then closes the analyzers and the capture."""
        self.lane.close()
        close_analyzers(self.analyzers)
        if self.capture is not None:
            self.capture.close()


class _Pipe:
    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self.buffer = bytearray()
        self.pending: list[Any] = []
        self.lock = threading.Lock()

    def receive(self) -> Any | None:
        """The next message, or None once the forwarder closed its end."""
        while not self.pending:
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk
            self.pending = split_frames(self.buffer)
        return self.pending.pop(0)

    def send(self, message: object) -> None:
        data = memoryview(frame(message))
        with self.lock:
            while data:
                data = data[os.write(self.write_fd, data) :]


def tune_gc() -> None:
    """Fewer collections in a worker, once its analyzers are built. Its heap is long-lived (the
    index's nodes, the conversations' runs, the tokenizer's and linter's tables), and an analysis
    leaves no cyclic garbage, the blocks the index evicts included (test_worker_collector.py):
    with CPython's defaults each request's survivors (its new index nodes, its token stream) were
    traversed by a young collection every 700 allocations and again by every older one, ~0.2 ms
    of a ~1.4 ms analysis that never freed anything. The start-up heap is frozen (never traversed
    again; it lives as long as the process), and a young collection runs every
    ``GC_THRESHOLD[0]`` allocations: the rare cycle (an exception's traceback) is freed a little
    later, nothing else changes."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def main(argv: Sequence[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pipe = _Pipe(int(argv[0]), int(argv[1]))
    config = pipe.receive()
    if config is None or config[0] != "config":
        return 2
    settings: Settings = config[1]
    factory: Factory = config[2]
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO),
        format=f"%(levelname)s:     analysis worker {config[3]} (pid {os.getpid()}): %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        os.nice(NICENESS)
    except OSError:  # not permitted here: analysis still runs, at the forwarder's priority
        logger.warning("could not lower the analysis worker's priority")
    worker = Worker(settings, factory, pipe.send)
    tune_gc()
    logger.debug("ready: %s", ", ".join(type(a).__name__ for a in worker.analyzers))
    pipe.send(("ready", os.getpid()))
    try:
        while (message := pipe.receive()) is not None and message[0] != "stop":
            worker.handle(message)
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
