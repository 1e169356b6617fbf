"""Fault injection (x-emulator-fault), the latency model, the admin endpoints and the command line."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pytest
from cachewarden.proxy.cli import emulate as cli
from cachewarden.proxy.emulator.app import create_app
from cachewarden.proxy.emulator.cache import ReferenceUsage
from cachewarden.proxy.emulator.faults import Fault, FaultSyntaxError, parse_fault
from cachewarden.proxy.emulator.latency import LatencyModel, latency_from_env, parse_latency
from starlette.testclient import TestClient

if TYPE_CHECKING:
    from conftest import Emulator

MESSAGES: Any = [{"role": "user", "content": "Hello there"}]


def fault(spec: str) -> dict[str, str]:
    return {"x-emulator-fault": spec}


def test_parse_fault() -> None:
    assert parse_fault(None) is None
    assert parse_fault("status=429; retry-after=2") == Fault(status=429, retry_after="2")
    assert parse_fault("delay=1.5,disconnect=3") == Fault(delay=1.5, disconnect=3)
    for bad in ("status", "status=abc", "status=200", "boom=1", "delay=-1"):
        with pytest.raises(FaultSyntaxError):
            parse_fault(bad)


def test_status_faults_raise_typed_sdk_errors(emulator: Emulator) -> None:
    client = emulator.openai()
    with pytest.raises(openai.InternalServerError) as server:
        client.chat.completions.create(model="gpt-4.1", messages=MESSAGES, extra_headers=fault("status=500"))
    assert server.value.body and set(server.value.body) >= {"message", "type"}  # type: ignore[arg-type]
    with pytest.raises(openai.RateLimitError) as limited:
        client.responses.create(model="gpt-4.1", input="x", extra_headers=fault("status=429;retry-after=2"))
    assert limited.value.response.headers["retry-after"] == "2"
    claude = emulator.anthropic()
    with pytest.raises(anthropic.RateLimitError):
        claude.messages.create(
            model="claude-sonnet-5", max_tokens=5, messages=MESSAGES, extra_headers=fault("status=429")
        )
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        claude.messages.create(
            model="claude-sonnet-5",
            max_tokens=5,
            messages=MESSAGES,
            extra_headers=fault("status=529;message=busy"),
        )
    assert overloaded.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "busy"},
    }
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="gpt-4.1", messages=MESSAGES, extra_headers=fault("nonsense"))


def test_delay_before_first_byte(emulator: Emulator) -> None:
    start = time.monotonic()
    emulator.openai().chat.completions.create(
        model="gpt-4.1", messages=MESSAGES, extra_headers=fault("delay=0.3")
    )
    assert time.monotonic() - start >= 0.3


def _is_dropped(exc: BaseException) -> bool:
    return (
        isinstance(exc, openai.APIConnectionError | anthropic.APIConnectionError)
        or "ProtocolError" in type(exc).__name__
    )


def test_disconnect_mid_stream_raises(emulator: Emulator) -> None:
    client = emulator.openai()
    seen = 0
    with pytest.raises(Exception) as dropped:
        for _ in client.chat.completions.create(
            model="gpt-4.1", messages=MESSAGES, stream=True, extra_headers=fault("disconnect=3")
        ):
            seen += 1
    assert _is_dropped(dropped.value) and seen == 3
    with (
        pytest.raises(Exception) as dropped,
        emulator.anthropic().messages.stream(
            model="claude-sonnet-5", max_tokens=50, messages=MESSAGES, extra_headers=fault("disconnect=4")
        ) as stream,
    ):
        stream.get_final_message()
    assert _is_dropped(dropped.value)
    with pytest.raises(Exception) as dropped:
        client.chat.completions.create(
            model="gpt-4.1", messages=MESSAGES, extra_headers=fault("disconnect=1")
        )
    assert _is_dropped(dropped.value)


def test_admin_endpoints(emulator: Emulator) -> None:
    state = emulator.post("/_emulator/advance", {"seconds": 10}).json()
    assert state["offset"] == 10
    assert emulator.post("/_emulator/advance", {"seconds": -1}).status_code == 400
    emulator.reset()
    assert emulator.post("/_emulator/advance", {"seconds": 0}).json()["offset"] == 0


def test_injected_clock_drives_ttl() -> None:
    now = [1000.0]
    app = create_app(clock=lambda: now[0])
    body = {
        "model": "claude-sonnet-5",
        "max_tokens": 5,
        "messages": MESSAGES,
        "system": [{"type": "text", "text": "policy " * 1500, "cache_control": {"type": "ephemeral"}}],
    }
    with TestClient(app) as client:
        headers = {"x-api-key": "k"}
        client.post("/v1/messages", json=body, headers=headers)
        assert client.post("/v1/messages", json=body, headers=headers).json()["usage"][
            "cache_read_input_tokens"
        ]
        now[0] += 600
        usage = client.post("/v1/messages", json=body, headers=headers).json()["usage"]
        assert usage["cache_read_input_tokens"] == 0 and usage["cache_creation_input_tokens"] > 0


def test_latency_model() -> None:
    model = LatencyModel(ttft=0.1, input=0.001, cached=0.0, output=0.01)
    assert model.first_token(
        ReferenceUsage(cached=1000, write_5m=0, write_1h=0, uncached=100)
    ) == pytest.approx(0.2)
    assert parse_latency("on") == LatencyModel()
    assert parse_latency("ttft=0.5,output=0.02") == LatencyModel(ttft=0.5, output=0.02)
    with pytest.raises(ValueError):
        parse_latency("speed=2")


def test_latency_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CACHEWARDEN_EMULATOR_LATENCY", raising=False)
    assert latency_from_env() is None
    monkeypatch.setenv("CACHEWARDEN_EMULATOR_LATENCY", "ttft=0.01")
    assert latency_from_env() == LatencyModel(ttft=0.01)


def test_latency_slows_uncached_prefill() -> None:
    app = create_app(latency=LatencyModel(ttft=0.0, input=0.0002, cached=0.0, output=0.0))
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "word " * 2000}]}
    with TestClient(app) as client:
        headers = {"authorization": "Bearer k"}
        start = time.monotonic()
        client.post("/v1/chat/completions", json=body, headers=headers)
        cold = time.monotonic() - start
        start = time.monotonic()
        client.post("/v1/chat/completions", json=body, headers=headers)
        warm = time.monotonic() - start
    assert cold >= 0.35 and warm < cold


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--latency", "bogus"]) == 2
    assert "latency" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        cli.main(["--help"])
    assert usage.value.code == 0
    assert "cachewarden emulate" in capsys.readouterr().out


def test_cachewarden_emulate_command_serves() -> None:
    import subprocess
    import sys

    import httpx
    from cachewarden.proxy.testing import free_port

    port = free_port()
    command = [
        sys.executable,
        "-m",
        "cachewarden.proxy.cli",
        "emulate",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "emulator did not start"
            time.sleep(0.1)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/messages",
            json={"model": "claude-sonnet-5", "max_tokens": 5, "messages": MESSAGES},
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        )
        assert reply.status_code == 200 and reply.json()["type"] == "message"
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
