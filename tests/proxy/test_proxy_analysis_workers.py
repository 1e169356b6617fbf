"""Analysis in worker processes (``--analysis-processes``): the real workers, the real emulator.

A worker is made slow or absent with signals (SIGSTOP / SIGCONT / SIGKILL to its process), not
with a fake: what is tested is what the forwarder does when its analysis cannot keep up or dies.
The ordering of each tenant's analysis across several workers, with the official SDKs and
chained Responses turns, is the client suite's (tests/clients, 4 worker processes).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.engine import adapters
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.reading import ConversationReader
from cachewarden.proxy.engine.usage import Usage
from cachewarden.proxy.server import analysis as analysis_module
from cachewarden.proxy.server import hooks
from cachewarden.proxy.server.analysis_workers import AnalysisPool
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.live_rules import LiveRules
from cachewarden.proxy.server.metric_records import Applier, RecordingMetrics
from cachewarden.proxy.server.metrics import Metrics
from cachewarden.proxy.testing import Served, command, free_port, metric, metric_sum, scrape, serve, serving
from starlette.applications import Starlette

POLICY = "\n".join(f"Rule {i}: requests of kind {i} go to desk {i % 7} within {i} hours." for i in range(150))


def body(turn: int) -> dict[str, Any]:
    messages: list[dict[str, str]] = [{"role": "system", "content": POLICY}]
    for i in range(turn):
        messages += [
            {"role": "user", "content": f"Question {i}?"},
            {"role": "assistant", "content": f"A{i}."},
        ]
    messages.append({"role": "user", "content": f"Question {turn}?"})
    return {"model": "gpt-4.1", "messages": messages}


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    with serving(create_emulator(), "emulator", timeout=15) as served:
        yield served.url


@contextmanager
def proxy(emulator: str, **settings: Any) -> Iterator[tuple[Served, Starlette]]:
    app = build(
        Settings(openai_upstream=emulator, anthropic_upstream=emulator, analysis_processes=True, **settings)
    )
    served = serve(app, "proxy", timeout=60)
    try:
        yield served, app
    finally:
        served.stop(30)


def pool(app: Starlette) -> AnalysisPool:
    found = app.state.proxy.pool
    assert isinstance(found, AnalysisPool)
    return found


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def converse(url: str, key: str, turns: range) -> list[dict[str, Any]]:
    """Sequential requests of one conversation; every answer must be a 200 with usage."""
    usages = []
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=20) as client:
        for turn in turns:
            response = client.post("/v1/chat/completions", json=body(turn))
            assert response.status_code == 200, response.text
            usages.append(response.json()["usage"])
    return usages


def reported_tokens(url: str) -> float:
    return metric(url, "cachewarden_input_tokens_total", source="reported")


def billed(usages: list[dict[str, Any]]) -> int:
    """Input tokens as input_tokens_total{source="reported"} sums them (cached + uncached + writes)."""
    return sum(u["prompt_tokens"] for u in usages)


def test_analysis_runs_in_worker_processes_at_lower_priority(emulator: str, tmp_path: Path) -> None:
    capture, access = tmp_path / "capture.jsonl", tmp_path / "access.jsonl"
    with proxy(emulator, analysis_workers=2, capture=str(capture), access_log=str(access)) as (served, app):
        workers = pool(app).pids()
        assert len(workers) == 2 and os.getpid() not in workers
        assert all(
            os.getpriority(os.PRIO_PROCESS, pid) > os.getpriority(os.PRIO_PROCESS, 0) for pid in workers
        )
        assert metric(served.url, "cachewarden_analysis_worker_restarts_total") == 0  # exported at 0
        usages = converse(served.url, "sk-workers-basic", range(4))
        wait_for(lambda: metric(served.url, "cachewarden_requests_total") == 4, "requests counted")
        samples = scrape(served.url)
        assert metric_sum(samples, "cachewarden_prediction_error_tokens_count") == 4
        assert metric_sum(samples, "cachewarden_input_tokens_total", source="reported") == billed(usages)
        predicted = metric_sum(samples, "cachewarden_input_tokens_total", source="predicted", kind="cached")
        assert predicted == sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages) > 0
        assert metric_sum(samples, "cachewarden_requests_total", model="gpt-4.1", status="200") == 4
        assert metric_sum(samples, "cachewarden_analysis_errors_total") == 0
    # The access log keeps the worker's count; the capture is in request order.
    lines = [json.loads(line) for line in access.read_text().splitlines()]
    assert [line["count"]["reported"] for line in lines] == [u["prompt_tokens"] for u in usages]
    records = [json.loads(line) for line in capture.read_text().splitlines()]
    assert [len(r["request"]["messages"]) for r in records] == [2 + 2 * t for t in range(4)]


def test_the_forwarding_process_never_reads_a_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """Observe mode with workers: tokenizing, attribution, lint rules and body parsing break in this
    (the forwarding) process, and the analysis is still complete: it runs in the workers. (The
    emulator, which tokenizes too, runs in a process of its own here.)"""
    calls: list[str] = []

    def broken(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise RuntimeError(f"{name} ran in the forwarding process")

        return call

    for owner, name in (
        (PromptCounter, "tokenize"),
        (analysis_module, "attribute"),
        (LiveRules, "findings"),
        (hooks, "load_body"),
        (adapters, "load_body"),
        (ConversationReader, "load"),
        (ConversationReader, "parse"),
    ):
        monkeypatch.setattr(owner, name, broken(name))
    port = free_port()
    with command(["emulate", "--port", str(port)], port) as (emulator, _), proxy(emulator) as (served, _):
        usages = converse(served.url, "sk-workers-no-parse", range(3))
        wait_for(lambda: metric(served.url, "cachewarden_requests_total") == 3, "requests counted")
        assert metric(served.url, "cachewarden_prediction_error_tokens_count") == 3
        assert metric(served.url, "cachewarden_input_tokens_total", source="predicted") == billed(usages)
        assert metric(served.url, "cachewarden_analysis_errors_total") == 0
    assert calls == []


def test_a_killed_worker_is_restarted_and_counted(emulator: str) -> None:
    with proxy(emulator, analysis_workers=2) as (served, app):
        first = converse(served.url, "sk-workers-kill", range(3))
        wait_for(lambda: metric(served.url, "cachewarden_requests_total") == 3, "requests counted")
        before = pool(app).pids()
        os.kill(before[0], signal.SIGKILL)
        wait_for(lambda: metric(served.url, "cachewarden_analysis_worker_restarts_total") == 1, "restart")
        wait_for(lambda: len(pool(app).pids()) == 2, "replacement ready", timeout=60)
        assert before[0] not in pool(app).pids() and before[1] in pool(app).pids()
        later = converse(served.url, "sk-workers-kill", range(3, 6))
        wait_for(lambda: metric(served.url, "cachewarden_requests_total") == 6, "requests counted")
        assert metric(served.url, "cachewarden_prediction_error_tokens_count") == 6  # all analysed
        assert reported_tokens(served.url) == billed(first + later)
        assert metric(served.url, "cachewarden_analysis_worker_restarts_total") == 1
        assert metric(served.url, "cachewarden_analysis_dropped_total") == 0


def test_a_full_queue_drops_analysis_never_a_request_and_counts_usage(emulator: str) -> None:
    with proxy(emulator, analysis_workers=1, analysis_backlog=2) as (served, app):
        (worker,) = pool(app).pids()
        os.kill(worker, signal.SIGSTOP)  # the worker takes nothing more: its queue fills
        try:
            start = time.monotonic()
            usages = converse(served.url, "sk-workers-full", range(5))
            assert time.monotonic() - start < 10  # the answers never waited for the stopped worker
            # Two requests wait in the stopped worker; three were forwarded unanalysed: counted at once,
            # their reported usage included.
            wait_for(
                lambda: metric(served.url, "cachewarden_requests_total") == 3, "dropped requests counted"
            )
            assert metric(served.url, "cachewarden_analysis_dropped_total") == 3
            assert reported_tokens(served.url) == billed(usages[2:])
            assert metric(served.url, "cachewarden_prediction_error_tokens_count") == 0
        finally:
            os.kill(worker, signal.SIGCONT)
        wait_for(lambda: metric(served.url, "cachewarden_requests_total") == 5, "queued analysis done")
        assert metric(served.url, "cachewarden_prediction_error_tokens_count") == 2
        assert reported_tokens(served.url) == billed(usages)
        assert metric(served.url, "cachewarden_analysis_dropped_total") == 3


def test_shutdown_drains_the_workers(emulator: str, tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    with proxy(emulator, analysis_workers=2, capture=str(capture)) as (served, app):
        converse(served.url, "sk-workers-drain-a", range(6))
        converse(served.url, "sk-workers-drain-b", range(6))
        metrics: Metrics = app.state.metrics
    # Stopped right after the last answer: what the workers held was analysed before the exit.
    exposition = metrics.exposition().decode()
    assert _sum(exposition, "cachewarden_requests_total") == 12
    assert _sum(exposition, "cachewarden_prediction_error_tokens_count") == 12
    assert len(capture.read_text().splitlines()) == 12


def test_shutdown_gives_up_on_a_stuck_worker_within_its_bound(emulator: str) -> None:
    with proxy(emulator, analysis_workers=1, graceful_timeout=1.0) as (served, app):
        (worker,) = pool(app).pids()
        os.kill(worker, signal.SIGSTOP)
        usages = converse(served.url, "sk-workers-stuck", range(3))
        metrics: Metrics = app.state.metrics
        start = time.monotonic()
        served.stop(30)
        took = time.monotonic() - start
    assert not served.alive
    # The drain bound (1 s), plus the kill and uvicorn's own stop; never the 30 s of the join.
    assert took < 10, took
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)
    exposition = metrics.exposition().decode()
    assert _sum(exposition, "cachewarden_requests_total") == 3  # counted without their analysis
    assert _sum(exposition, "cachewarden_analysis_dropped_total") == 3
    assert _reported(exposition) == billed(usages)


def _sum(exposition: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines() if line.startswith(prefix))


def _reported(exposition: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.startswith("cachewarden_input_tokens_total{") and 'source="reported"' in line
    )


def test_worker_metric_records_keep_the_registry_contract() -> None:
    """Records made in two workers land on the labels ``Metrics`` itself would use: one model bound
    for all workers, tenants allow-listed, gauges summed over workers and dropped with a worker."""
    metrics = Metrics(max_models=1, tenant_labels=("team-a",))
    applier = Applier(metrics)
    one, two = RecordingMetrics(("team-a",)), RecordingMetrics(("team-a",))
    one.findings.labels(*one.labels("openai-chat", "gpt-4.1", "team-a"), "CW101", "clock").inc()
    one.findings.labels(*one.labels("openai-chat", "gpt-4.1", "team-a"), "CW101", "clock").inc()
    two.record_usage("anthropic", "claude-sonnet-5", _usage(5), "predicted", "key:abc")
    one.index_entries.labels(*one.labels("openai-chat", "gpt-4.1", "team-a")).set(3)
    two.index_entries.labels(*two.labels("openai-chat", "gpt-4.1", "team-a")).set(4)
    two.index_backend_errors.labels("lookup").inc()
    applier.apply(0, one.drain())
    applier.apply(1, two.drain())
    assert one.drain() == []
    lookups = {"stage": "lookup"}
    assert metrics.registry.get_sample_value("cachewarden_index_backend_errors_total", lookups) == 0
    metrics.exposition()  # applies what waits (the registry is touched in bulk, before an export)
    value = metrics.registry.get_sample_value
    base = {"provider": "openai-chat", "model": "gpt-4.1", "tenant": "team-a"}
    assert value("cachewarden_findings_total", {**base, "code": "CW101", "reason": "clock"}) == 2
    # The model limit (1) was taken by gpt-4.1 in the other worker; an unknown tenant is "other".
    other = {"provider": "anthropic", "model": "other", "tenant": "other", "source": "predicted"}
    assert value("cachewarden_input_tokens_total", {**other, "kind": "cached"}) == 5
    assert value("cachewarden_index_entries", base) == 7
    assert value("cachewarden_index_backend_errors_total", {"stage": "lookup"}) == 1
    applier.forget(1)
    assert value("cachewarden_index_entries", base) == 3


def _usage(cached: int) -> Usage:
    return Usage(input_total=cached, cached=cached, cache_write=0, cache_write_1h=0, uncached=0, output=0)
