"""The test harness shipped as ``cachewarden.proxy.testing``: serving, stopping, scraping."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
import uvicorn
from cachewarden.proxy.server.metrics import Metrics
from cachewarden.proxy.testing import (
    Served,
    ServeError,
    command,
    free_port,
    metric,
    metric_sum,
    scrape,
    serve,
    serving,
)
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route


def _assert_stopped(served: Served) -> None:
    assert not served.thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(served.url + "/", timeout=2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", served.port))  # the port is free again


def _hello_app() -> Starlette:
    async def hello(request: Request) -> Response:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello)])


def test_serve_answers_on_its_url_and_stop_frees_the_port() -> None:
    served = serve(_hello_app(), "harness-hello")
    try:
        assert served.url == f"http://127.0.0.1:{served.port}"
        assert served.alive and served.thread.name == "harness-hello" and served.thread.daemon
        assert httpx.get(served.url + "/", timeout=10).text == "hello"
    finally:
        served.stop()
    _assert_stopped(served)


def test_serving_stops_on_the_way_out_even_on_an_error() -> None:
    with pytest.raises(RuntimeError, match="boom"), serving(_hello_app(), "harness-error") as served:
        assert httpx.get(served.url + "/", timeout=10).status_code == 200
        raise RuntimeError("boom")
    _assert_stopped(served)


def test_serve_on_a_given_port_and_uvicorn_options() -> None:
    port = free_port()
    with serving(_hello_app(), "harness-port", port=port, server_header=False) as served:
        assert served.port == port
        response = httpx.get(served.url + "/", timeout=10)
        assert response.text == "hello" and "server" not in response.headers


class _Exits(uvicorn.Server):
    def run(self, sockets: list[socket.socket] | None = None) -> None:
        return None  # the thread ends without the server having started


class _Hangs(uvicorn.Server):
    def run(self, sockets: list[socket.socket] | None = None) -> None:
        while not self.should_exit:
            time.sleep(0.01)


def test_a_server_that_does_not_start_is_an_error_and_is_stopped() -> None:
    threads = set(threading.enumerate())
    with pytest.raises(ServeError, match=r"^harness-exits did not start$") as exited:
        serve(_hello_app(), "harness-exits", server_factory=_Exits)
    assert exited.value.timeout is None
    with pytest.raises(ServeError, match=r"^harness-hangs did not start within 0.2 s$") as hung:
        serve(_hello_app(), "harness-hangs", timeout=0.2, server_factory=_Hangs)
    assert hung.value.timeout == 0.2
    assert set(threading.enumerate()) <= threads  # both threads ended


def test_scrape_a_metrics_registry() -> None:
    metrics = Metrics()
    metrics.requests.labels("openai-chat", "gpt-4.1", "200").inc(3)
    metrics.requests.labels("anthropic", "claude-sonnet-5", "200").inc(2)
    metrics.requests.labels("anthropic", "claude-sonnet-5", "502").inc()

    async def exposition(request: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    with serving(Starlette(routes=[Route("/metrics", exposition)]), "harness-metrics") as served:
        samples = scrape(served.url)
        assert metric(served.url, "cachewarden_requests_total") == 6
    key = (
        "cachewarden_requests_total",
        (("model", "gpt-4.1"), ("provider", "openai-chat"), ("status", "200")),
    )
    assert samples[key] == 3
    assert metric_sum(samples, "cachewarden_requests_total") == 6
    assert metric_sum(samples, "cachewarden_requests_total", status="200") == 5
    assert metric_sum(samples, "cachewarden_requests_total", provider="anthropic", status="502") == 1
    assert metric_sum(samples, "cachewarden_requests_total", status="404") == 0
    assert metric_sum(samples, "cachewarden_no_such_metric") == 0


def test_the_harness_imports_without_pytest() -> None:
    code = "import sys, cachewarden.proxy.testing; sys.exit('pytest' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_command_runs_a_cachewarden_command_in_its_own_process() -> None:
    port = free_port()
    with command(["emulate", "--port", str(port)], port) as (url, pid):
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200
        assert pid != os.getpid()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/healthz", timeout=2)


def test_command_that_exits_is_a_serve_error() -> None:
    port = free_port()
    with pytest.raises(ServeError, match="did not start"), command(["emulate", "--port", "not-a-port"], port):
        pass
