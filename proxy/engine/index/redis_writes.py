"""Writes of ``RedisIndex`` sent beside the analysis instead of in its way (``write_behind=True``).

An insert or a mark queues its script calls and returns; one daemon thread sends the queue at
once, in one pipeline, while the analysis goes on (the socket wait releases the GIL). A read of
the same index first takes whatever is still queued into its own round trip (and waits for a
send in flight), so an index always reads its own writes. A failed send is not lost silently:
the next call of that index raises it, where ``ResilientIndex`` counts the outage as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["WriteBehind"]


class WriteBehind:
    """A queue of calls drained by one sender thread (started on first use)."""

    def __init__(self, send: Callable[[list[Any]], object]) -> None:
        self._send = send
        self._queue: list[Any] = []
        self._cv = threading.Condition()
        self._inflight = False
        self._error: Exception | None = None
        self._thread: threading.Thread | None = None

    def submit(self, calls: list[Any]) -> None:
        with self._cv:
            self._raise_pending_error()
            self._queue.extend(calls)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="cachewarden-redis-writes", daemon=True
                )
                self._thread.start()
            self._cv.notify_all()

    def take(self) -> list[Any]:
        """The calls not sent yet (the caller sends them before its read), after any send in flight."""
        with self._cv:
            while self._inflight:
                self._cv.wait()
            self._raise_pending_error()
            calls, self._queue = self._queue, []
            return calls

    def _raise_pending_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                calls, self._queue = self._queue, []
                self._inflight = True
            try:
                self._send(calls)
            except Exception as exc:  # raised by the index's next call
                with self._cv:
                    self._error = exc
            finally:
                with self._cv:
                    self._inflight = False
                    self._cv.notify_all()
