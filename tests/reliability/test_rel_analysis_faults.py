"""Analysis faults never reach the client: the tokenizer, the prefix index and attribution raise or stall.

The official SDKs send the same 50-request workload (OpenAI Chat Completions and Anthropic Messages,
streamed and not) through the proxy to the emulator, once without faults and once per fault. The
emulator runs in its own process (it shares the tokenizer and adapters with the proxy, so patching
them in this process must not touch it) and is deterministic: every answer equals the fault-free
run's (ids and timestamps aside). Raised faults are counted in ``analysis_errors_total{stage}``;
stalled analysis never delays a response.

Each fault is injected where the analysis runs: in the analysis worker processes of the default
(observe mode), through their analyzer factory (rel_worker_faults.py), and, for one target of each
kind, on the threads of the forwarding process (``analysis_processes=False``, the other modes' way),
patched in this process.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from cachewarden.proxy.cli.proxy import build, worker_analyzers
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import command, free_port, metric, serve
from rel_worker_faults import STALL, TARGETS, fault, faulty_workers, reach_workers

REQUESTS = 50
POLICY = "\n".join(
    f"Rule {i}: bookings of type {i} are handled by desk {i % 7} within {i} hours." for i in range(150)
)


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    port = free_port()
    with command(["emulate", "--port", str(port)], port) as (url, _):
        yield url


@dataclass
class Run:
    answers: list[Any]
    latencies: list[float]  # seconds to the whole answer (streams: to the last event)
    first_byte: list[float]  # streams only: seconds to the first event


def workload(proxy_url: str, key: str) -> Run:
    """50 requests, two growing conversations: OpenAI chat and Anthropic, alternately streamed."""
    oa = openai.OpenAI(api_key=key, base_url=proxy_url + "/v1", max_retries=0, timeout=20)
    an = anthropic.Anthropic(api_key=key, base_url=proxy_url, max_retries=0, timeout=20)
    chat: list[Any] = [{"role": "system", "content": POLICY}]
    messages: list[Any] = []
    run = Run([], [], [])
    try:
        for i in range(REQUESTS):
            stream = i % 4 >= 2
            question = f"Question {i}: which desk handles type {i}?"
            start = time.perf_counter()
            first: float | None = None
            if i % 2 == 0:
                chat.append({"role": "user", "content": question})
                if stream:
                    parts: list[str] = []
                    usage = None
                    for chunk in oa.chat.completions.create(
                        model="gpt-4.1", messages=chat, stream=True, stream_options={"include_usage": True}
                    ):
                        first = first or time.perf_counter()
                        parts.extend(c.delta.content or "" for c in chunk.choices)
                        usage = chunk.usage.model_dump() if chunk.usage else usage
                    text = "".join(parts)
                else:
                    completion = oa.chat.completions.create(model="gpt-4.1", messages=chat)
                    text = completion.choices[0].message.content or ""
                    usage = completion.usage.model_dump() if completion.usage else None
                chat.append({"role": "assistant", "content": text})
            else:
                messages.append({"role": "user", "content": question})
                system: Any = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
                if stream:
                    parts = []
                    usage = {}
                    for event in an.messages.create(
                        model="claude-sonnet-5",
                        max_tokens=64,
                        system=system,
                        messages=messages,
                        stream=True,
                    ):
                        first = first or time.perf_counter()
                        if event.type == "message_start":
                            usage.update(event.message.usage.model_dump())
                        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                            parts.append(event.delta.text)
                        elif event.type == "message_delta":
                            usage["output_tokens"] = event.usage.output_tokens
                    text = "".join(parts)
                else:
                    message = an.messages.create(
                        model="claude-sonnet-5", max_tokens=64, system=system, messages=messages
                    )
                    text = "".join(b.text for b in message.content if b.type == "text")
                    usage = message.usage.model_dump()
                messages.append({"role": "assistant", "content": text})
            end = time.perf_counter()
            run.latencies.append(end - start)
            if first is not None:
                run.first_byte.append(first - start)
            run.answers.append((i, stream, text, usage))
    finally:
        oa.close()
        an.close()
    return run


def drive(
    emulator: str, key: str, *, workers: Callable[..., Any] = worker_analyzers, **settings: Any
) -> tuple[Run, str, Callable[[], None]]:
    app = build(Settings(openai_upstream=emulator, anthropic_upstream=emulator, **settings), workers=workers)
    served = serve(app, "proxy")
    try:
        return workload(served.url, key), served.url, lambda: served.stop(30)
    except BaseException:
        served.stop(30)
        raise


def drive_faulty(
    emulator: str,
    key: str,
    target: str,
    kind: str,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    **settings: Any,
) -> tuple[Run, str, Callable[[], None]]:
    """The workload with ``kind`` ("raise" / "stall") injected into ``target`` where the analysis
    runs: in the worker processes (the default) or on the forwarding process' threads."""
    if where == "threads":
        owner, name, replacement = fault(target, kind)
        monkeypatch.setattr(owner, name, replacement)
        return drive(emulator, key, analysis_processes=False, **settings)
    reach_workers(monkeypatch)
    return drive(emulator, key, workers=faulty_workers(target, kind), **settings)


def wait_analysed(url: str) -> None:
    """Requests are counted once their analysis ended (or was dropped): wait for all 50."""
    deadline = time.monotonic() + 60
    while metric(url, "cachewarden_requests_total") < REQUESTS:
        assert time.monotonic() < deadline, "analysis never finished"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def baseline(emulator: str) -> Run:
    run, url, stop = drive(emulator, "sk-rel-baseline")
    try:
        wait_analysed(url)
        assert metric(url, "cachewarden_analysis_errors_total") == 0
        assert metric(url, "cachewarden_input_tokens_total", source="predicted", kind="cached") > 0
    finally:
        stop()
    return run


def _same_answers(run: Run, baseline: Run) -> None:
    assert len(run.answers) == REQUESTS
    assert run.answers == baseline.answers  # text and reported usage, request by request


# Every target in the worker processes (the default); one on threads (the other modes' analysis).
RAISING = [*((t, "processes") for t in TARGETS), ("tokenize", "threads")]
STALLING = [("tokenize", "processes"), ("attribute", "processes"), ("tokenize", "threads")]


@pytest.mark.parametrize(("target", "where"), RAISING)
def test_raising_analysis_changes_no_answer_and_is_counted(
    emulator: str, baseline: Run, target: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, url, stop = drive_faulty(
        emulator, f"sk-rel-raise-{target}-{where}", target, "raise", where, monkeypatch
    )
    try:
        _same_answers(run, baseline)
        wait_analysed(url)
        assert metric(url, "cachewarden_requests_total", status="200") == REQUESTS
        # One failed request hook per request (the engine analyzer), none in the response hooks.
        assert metric(url, "cachewarden_analysis_errors_total", stage="request") == REQUESTS
        assert metric(url, "cachewarden_analysis_errors_total", stage="response") == 0
        assert metric(url, "cachewarden_input_tokens_total", source="predicted") == 0
        assert metric(url, "cachewarden_input_tokens_total", source="reported") > 0
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
    finally:
        stop()


@pytest.mark.parametrize(("target", "where"), STALLING)
def test_stalled_analysis_never_delays_a_response(
    emulator: str, baseline: Run, target: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small backlog: analysis that falls behind is dropped (and counted) instead of queued.
    run, url, stop = drive_faulty(
        emulator, f"sk-rel-stall-{target}-{where}", target, "stall", where, monkeypatch, analysis_backlog=4
    )
    try:
        _same_answers(run, baseline)
        # Each answer arrives without waiting for its 2 s analysis (or any earlier one still running).
        assert max(run.latencies) < STALL / 2, run.latencies
        assert statistics.median(run.latencies) < statistics.median(baseline.latencies) + 0.1
        assert max(run.first_byte) < STALL / 2
        wait_analysed(url)
        dropped = metric(url, "cachewarden_analysis_dropped_total")
        analysed = metric(url, "cachewarden_input_tokens_total", source="predicted", kind="uncached") > 0
        assert analysed and 0 < dropped < REQUESTS
        assert metric(url, "cachewarden_analysis_errors_total") == 0
    finally:
        stop()
