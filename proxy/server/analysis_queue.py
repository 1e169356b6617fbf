"""Where the proxy's analysis runs: a few dedicated threads (lanes) with a bounded backlog, in order.

Analysis costs milliseconds of CPU per request, and in CPython every analysing thread competes
with the event loop for the GIL. One thread per request (anyio's default pool of 40) lets a burst
of analyses starve the forwarding; a small fixed set keeps the competition to ``workers`` threads,
and a bounded backlog means that when analysis falls behind, new requests are forwarded
unanalysed (and counted) instead of piling up memory and latency.

Order. Each piece of work names its lane (the proxy uses the tenant): one lane is one thread that
runs its work in submission order, so a conversation's request N is in the index before N+1 is
looked up, and its capture lines are written in the order the requests came. Lanes are picked by a
stable hash of the name, so one tenant's work never runs concurrently with itself.

Waiting without blocking. Work may come with ``ready``: a Responses turn chained to an earlier one
(``previous_response_id``) cannot be analysed before the earlier turn's response was read, and
that response's work may sit behind it in the same lane. Work that is not ready is parked, the
lane goes on with what follows, and parked work runs as soon as it is ready (checked after every
piece of work, and every few milliseconds when idle) or when its wait runs out, or at shutdown.

An analysis worker process (analysis_worker.py) runs its share of the tenants on one ``Lane``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

# How long parked work waits for ``ready`` at most, and how often an idle lane looks again.
PARK_SECONDS = 2.0
_IDLE_POLL_SECONDS = 0.01


@dataclass(slots=True)
class Work:
    fn: Callable[[Any], object]
    arg: Any
    future: Future[object]
    ready: Callable[[], bool] | None
    deadline: float = field(default=0.0)


class Lane:
    """One thread running its work in submission order; work that is not ready waits aside."""

    def __init__(self, name: str) -> None:
        self._queue: deque[Work] = deque()
        self._parked: list[Work] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, work: Work) -> None:
        with self._cond:
            if self._closed:
                # As an executor after shutdown: nothing would ever run it, so the caller is told.
                raise RuntimeError("the analysis queue is shut down")
            self._queue.append(work)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _next(self) -> Work | None:
        """Parked work that may run now first (it came earlier), then the queue's head. Under the lock."""
        now = time.monotonic()
        for i, work in enumerate(self._parked):
            if self._closed or now >= work.deadline or _is_ready(work):
                return self._parked.pop(i)
        while self._queue:
            work = self._queue.popleft()
            if self._closed or _is_ready(work):
                return work
            work.deadline = now + PARK_SECONDS
            self._parked.append(work)
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                work = self._next()
                while work is None:
                    if self._closed and not self._parked:
                        return
                    self._cond.wait(_IDLE_POLL_SECONDS if self._parked else None)
                    work = self._next()
            if not work.future.set_running_or_notify_cancel():
                continue
            try:
                work.future.set_result(work.fn(work.arg))
            except BaseException as exc:  # delivered to the awaiting caller, as an executor would
                work.future.set_exception(exc)


def lane_of(name: str, lanes: int) -> int:
    """The lane (or worker process) of a tenant: crc32, not hash(), whose str hashes are salted per
    process, and a lane must stay a lane."""
    return zlib.crc32(name.encode("utf-8", "surrogatepass")) % lanes


def _is_ready(work: Work) -> bool:
    if work.ready is None:
        return True
    try:
        return work.ready()
    except Exception:  # a broken readiness check must not park work forever: run it
        return True


class AnalysisQueue:
    """Runs blocking analysis functions on ``workers`` lanes; at most ``backlog`` droppable ones wait."""

    def __init__(self, workers: int = 2, backlog: int = 256) -> None:
        self._lanes = [Lane(f"cachewarden-analysis-{i}") for i in range(max(1, workers))]
        self._backlog = backlog
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._pending

    def _done(self, _: Future[object]) -> None:
        with self._lock:
            self._pending -= 1

    def _lane(self, name: str) -> Lane:
        return self._lanes[lane_of(name, len(self._lanes))]

    async def run(
        self,
        fn: Callable[[T], object],
        arg: T,
        *,
        droppable: bool,
        lane: str = "",
        ready: Callable[[], bool] | None = None,
    ) -> bool:
        """Run ``fn(arg)`` on the lane named ``lane``, after the work submitted there before it, and
        wait for it; False if dropped for the backlog. ``ready``: see the module doc.

        The count of waiting work drops when the work ends, not when the caller stops waiting, so a
        cancelled caller cannot make the backlog look shorter than it is.
        """
        with self._lock:
            if droppable and self._pending >= self._backlog:
                return False
            self._pending += 1
        future: Future[object] = Future()
        future.add_done_callback(self._done)
        try:
            self._lane(lane).submit(Work(fn, arg, future, ready))
        except RuntimeError:
            future.cancel()  # counts it off the backlog
            raise
        await asyncio.wrap_future(future)
        return True

    def shutdown(self) -> None:
        """Let queued and parked analysis finish (bounded by the backlog), then stop the lanes."""
        for lane in self._lanes:
            lane.close()
