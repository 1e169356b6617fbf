"""`cachewarden demo`: emulator + proxy + the SDKs, end to end, and everything shut down afterwards."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from cachewarden.proxy.cli import demo
from cachewarden.proxy.cli.demo_workload import BUSTER_REASONS, PHASES, TOOLS, build_workload
from starlette.applications import Starlette

URL = re.compile(r"http://127\.0\.0\.1:(\d+)")


def _ports(text: str) -> set[int]:
    return {int(port) for port in URL.findall(text)}


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False


def _demo_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("cachewarden-demo-") and t.is_alive()]


def _rate(name: str, text: str) -> float:
    match = re.search(rf"^\s+{name}\s+([\d.]+)% cached", text, re.MULTILINE)
    assert match, f"no {name} hit rate in the report:\n{text}"
    return float(match.group(1))


def test_demo_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code = demo.main([])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    with capsys.disabled():
        print(f"\ncachewarden demo took {elapsed:.1f} s")
    assert code == 0, err
    assert err == ""
    assert elapsed < 90

    # One line per phase and conversation, with the reported share of each request.
    for phase in PHASES:
        assert f"phase {phase.number}/{len(PHASES)}" in out
    assert "openai-chat gpt-4.1" in out and "anthropic claude-sonnet-5" in out
    assert "openai-chat gpt-4o" in out and "anthropic claude-opus-4-1" in out
    # The healthy agent hits the cache from its second request on; the timestamp phase never does.
    healthy = re.search(r"anthropic claude-sonnet-5\s+cached per request:\s+(.*)", out)
    assert (
        healthy
        and healthy.group(1).split()[0] == "0%"
        and all(int(p.rstrip("%")) > 80 for p in healthy.group(1).split()[1:])
    )
    timestamp_phase = out.split("phase 2/5")[1].split("phase 3/5")[0]
    assert set(re.findall(r"\d+%", timestamp_phase)) == {"0%"}

    # The replay report of the captured traffic names every buster ...
    report = out.split("captured traffic:")[1]
    reasons = report.split("misses by reason")[1].split("fixes:")[0]
    for code_ in BUSTER_REASONS:
        assert re.search(rf"^\s+{code_}\s+\d+ requests?\s", reasons, re.MULTILINE), (code_, reasons)
    assert "worst offenders" in report and "diverged at" in report
    # ... with predicted and reported hit rates side by side, and close (the emulator is the reference).
    predicted, reported = _rate("predicted", report), _rate("reported", report)
    assert 10 < reported < 90
    assert abs(predicted - reported) <= 1.0, (predicted, reported)

    metrics_line = re.search(r"^metrics: http://127\.0\.0\.1:(\d+)/metrics", out, re.MULTILINE)
    assert metrics_line
    assert "cachewarden proxy --port 8787" in out

    # Nothing left behind: both servers stopped, their ports closed.
    ports = _ports(out.split("captured traffic:")[0])
    assert len(ports) == 2 and int(metrics_line.group(1)) in ports
    assert not _demo_threads()
    for port in ports:
        assert _refused(port), f"port {port} still accepts connections"


def test_workload_is_deterministic() -> None:
    first, second = build_workload(4), build_workload(4)
    assert first == second
    assert json.dumps([s.kwargs for s in first.steps]) == json.dumps([s.kwargs for s in second.steps])
    # 5 phases x 4 requests for each of the two agent conversations, plus the Responses service.
    assert len(first.steps) == 5 * 4 * 2 + 3
    assert len(build_workload(6).steps) == 5 * 6 * 2 + 3


def test_workload_switches_each_buster_on_in_its_phase() -> None:
    workload = build_workload(4, start=datetime.fromisoformat("2026-01-02T03:04:05+00:00"))
    chat = {p.key: [s.kwargs for s in workload.by_phase(p) if s.provider == "openai-chat"] for p in PHASES}
    systems = {k: [r["messages"][0]["content"].splitlines()[0] for r in rs] for k, rs in chat.items()}
    assert set(systems["healthy"]) == {"Current time: 2026-01-02"}
    assert len(set(systems["timestamp"])) == 4 and all("T03:" in s for s in systems["timestamp"])
    orders = [[t["function"]["name"] for t in k["tools"]] for k in chat["tools-reordered"]]
    canonical = [t.name for t in TOOLS]
    assert all(o != canonical and sorted(o) == sorted(canonical) for o in orders)
    assert all(a != b for a, b in itertools.pairwise(orders))
    edited = [k["messages"][2]["content"] for k in chat["history-edited"]]
    assert len(set(edited)) == 4
    assert {k["model"] for k in chat["model-changed"]} == {"gpt-4o"}
    assert {k["model"] for steps in list(chat.values())[:4] for k in steps} == {"gpt-4.1"}
    # The conversation grows by whole turns, with a tool call and its result.
    roles = [m["role"] for m in chat["model-changed"][-1]["messages"]]
    assert roles[0] == "system" and "tool" in roles
    assert all(len(b["messages"]) > len(a["messages"]) for a, b in itertools.pairwise(chat["healthy"]))


def test_a_failed_request_is_one_line_and_stops_the_servers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An "emulator" that knows no route: the first SDK call gets a 404 through the proxy.
    monkeypatch.setattr(demo, "create_emulator", lambda: Starlette(routes=[]))
    assert demo.main(["--turns", "2"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("cachewarden demo: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not _demo_threads()
    for port in _ports(out):
        assert _refused(port)


def test_ctrl_c_during_the_run_stops_the_servers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupt(self: demo.Clients, step: object) -> demo.Sent:
        raise KeyboardInterrupt

    monkeypatch.setattr(demo.Clients, "send", interrupt)
    assert demo.main(["--turns", "2"]) == 130
    out, err = capsys.readouterr()
    assert err == "cachewarden demo: interrupted\n"
    assert not _demo_threads()
    ports = _ports(out)
    assert len(ports) == 2 and all(_refused(p) for p in ports)


def test_bad_turns_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        demo.main(["--turns", "1"])
    assert exc.value.code == 2
    assert "--turns" in capsys.readouterr().err


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_keep_running_serves_metrics_until_ctrl_c() -> None:
    exe = Path(sys.executable).with_name("cachewarden")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [str(exe), "demo", "--keep-running", "--turns", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # A user's Ctrl-C reaches a demo whose SIGINT is at its default. A suite started in the
        # background by a non-interactive shell inherits SIGINT ignored, and so would the child:
        # it would then never see the signal this test sends. Reset it, as a terminal would have it.
        preexec_fn=_sigint_default,
    )
    try:
        assert child.stdout is not None
        seen: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            seen.append(line)
            if line.startswith("serving until Ctrl-C"):
                break
        text = "".join(seen)
        match = re.search(r"^metrics: (http://127\.0\.0\.1:\d+/metrics)", text, re.MULTILINE)
        assert match, text
        metrics = httpx.get(match.group(1), timeout=10).text
        assert "cachewarden_cache_miss_tokens_total" in metrics and 'reason="timestamp"' in metrics
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
        assert child.returncode == 0, err
        assert "Traceback" not in err
        for port in _ports(text):
            assert _refused(port)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
