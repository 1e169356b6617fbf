"""deploy/Dockerfile built and run for real (podman, or docker): non-root on a read-only root
filesystem, healthy by its own HEALTHCHECK, the official SDKs through it to the emulator (from the
same image), `/metrics` scraped, and a SIGTERM that drains a request in flight and exits 0 well
within the drain bound. Only 127.0.0.1 is used (host network, services bound to loopback)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from cachewarden.proxy.testing import free_port, metric_sum, scrape
from containers_support import Engine, Image

pytestmark = pytest.mark.slow

GRACEFUL_SECONDS = 5
# `stop --time`: SIGTERM, then SIGKILL after this; a clean drain exits 0 well before it.
STOP_BOUND_SECONDS = GRACEFUL_SECONDS + 5
SYSTEM = "You are the support agent of Example Corp. " + " ".join(
    f"Rule {n}: answer questions about topic {n} in at most {n % 4 + 2} sentences." for n in range(200)
)


def wait_ready(url: str, timeout: float = 60) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready after {timeout}s")


def run_pair(engine: Engine, image: Image) -> tuple[str, str, str, float]:
    """The emulator and the proxy, each in a container of the image; returns the proxy's name and
    URL, the emulator's URL and the proxy's start-up time (container start → /readyz 200)."""
    emu_port, proxy_port = free_port(), free_port()
    emulator_url = f"http://127.0.0.1:{emu_port}"
    common = ("--network", "host", "--read-only")
    # The image's HEALTHCHECK probes CACHEWARDEN_PORT's /healthz, which the emulator serves too.
    emulator = engine.start(
        image.name,
        *common,
        "-e",
        f"CACHEWARDEN_PORT={emu_port}",
        "--entrypoint",
        "cachewarden",
        "--",
        "emulate",
        "--host",
        "127.0.0.1",
        "--port",
        str(emu_port),
    )
    engine.wait_healthy(emulator)
    started = time.monotonic()
    proxy = engine.start(
        image.name,
        *common,
        "-e",
        f"CACHEWARDEN_PORT={proxy_port}",
        "-e",
        f"CACHEWARDEN_GRACEFUL_TIMEOUT={GRACEFUL_SECONDS}",
        "--",
        "--host",
        "127.0.0.1",
        "--openai-upstream",
        emulator_url,
        "--anthropic-upstream",
        emulator_url,
    )
    proxy_url = f"http://127.0.0.1:{proxy_port}"
    wait_ready(proxy_url + "/readyz")
    startup = time.monotonic() - started
    return proxy, proxy_url, emulator_url, startup


def drive_sdks(proxy_url: str) -> dict[str, Any]:
    import anthropic
    import openai

    out: dict[str, Any] = {}
    with openai.OpenAI(api_key="sk-image-test", base_url=proxy_url + "/v1", max_retries=0) as client:
        for turn in range(2):
            done = client.chat.completions.create(
                model="gpt-4.1",
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Q{turn}"}],
            )
            assert done.choices[0].message.content
        assert done.usage is not None and done.usage.prompt_tokens_details is not None
        out["openai_cached"] = done.usage.prompt_tokens_details.cached_tokens
        stream = client.chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "stream please"}], stream=True
        )
        out["openai_stream"] = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    with anthropic.Anthropic(api_key="sk-ant-image-test", base_url=proxy_url, max_retries=0) as claude:
        system: Any = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        for turn in range(2):
            message = claude.messages.create(
                model="claude-sonnet-5",
                max_tokens=50,
                system=system,
                messages=[{"role": "user", "content": f"Q{turn}"}],
            )
        out["anthropic_cached"] = message.usage.cache_read_input_tokens
    return out


def test_image_runs_non_root_read_only_healthy_and_drains_on_sigterm(engine: Engine, image: Image) -> None:
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    proxy, proxy_url, _emulator_url, startup = run_pair(engine, image)
    health_seconds = engine.wait_healthy(proxy)

    # Non-root (the image's numeric USER), on a read-only root filesystem.
    assert engine.inspect(proxy, "{{.Config.User}}") == "10001:10001"
    assert engine.run("exec", proxy, "id", "-u").stdout.strip() == "10001"
    assert engine.inspect(proxy, "{{.HostConfig.ReadonlyRootfs}}") == "true"
    denied = engine.run("exec", proxy, "python", "-c", "open('/opt/cachewarden/x', 'w')", check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr

    # The image carries the default upstream client (aiohttp, from the proxy extra).
    logs = engine.run("logs", proxy)
    assert "upstream client: aiohttp" in logs.stdout + logs.stderr

    usage = drive_sdks(proxy_url)
    assert usage["openai_cached"] > 0 and usage["anthropic_cached"] > 0, usage
    assert usage["openai_stream"]

    # Requests are counted once their analysis ended, beside the answers: wait for all five.
    deadline = time.monotonic() + 30
    while metric_sum(samples := scrape(proxy_url), "cachewarden_requests_total") < 5:
        assert time.monotonic() < deadline, "the five requests were never counted"
        time.sleep(0.1)
    assert metric_sum(samples, "cachewarden_requests_total") == 5
    assert metric_sum(samples, "cachewarden_input_tokens_total", source="reported", kind="cached") > 0
    assert metric_sum(samples, "cachewarden_input_tokens_total", source="predicted", kind="cached") > 0
    assert metric_sum(samples, "cachewarden_analysis_errors_total") == 0

    # SIGTERM with a request in flight: it is answered, then the proxy exits 0 inside the bound.
    answer: dict[str, Any] = {}

    def slow_request() -> None:
        answer["response"] = httpx.post(
            proxy_url + "/v1/chat/completions",
            json={"model": "gpt-4.1", "messages": [{"role": "user", "content": "slow"}]},
            headers={"authorization": "Bearer sk-image-test", "x-emulator-fault": "delay=2"},
            timeout=30,
        )

    worker = threading.Thread(target=slow_request)
    worker.start()
    time.sleep(0.5)
    stopping = time.monotonic()
    engine.run("stop", "--time", str(STOP_BOUND_SECONDS), proxy, timeout=STOP_BOUND_SECONDS + 30)
    stop_seconds = time.monotonic() - stopping
    worker.join(timeout=30)
    assert answer["response"].status_code == 200
    assert engine.inspect(proxy, "{{.State.ExitCode}}") == "0"
    assert stop_seconds < STOP_BOUND_SECONDS, stop_seconds
    print(
        f"\nimage {image.name}: {image.size_bytes / 1e6:.0f} MB, built in {image.build_seconds:.0f} s; "
        f"proxy ready {startup:.2f} s after `run`, healthy (HEALTHCHECK) {health_seconds:.2f} s later; "
        f"SIGTERM with a request in flight → exit 0 in {stop_seconds:.2f} s"
    )
