"""A small harness for tests of the proxy and of analyzers written for it (it needs no pytest).

``serve`` runs an ASGI app (the proxy, the emulator, a fake upstream) under uvicorn in a daemon
thread on a loopback port and returns once it accepts connections; ``scrape`` reads a server's
``/metrics`` into a dict and ``metric_sum`` adds up the samples of one metric (``metric`` does both);
``command`` runs a ``cachewarden`` command in a process of its own::

    with serving(create_emulator(), "emulator") as emulator:
        settings = Settings(openai_upstream=emulator.url, anthropic_upstream=emulator.url)
        with serving(build(settings), "proxy") as proxy:
            ...  # send requests to proxy.url
            assert metric(proxy.url, "cachewarden_requests_total", status="200") > 0
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""``(name, sorted (label, value) pairs) -> value`` for every sample of a /metrics page."""

# uvicorn settings unless the caller gives others: as ``cachewarden proxy`` runs (h11, no websockets),
# and a shutdown that stops waiting for open requests after 5 s.
DEFAULTS: dict[str, Any] = {"lifespan": "on", "http": "h11", "ws": "none", "timeout_graceful_shutdown": 5}


class ServeError(RuntimeError):
    """The server exited before it started (``timeout`` None) or did not start within ``timeout`` s."""

    def __init__(self, name: str, timeout: float | None) -> None:
        super().__init__(f"{name} did not start" + ("" if timeout is None else f" within {timeout:g} s"))
        self.name, self.timeout = name, timeout


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a child process to bind (``serve`` binds its own socket)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Served:
    """A running server: uvicorn's ``server``, the ``thread`` it runs in, its ``url`` and bound ``sock``."""

    server: uvicorn.Server
    thread: threading.Thread
    url: str
    sock: socket.socket

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout: float = 10) -> None:
        """Ask the server to exit, wait up to ``timeout`` s for its thread, and close its port."""
        self.server.should_exit = True
        if self.thread.ident is not None:
            self.thread.join(timeout)
        self.sock.close()


def serve(
    app: Callable[..., Any],
    name: str,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    log_level: str = "critical",
    # A bound, not a wait: a proxy's analysis worker processes each import the engine and warm up
    # before it is ready (seconds on a busy machine; analysis_workers.START_SECONDS bounds them).
    timeout: float = 60,
    server_factory: Callable[[uvicorn.Config], uvicorn.Server] = uvicorn.Server,
    **config: Any,
) -> Served:
    """Serve ``app`` in a daemon thread called ``name``; returns once it started (else ``ServeError``).

    The socket is bound here (a free port unless ``port`` is given) and handed to uvicorn, so no other
    process can take the port between choosing and binding it. ``config`` goes to ``uvicorn.Config``
    over ``DEFAULTS``; ``server_factory`` makes the server (a ``uvicorn.Server`` subclass, say).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port or 0))
    except OSError:
        sock.close()
        raise
    server = server_factory(uvicorn.Config(app, log_level=log_level, **{**DEFAULTS, **config}))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    served = Served(server, thread, f"http://{host}:{sock.getsockname()[1]}", sock)
    try:
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive():
                raise ServeError(name, None)
            if time.monotonic() > deadline:
                raise ServeError(name, timeout)
            time.sleep(0.01)
    except BaseException:
        served.stop()
        raise
    return served


@contextmanager
def serving(
    app: Callable[..., Any], name: str, *, stop_timeout: float = 10, **kwargs: Any
) -> Iterator[Served]:
    """``serve`` as a context manager: the server is stopped (and its port closed) on the way out."""
    served = serve(app, name, **kwargs)
    try:
        yield served
    finally:
        served.stop(stop_timeout)


@contextmanager
def command(
    args: list[str], port: int, *, ready: str = "/healthz", timeout: float = 30, stop_timeout: float = 15
) -> Iterator[tuple[str, int]]:
    """``cachewarden ARGS…`` in a process of its own (its own GIL), listening on ``port``: yields
    (url, pid) once ``ready`` answers 200, and terminates the process on the way out.

    ``CACHEWARDEN_*`` variables of the caller's environment are not passed on, so a test starts the
    command it wrote and nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWARDEN_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cachewarden.proxy.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise ServeError(f"cachewarden {args[0]}", None)
            if time.monotonic() > deadline:
                raise ServeError(f"cachewarden {args[0]}", timeout)
            try:
                if httpx.get(url + ready, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(stop_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def scrape(url: str, timeout: float = 10) -> Samples:
    """Every sample of the Prometheus text at ``url``/metrics (``url`` is the server's base URL)."""
    text = httpx.get(url + "/metrics", timeout=timeout).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric_sum(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels`` (0 when none)."""
    return sum(
        value
        for (sample, pairs), value in samples.items()
        if sample == name and all(dict(pairs).get(k) == v for k, v in labels.items())
    )


def metric(url: str, name: str, **labels: str) -> float:
    """``metric_sum`` of a fresh ``scrape`` of the server at ``url``."""
    return metric_sum(scrape(url), name, **labels)
