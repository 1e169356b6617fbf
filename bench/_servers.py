"""Servers for the proxy benchmark: free ports, child processes in their own process group, and the
bare pass-through proxy the cachewarden proxy is compared with.

``python bench/_servers.py bare --port P --upstream URL`` serves the bare proxy: Starlette, one shared
httpx.AsyncClient, the body read then sent with ``client.send(req, stream=True)`` and relayed raw. No
analysis, no metrics: the least a Python ASGI proxy can do, run by uvicorn with the same settings as
``cachewarden proxy`` (h11, no access log, no Server/Date headers).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

HOST = "127.0.0.1"
# Not forwarded by the bare proxy: hop-by-hop, plus what httpx sets for the upstream connection.
_DROP_REQUEST = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
    }
)
_DROP_RESPONSE = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """A child process in a new session (its own process group), stopped with the whole group."""

    def __init__(self, name: str, argv: Sequence[str], port: int, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.port = port
        self.url = f"http://{HOST}:{port}"
        # A file, not a pipe: a chatty server must never block on a full pipe nobody reads.
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )

    def log_tail(self, limit: int = 2000) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-limit:]

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (all its threads)."""
        with open(f"/proc/{self.proc.pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def wait_ready(self, path: str = "/healthz", timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + path, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready on {self.url} after {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.log.close()


def python_server(name: str, args: Sequence[str], port: int) -> Server:
    """``python ARGS`` with this interpreter; unbuffered, and no latency model for the emulator."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWARDEN_")}
    env["PYTHONUNBUFFERED"] = "1"
    return Server(name, [sys.executable, *args], port, env)


# -- the bare pass-through proxy -------------------------------------------------------------------


def create_bare_app(upstream: str) -> Starlette:
    state: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=100, keepalive_expiry=60)
        async with httpx.AsyncClient(base_url=upstream, timeout=600.0, limits=limits) as client:
            state["client"] = client
            yield

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def forward(request: Request) -> Response:
        client = state["client"]
        body = await request.body()
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1") not in _DROP_REQUEST]
        req = client.build_request(
            request.method, request.url.path, params=request.url.query or None, headers=headers, content=body
        )
        resp = await client.send(req, stream=True)
        out = [
            (k.lower(), v) for k, v in resp.headers.raw if k.decode("latin-1").lower() not in _DROP_RESPONSE
        ]
        response = StreamingResponse(
            resp.aiter_raw(), status_code=resp.status_code, background=BackgroundTask(resp.aclose)
        )
        response.raw_headers = out
        return response

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/{path:path}", forward, methods=methods),
        ],
        lifespan=lifespan,
    )


def _main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="_servers.py")
    parser.add_argument("kind", choices=["bare"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args(list(argv))
    import uvicorn

    uvicorn.run(
        create_bare_app(args.upstream),
        host=HOST,
        port=args.port,
        http="h11",
        lifespan="on",
        log_level="warning",
        server_header=False,
        date_header=False,
        access_log=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
