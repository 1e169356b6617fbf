"""Where the proxy's analysis runs: a few dedicated threads with a bounded backlog.

Analysis costs milliseconds of CPU per request, and in CPython every analysing thread competes
with the event loop for the GIL. One thread per request (anyio's default pool of 40) lets a burst
of analyses starve the forwarding; a small fixed pool keeps the competition to ``workers`` threads,
and a bounded backlog means that when analysis falls behind, new requests are forwarded
unanalysed (and counted) instead of piling up memory and latency.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class AnalysisQueue:
    """Runs blocking analysis functions on ``workers`` threads; at most ``backlog`` droppable ones wait."""

    def __init__(self, workers: int = 2, backlog: int = 256) -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cachewarden-analysis")
        self._backlog = backlog
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._pending

    def _done(self, _: Future[object]) -> None:
        with self._lock:
            self._pending -= 1

    async def run(self, fn: Callable[[T], object], arg: T, *, droppable: bool) -> bool:
        """Run ``fn(arg)`` on an analysis thread and wait for it; False if dropped for the backlog.

        The count of waiting work drops when the work ends, not when the caller stops waiting, so a
        cancelled caller cannot make the backlog look shorter than it is.
        """
        with self._lock:
            if droppable and self._pending >= self._backlog:
                return False
            self._pending += 1
        future = self._executor.submit(fn, arg)
        future.add_done_callback(self._done)
        await asyncio.wrap_future(future)
        return True

    def shutdown(self) -> None:
        """Let queued analysis finish (bounded by the backlog), then stop the threads."""
        self._executor.shutdown(wait=True)
