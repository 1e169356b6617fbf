"""Analysis in worker processes (observe mode's default): the forwarder's side of analysis_worker.py.

In observe mode the forwarding process then does no tokenizing, attribution, lint rules or JSON
parsing of a body: once a request went upstream it writes the body bytes (with the flow's few
fields) to the pipe of the tenant's worker, and once the response ended the response's usage,
ids and output items, which the relay read anyway. The worker's reply carries the request's
model, its metric updates (metric_records.py) and the access log's count and diagnosis; only then
does the forwarder count the request, the reported usage and write the access log line, so every
metric and log line looks as with threads.

Never delaying a request:
- writes to a pipe never block (``_PipeWriter``): a busy worker makes the frames waiting in the
  forwarder grow, never the event loop wait; at most ``backlog`` requests are in the workers (and
  ``MAX_BUFFERED_BYTES`` waiting for one pipe): beyond that, or while a worker restarts, a request
  is forwarded unanalysed and counted in ``analysis_dropped_total`` (its usage is still counted);
- a worker that dies (its pipe closes) is started again and counted in
  ``analysis_worker_restarts_total``; the analysis of its requests in flight is lost and counted
  as dropped (their requests and usage are counted all the same);
- at shutdown each worker is asked to finish what it holds and exit; after ``drain_seconds`` the
  rest are killed and what they held counted as dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .analysis_queue import lane_of
from .analysis_worker import Factory, frame, request_state, response_state, split_frames
from .config import Settings
from .hooks import Flow
from .metric_records import Applier
from .metrics import Metrics

logger = logging.getLogger("cachewarden.proxy")

PIPE_BYTES = 2**20
# Bound on the bytes waiting in one worker's pipe buffer (bodies of queued requests).
MAX_BUFFERED_BYTES = 256 * 2**20
_MODULE = "cachewarden.proxy.server.analysis_worker"
# A worker imports the engine and loads its tokenizer before it is ready.
START_SECONDS = 120.0
# A worker that dies this soon after starting waits before the next start (doubling, up to 5 s).
_QUICK_CRASH_SECONDS = 5.0

# The reply of one analysed request: (model, metric records, access count, access diagnosis).
Done = tuple[Any, ...]
Complete = Callable[[Flow, "Done | None"], None]


@dataclass(eq=False)
class _Job:
    flow: Flow
    worker: _Worker
    responded: bool = False
    lost: bool = False  # the worker died before answering


@dataclass(eq=False)
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    writer: _PipeWriter | None = None
    jobs: dict[str, _Job] = field(default_factory=dict)
    ready: asyncio.Future[int] | None = None
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    started: float = field(default_factory=time.monotonic)
    alive: bool = False


class _PipeWriter:
    """Writes frames to a worker's pipe without ever blocking the event loop: what the pipe does not
    take waits in a deque of memoryviews, written out when the pipe is writable again. (asyncio's
    pipe transport keeps one bytearray and deletes each written piece from its front: with
    megabytes of bodies waiting, every write of the pipe's size moves all the rest.)"""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        os.set_blocking(fd, False)
        self.loop, self.fd = loop, fd
        self.frames: deque[memoryview] = deque()
        self.buffered = 0
        self.closed = False
        self._waiting = False

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        view = memoryview(data)
        if not self.frames:
            written = self._write(view)
            if written is None or written == len(view):
                return
            view = view[written:]
        self.frames.append(view)
        self.buffered += len(view)
        if not self._waiting:
            self.loop.add_writer(self.fd, self._drain)
            self._waiting = True

    def _write(self, view: memoryview) -> int | None:
        """Bytes written (0 if the pipe is full); None once the pipe broke (the worker is gone)."""
        try:
            return os.write(self.fd, view)
        except BlockingIOError:
            return 0
        except OSError:
            self.close()
            return None

    def _drain(self) -> None:
        while self.frames:
            head = self.frames[0]
            written = self._write(head)
            if written is None:
                return
            self.buffered -= written
            if written < len(head):
                self.frames[0] = head[written:]
                return
            self.frames.popleft()
        self.loop.remove_writer(self.fd)
        self._waiting = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._waiting:
            self.loop.remove_writer(self.fd)
            self._waiting = False
        self.frames.clear()
        self.buffered = 0
        os.close(self.fd)


class _Reader(asyncio.Protocol):
    def __init__(self, pool: AnalysisPool, worker: _Worker) -> None:
        self.pool, self.worker = pool, worker
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        for message in split_frames(self.buffer):
            self.pool._message(self.worker, message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool._lost(self.worker)


def _widen(fd: int) -> None:
    """A pipe of ``PIPE_BYTES`` instead of 64 KiB: a body (often 40 KB+) is written in one go and
    a few dozen wait in the kernel, rather than in the transport's buffer, which asyncio writes
    out in pieces on the event loop while the worker (at a lower priority) is busy."""
    # Above /proc/sys/fs/pipe-max-size, or not Linux: the default size, and more loop work.
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


class AnalysisPool:
    """``workers`` analysis processes; each tenant's requests go to one of them, in order."""

    def __init__(
        self,
        settings: Settings,
        factory: Factory,
        metrics: Metrics,
        complete: Complete,
        *,
        drain_seconds: float | None = None,
    ) -> None:
        self.settings = settings
        self.factory = factory
        self.metrics = metrics
        self.applier = Applier(metrics)
        self.complete = complete
        self.backlog = settings.analysis_backlog
        self.drain_seconds = settings.graceful_timeout if drain_seconds is None else drain_seconds
        self.workers: list[_Worker | None] = [None] * max(1, settings.analysis_workers)
        self.jobs: dict[str, _Job] = {}
        self._stopping = False
        self._restarts: set[asyncio.Task[None]] = set()
        self._quick_crashes = [0] * len(self.workers)

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def pending(self) -> int:
        return len(self.jobs)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers if w is not None and w.alive]

    # -- processes -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts every worker and waits until each is ready (raises if one cannot start)."""
        started = await asyncio.gather(
            *(self._spawn(i) for i in range(len(self.workers))), return_exceptions=True
        )
        for worker in started:
            if isinstance(worker, _Worker):
                self.workers[worker.index] = worker  # stop() ends it if another one failed
        for failed in started:
            if isinstance(failed, BaseException):
                raise failed

    async def _spawn(self, index: int) -> _Worker:
        loop = asyncio.get_running_loop()
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        for fd in (to_worker_w, from_worker_w):
            _widen(fd)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", _MODULE, str(to_worker_r), str(from_worker_w)],
                pass_fds=(to_worker_r, from_worker_w),
                stdin=subprocess.DEVNULL,
            )
        finally:
            os.close(to_worker_r)
            os.close(from_worker_w)
        worker = _Worker(index, proc, ready=loop.create_future())
        writer = _PipeWriter(loop, to_worker_w)
        worker.writer = writer
        await loop.connect_read_pipe(
            lambda: _Reader(self, worker), os.fdopen(from_worker_r, "rb", buffering=0)
        )
        writer.write(frame(("config", self.settings, self.factory, index)))
        assert worker.ready is not None
        try:
            await asyncio.wait_for(asyncio.shield(worker.ready), START_SECONDS)
        except (TimeoutError, RuntimeError) as exc:
            proc.kill()
            await asyncio.to_thread(proc.wait)
            raise RuntimeError(f"analysis worker {index} did not start: {exc}") from None
        except BaseException:  # cancelled (shutdown during a restart): no process left behind
            proc.kill()
            raise
        worker.alive = True
        return worker

    def _message(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "done":
            self.applier.apply(worker.index, message[3])
            job = self.jobs.pop(message[1], None)
            if job is not None:
                job.worker.jobs.pop(message[1], None)
                self._complete(job.flow, message[2:])
        elif kind == "ready" and worker.ready is not None and not worker.ready.done():
            worker.ready.set_result(message[1])

    def _lost(self, worker: _Worker) -> None:
        """The worker's pipe closed: it exited (asked to, at shutdown) or died."""
        was_alive, worker.alive = worker.alive, False
        if worker.ready is not None and not worker.ready.done():
            worker.ready.set_exception(RuntimeError(f"exited with {worker.proc.poll()}"))
        if worker.writer is not None:
            worker.writer.close()
        for fid, job in list(worker.jobs.items()):
            job.lost = True
            if job.responded:
                self._finish_lost(fid, job)
        worker.jobs.clear()
        self.applier.forget(worker.index)
        worker.closed.set()
        if was_alive and not self.stopping:
            logger.error("analysis worker %d (pid %d) died; starting another", worker.index, worker.proc.pid)
            self.metrics.analysis_worker_restarts.inc()
            task = asyncio.get_running_loop().create_task(self._restart(worker))
            self._restarts.add(task)
            task.add_done_callback(self._restarts.discard)

    async def _restart(self, dead: _Worker) -> None:
        await asyncio.to_thread(dead.proc.wait)
        index = dead.index
        if time.monotonic() - dead.started < _QUICK_CRASH_SECONDS:
            self._quick_crashes[index] += 1
            await asyncio.sleep(min(5.0, 0.1 * 2 ** self._quick_crashes[index]))
        else:
            self._quick_crashes[index] = 0
        while not self.stopping:
            try:
                worker = await self._spawn(index)
            except (OSError, RuntimeError):
                logger.exception("analysis worker %d could not be started again; retrying", index)
                await asyncio.sleep(5.0)
                continue
            self.workers[index] = worker  # stop() cancels this task while the spawn is under way
            return

    # -- requests --------------------------------------------------------------------------------

    def submit(self, flow: Flow) -> bool:
        """Hands a request to its tenant's worker; False (drop it) when the workers are full or down."""
        worker = self.workers[lane_of(flow.tenant, len(self.workers))]
        if worker is None or not worker.alive or worker.writer is None or worker.writer.closed:
            return False
        if self.stopping:
            return False
        if len(self.jobs) >= self.backlog or worker.writer.buffered > MAX_BUFFERED_BYTES:
            return False
        job = _Job(flow, worker)
        self.jobs[flow.id] = job
        worker.jobs[flow.id] = job
        worker.writer.write(frame(("req", request_state(flow))))
        return True

    def respond(self, flow: Flow) -> bool:
        """The response ended: its analysis goes on in the worker (False: the request was not
        submitted, the caller completes the flow itself)."""
        job = self.jobs.get(flow.id)
        if job is None:
            return False
        job.responded = True
        if job.lost or job.worker.writer is None or job.worker.writer.closed:
            self._finish_lost(flow.id, job)
        else:
            job.worker.writer.write(frame(("resp", flow.id, response_state(flow))))
        return True

    def _finish_lost(self, fid: str, job: _Job) -> None:
        self.jobs.pop(fid, None)
        self._complete(job.flow, None)

    def _complete(self, flow: Flow, done: Done | None) -> None:
        try:
            self.complete(flow, done)
        except Exception:  # raised into the pipe's protocol it would close the pipe: log it only
            logger.exception("counting flow %s failed", flow.id)

    # -- shutdown --------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Asks every worker to finish what it holds and exit; kills those still busy after
        ``drain_seconds`` (what they held is counted as dropped)."""
        self._stopping = True
        for task in list(self._restarts):
            task.cancel()
        workers = [w for w in self.workers if w is not None]
        for worker in workers:
            if worker.alive and worker.writer is not None:
                worker.writer.write(frame(("stop",)))
        waits = [asyncio.ensure_future(w.closed.wait()) for w in workers]
        if waits:
            _, late = await asyncio.wait(waits, timeout=self.drain_seconds)
            for wait in late:
                wait.cancel()
        for worker in workers:
            if not worker.closed.is_set():
                logger.warning(
                    "analysis worker %d still busy after %.0f s: killed", worker.index, self.drain_seconds
                )
                worker.proc.kill()
        for worker in workers:
            await worker.closed.wait()
            await asyncio.to_thread(worker.proc.wait)
        for fid, job in list(self.jobs.items()):  # never answered (a response that never ended)
            self._finish_lost(fid, job)
