"""A real redis-server for the shared-index tests: on a free 127.0.0.1 port, in a temp dir, no
persistence; stopped after the tests. Skipped (with the reason) where redis-server is absent."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cachewarden.proxy.testing import free_port

try:
    import redis
except ImportError:  # the tests that need it skip; the others (fakes) still run
    redis = None  # type: ignore[assignment]

SERVER = shutil.which("redis-server")


class RedisServer:
    """One redis-server process; ``stop`` and ``start`` again keep the port (to test reconnects)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Any:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def start(self) -> None:
        assert SERVER is not None and self.proc is None
        args = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log")]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client() as c:
                    c.ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on port {self.port}:\n{log}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _server(tmp: Path) -> Iterator[RedisServer]:
    if redis is None:
        pytest.skip("the redis package is not installed (pip install 'cachewarden[redis]')")
    if SERVER is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    server = RedisServer(tmp)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Shared by the tests of a session; ``redis_url`` empties it before each test."""
    yield from _server(tmp_path_factory.mktemp("redis"))


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    with redis_server.client() as c:
        c.flushall()
    return redis_server.url


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server of the test's own, which the test may stop and restart."""
    yield from _server(tmp_path)
