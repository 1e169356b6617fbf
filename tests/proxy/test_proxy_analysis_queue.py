"""The analysis queue: a few threads, a bounded backlog, dropped work counted, never the client's loss."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from cachewarden.proxy.server.analysis_queue import AnalysisQueue
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.hooks import Flow
from cachewarden.proxy.server.metrics import Metrics


def test_backlog_drops_droppable_work_only() -> None:
    release = threading.Event()
    ran: list[int] = []

    def slow(n: int) -> None:
        release.wait(5)
        ran.append(n)

    async def main() -> list[bool]:
        queue = AnalysisQueue(workers=1, backlog=2)
        first = asyncio.ensure_future(queue.run(slow, 1, droppable=True))
        second = asyncio.ensure_future(queue.run(slow, 2, droppable=True))
        await asyncio.sleep(0.05)
        assert queue.pending == 2
        dropped = await queue.run(slow, 3, droppable=True)
        kept = asyncio.ensure_future(queue.run(slow, 4, droppable=False))
        release.set()
        results = [await first, await second, dropped, await kept]
        queue.shutdown()
        assert queue.pending == 0
        return results

    assert asyncio.run(main()) == [True, True, False, True]
    assert sorted(ran) == [1, 2, 4]


class _Blocking:
    """An analyzer whose request hook blocks until released: the backlog fills up."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.seen = 0

    def request(self, flow: Flow) -> None:
        self.release.wait(10)
        self.seen += 1

    def response(self, flow: Flow) -> None:
        return None


def test_full_backlog_forwards_unanalysed_and_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "x", "choices": [], "usage": {"prompt_tokens": 1}})

    metrics = Metrics()
    blocking = _Blocking()
    settings = Settings(openai_upstream="http://upstream.test", analysis_workers=1, analysis_backlog=1)
    app = create_app(settings, analyzers=[blocking], metrics=metrics, transport=httpx.MockTransport(upstream))
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}

    async def main() -> list[int]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                calls = [client.post("/v1/chat/completions", json=body) for _ in range(4)]
                tasks = [asyncio.ensure_future(c) for c in calls]
                await asyncio.sleep(0.3)
                blocking.release.set()
                return [(await t).status_code for t in tasks]

    assert asyncio.run(main()) == [200, 200, 200, 200]
    exposition = metrics.exposition().decode()
    dropped = [
        line for line in exposition.splitlines() if line.startswith("cachewarden_analysis_dropped_total{")
    ]
    assert dropped and sum(float(line.rsplit(" ", 1)[1]) for line in dropped) >= 2
    assert blocking.seen <= 2


def test_one_lane_runs_in_submission_order_beside_the_others() -> None:
    """Work of one lane never overtakes earlier work of that lane, whatever the other lanes do."""
    ran: list[tuple[str, int]] = []
    lock = threading.Lock()

    def work(item: tuple[str, int]) -> None:
        if item[1] % 3 == 0:
            threading.Event().wait(0.002)  # uneven durations: a pool would reorder these
        with lock:
            ran.append(item)

    async def main() -> None:
        queue = AnalysisQueue(workers=4, backlog=1000)
        calls = [queue.run(work, (t, n), droppable=False, lane=t) for n in range(30) for t in "abcdef"]
        await asyncio.gather(*calls)
        queue.shutdown()

    asyncio.run(main())
    for tenant in "abcdef":
        assert [n for t, n in ran if t == tenant] == list(range(30))


def test_work_that_is_not_ready_waits_aside_without_holding_its_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = threading.Event()
    ran: list[str] = []

    async def main() -> None:
        queue = AnalysisQueue(workers=1, backlog=10)
        # The chained turn comes first and cannot run before the response behind it stored its turn.
        chained = asyncio.ensure_future(
            queue.run(ran.append, "chained", droppable=False, lane="t", ready=stored.is_set)
        )
        await asyncio.sleep(0.05)
        assert ran == []

        def response(_: object) -> None:
            ran.append("response")
            stored.set()

        await queue.run(response, None, droppable=False, lane="t")
        await chained
        queue.shutdown()

    asyncio.run(main())
    assert ran == ["response", "chained"]


def test_parked_work_runs_when_its_wait_runs_out_and_at_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    from cachewarden.proxy.server import analysis_queue

    monkeypatch.setattr(analysis_queue, "PARK_SECONDS", 0.1)
    ran: list[str] = []

    async def main() -> None:
        queue = AnalysisQueue(workers=1, backlog=10)
        await queue.run(ran.append, "timed out", droppable=False, lane="t", ready=lambda: False)
        analysis_queue.PARK_SECONDS = 60.0
        late = asyncio.ensure_future(
            queue.run(ran.append, "at shutdown", droppable=False, ready=lambda: False)
        )
        await asyncio.sleep(0.05)
        assert ran == ["timed out"]
        await asyncio.to_thread(queue.shutdown)
        await late

    asyncio.run(main())
    assert ran == ["timed out", "at shutdown"]


def test_work_after_shutdown_is_refused_not_left_waiting() -> None:
    async def main() -> None:
        queue = AnalysisQueue(workers=1, backlog=10)
        queue.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            await asyncio.wait_for(queue.run(print, "late", droppable=False), timeout=5)
        assert queue.pending == 0

    asyncio.run(main())
