"""Servers for the proxy benchmark: free ports, child processes in their own process group, and the
bare pass-through proxy the cachewarden proxy is compared with.

``python bench/_servers.py bare --port P --upstream URL`` serves the bare proxy: Starlette, one shared
httpx.AsyncClient, the body read then sent with ``client.send(req, stream=True)`` and relayed raw. No
analysis, no metrics: the least a Python ASGI proxy can do, run by uvicorn with the same settings as
``cachewarden proxy`` (no access log, no Server/Date headers). ``--server`` picks the serving stack
(uvicorn with h11 on uvicorn's default loop, uvloop where installed, as `cachewarden proxy` runs;
uvicorn with httptools + uvloop; granian) and ``--transport`` httpx's transport
(its own, or aiohttp's through cachewarden's ``upstream_aiohttp.AiohttpTransport``), for bench/bench_stack.py.

``nginx_server`` runs Debian's nginx answering every POST with one canned body: the near-free
upstream that shows what a hop costs and nothing else.
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

    def group_cpu_seconds(self) -> float:
        """User + system CPU time of every live process in the server's process group (workers too)."""
        total = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # the process ended meanwhile
                continue
            if int(fields[2]) == self.proc.pid:  # field 5 of stat: the process group id
                total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

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


def _transport(name: str, limits: httpx.Limits) -> httpx.AsyncBaseTransport | None:
    if name == "httpx":
        return None
    # cachewarden's own (its default upstream client): aiohttp's pool and parser under httpx's API.
    from cachewarden.proxy.server.upstream_aiohttp import AiohttpTransport

    return AiohttpTransport(keepalive_expiry=limits.keepalive_expiry or 60.0)


def create_bare_app(upstream: str, transport: str = "httpx") -> Starlette:
    state: dict[str, httpx.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=100, keepalive_expiry=60)
        chosen = _transport(transport, limits)
        async with httpx.AsyncClient(
            base_url=upstream, timeout=600.0, limits=limits, transport=chosen
        ) as client:
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


SERVERS = ("uvicorn-h11", "uvicorn-httptools", "granian")
TRANSPORTS = ("httpx", "aiohttp")


def granian_app() -> Starlette:
    """Factory for granian, which imports the app by name: the settings come from the environment."""
    return create_bare_app(os.environ["BENCH_UPSTREAM"], os.environ.get("BENCH_TRANSPORT", "httpx"))


def _main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="_servers.py")
    parser.add_argument("kind", choices=["bare"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--server", choices=SERVERS, default="uvicorn-h11")
    parser.add_argument("--transport", choices=TRANSPORTS, default="httpx")
    args = parser.parse_args(list(argv))
    if args.server == "granian":
        from granian import Granian

        os.environ["BENCH_UPSTREAM"], os.environ["BENCH_TRANSPORT"] = args.upstream, args.transport
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        Granian(
            "_servers:granian_app", address=HOST, port=args.port, interface="asgi", factory=True,
            log_level="warning", http="1",
        ).serve()  # fmt: skip
        return 0
    import uvicorn

    uvicorn.run(
        create_bare_app(args.upstream, args.transport),
        host=HOST,
        port=args.port,
        http="h11" if args.server == "uvicorn-h11" else "httptools",
        # h11 with uvicorn's default loop, as `cachewarden proxy` runs (uvloop where installed).
        loop="auto" if args.server == "uvicorn-h11" else "uvloop",
        lifespan="on",
        log_level="warning",
        server_header=False,
        date_header=False,
        access_log=False,
    )
    return 0


# A chat completion as an upstream returns it; nginx sends it for every POST, whatever the body.
CANNED_COMPLETION = (
    '{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"gpt-4o",'
    '"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
    '"usage":{"prompt_tokens":10000,"completion_tokens":1,"total_tokens":10001,'
    '"prompt_tokens_details":{"cached_tokens":9728}}}'
)


def nginx_server(port: int, directory: str) -> Server:
    """nginx on ``port`` answering /healthz and every other path with the canned completion."""
    conf = os.path.join(directory, "nginx.conf")
    with open(conf, "w", encoding="ascii") as f:
        f.write(
            f"""daemon off; worker_processes 1; pid {directory}/nginx.pid; error_log {directory}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off; client_body_temp_path {directory}; client_max_body_size 64m;
  keepalive_requests 1000000; keepalive_timeout 120s;
  server {{
    listen {HOST}:{port};
    location = /healthz {{ default_type application/json; return 200 '{{"status":"ok"}}'; }}
    location / {{ default_type application/json; return 200 '{CANNED_COMPLETION}'; }}
  }}
}}
"""
        )
    return Server("nginx", ["nginx", "-c", conf, "-p", directory], port)


def nginx_hop(port: int, directory: str, upstream: str) -> Server:
    """nginx on ``port`` relaying every request to ``upstream`` (``proxy_pass``, kept-alive
    connections, no buffering): the floor of a hop, what a proxy in C costs."""
    conf = os.path.join(directory, "nginx-hop.conf")
    with open(conf, "w", encoding="ascii") as f:
        f.write(
            f"""daemon off; worker_processes 1; pid {directory}/nginx-hop.pid;
error_log {directory}/hop-error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off; client_body_temp_path {directory}/hop-body; client_max_body_size 64m;
  proxy_temp_path {directory}/hop-proxy; keepalive_requests 1000000; keepalive_timeout 120s;
  upstream backend {{ server {upstream.removeprefix("http://")}; keepalive 64; }}
  server {{
    listen {HOST}:{port};
    location / {{
      proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffering off; proxy_request_buffering off;
    }}
  }}
}}
"""
        )
    return Server("nginx-hop", ["nginx", "-c", conf, "-p", directory], port)


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
