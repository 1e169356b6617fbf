"""Security properties of the proxy in the request path.

- An API key in a header (Authorization, x-api-key) or in the query string never appears in the
  access log, the metrics, the capture file, the proxy's own error bodies (413 / 502 / 504) or its
  log output (every logger at DEBUG). Bodies are the user's prompt: the opt-in capture writes them
  by design, headers never.
- One tenant's prompts never give another tenant a predicted hit, a diff or a metric: no label value
  is derived from a key or a tenant.
- The upstream is chosen by configuration only: Host, X-Forwarded-Host, X-Forwarded-For, Forwarded,
  a ``:authority`` header, an absolute-form request target and ``//host`` paths never reach a second
  ("evil") upstream.
- ``/metrics`` holds no prompt text.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import free_port, metric, scrape, serving

KEY = "sk-planted-SECRET-123"
SECRET = "SECRET-123"
# A key in the query string (some gateways take ``?key=``): kept out of everything the proxy writes
# itself. (httpx's own INFO line "HTTP Request: POST URL" prints it: see test below.)
QUERY_SECRET = "QSECRET-456"
MARKER = "zebra-marker-7Q4XK9-unique"


class Recorder:
    """An upstream that records every request and answers a small chat completion."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, list[tuple[bytes, bytes]]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        self.requests.append((scope["path"], list(scope["headers"])))
        body = json.dumps({"id": "c", "object": "chat.completion", "choices": []}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def metrics_text(url: str) -> str:
    return httpx.get(url + "/metrics", timeout=10).text


def label_values(url: str) -> set[str]:
    return {v for _, labels in scrape(url) for _, v in labels}


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    """Polls ``check`` (bounded): a request is counted, and its log and capture lines written, once
    its analysis ended, which in the analysis worker processes is after the client got its answer."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def wait_counted(url: str, n: float, **labels: str) -> None:
    wait_for(lambda: metric(url, "cachewarden_requests_total", **labels) >= n, "requests were not counted")


# -- keys never written ---------------------------------------------------------------------------------


@dataclass
class Logged:
    proxy: str
    slow: str  # upstream timeout 0.3 s
    dead: str  # upstream is a closed port
    emulator: str
    files: list[Path]
    proxies: list[str]


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Logged]:
    tmp = tmp_path_factory.mktemp("security")
    closed = f"http://127.0.0.1:{free_port()}"
    files: list[Path] = []

    def settings(name: str, upstream: str, **extra: Any) -> Settings:
        access, capture = tmp / f"{name}-access.jsonl", tmp / f"{name}-capture.jsonl"
        files.extend([access, capture])
        return Settings(
            openai_upstream=upstream,
            anthropic_upstream=upstream,
            access_log=str(access),
            capture=str(capture),
            log_level="debug",
            **extra,
        )

    # The analysis worker processes log to the stderr they were started with: a file of its own.
    worker_log = tmp / "workers-stderr.log"
    with serving(create_emulator(), "emulator", lifespan="off", stop_timeout=30) as emulator:
        apps = [
            build(settings("ok", emulator.url)),
            build(settings("slow", emulator.url, upstream_timeout=0.3)),
            build(settings("dead", closed, connect_timeout=1)),
        ]
        with contextlib.ExitStack() as stack:
            with worker_stderr(worker_log):  # the workers start with their proxy's lifespan
                ok = stack.enter_context(serving(apps[0], "ok", stop_timeout=30))
                slow = stack.enter_context(serving(apps[1], "slow", stop_timeout=30))
                dead = stack.enter_context(serving(apps[2], "dead", stop_timeout=30))
            urls = [ok.url, slow.url, dead.url]
            yield Logged(ok.url, slow.url, dead.url, emulator.url, [*files, worker_log], urls)


@contextlib.contextmanager
def worker_stderr(path: Path) -> Iterator[None]:
    """File descriptor 2 is ``path`` for the processes started meanwhile (this process' own is back
    after): what they log can be read."""
    saved = os.dup(2)
    try:
        with path.open("ab") as file:
            os.dup2(file.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def test_a_key_in_headers_is_never_written(logged: Logged, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the proxy's own included
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    chat = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hello"}]}
    bodies: list[bytes] = []
    with httpx.Client(timeout=10) as client:
        for base in (logged.proxy, logged.slow, logged.dead):
            for stream in (False, True):
                r = client.post(
                    base + "/v1/chat/completions",
                    json={**chat, "stream": stream},
                    headers=headers,
                    params={"key": f"sk-query-{QUERY_SECRET}"},
                )
                bodies.append(r.content)
            try:  # a timeout (504) on the slow proxy, a connection broken mid-response on the others
                r = client.post(
                    base + "/v1/messages",
                    json={"model": "claude-sonnet-5", "max_tokens": 8, "messages": chat["messages"]},
                    headers={
                        **headers,
                        "x-emulator-fault": "delay=1" if base == logged.slow else "disconnect=2",
                    },
                )
                bodies.append(r.content)
            except httpx.RemoteProtocolError:
                pass
            r = client.post(
                base + "/v1/chat/completions",
                content=b"x" * (32 * 2**20 + 1),
                headers={**headers, "content-type": "application/json"},
            )
            assert r.status_code == 413
            bodies.append(r.content)
    wait_counted(logged.slow, 1, status="504")
    wait_counted(logged.dead, 1, status="502")
    # The SDKs too (they add their own headers).
    oa = openai.OpenAI(api_key=KEY, base_url=logged.proxy + "/v1", max_retries=0, timeout=10)
    assert oa.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}]).choices
    an = anthropic.Anthropic(api_key=KEY, base_url=logged.proxy, max_retries=0, timeout=10)
    assert an.messages.create(
        model="claude-sonnet-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    for url in logged.proxies:
        wait_counted(url, 4)

    def lines(name: str) -> int:
        path = next(p for p in logged.files if p.name == name)
        return path.read_text(encoding="utf-8").count("\n") if path.exists() else 0

    # The last response hooks (capture, access log) run just after the count.
    wait_for(lambda: lines("ok-access.jsonl") >= 6 and lines("ok-capture.jsonl") >= 4, "lines not written")

    for body in bodies:
        assert SECRET.encode() not in body and QUERY_SECRET.encode() not in body
    for url in logged.proxies:
        assert SECRET not in metrics_text(url) and QUERY_SECRET not in metrics_text(url)
    written = {path.name: path.read_text(encoding="utf-8") for path in logged.files}
    # Each proxy's analysis workers wrote there (at DEBUG, as the proxies were configured).
    assert written["workers-stderr.log"].count("analysis worker") >= 6
    for name, text in written.items():
        assert SECRET not in text and QUERY_SECRET not in text, name
    logs = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert any(r.levelno >= logging.WARNING and r.name.startswith("cachewarden") for r in caplog.records)
    assert SECRET not in logs
    own = [r for r in caplog.records if r.name.startswith(("cachewarden", "uvicorn"))]
    assert own and not any(QUERY_SECRET in r.getMessage() for r in own)


# -- tenants ------------------------------------------------------------------------------------------------


def test_one_tenant_never_predicts_a_hit_or_a_metric_for_another(tmp_path: Path) -> None:
    policy = "\n".join(f"Clause {i}: refunds of type {i} take {i + 3} days." for i in range(200))
    messages = [{"role": "system", "content": policy}, {"role": "user", "content": "What about type 7?"}]
    tenant_header_value = "acme-tenant-do-not-label"
    with serving(create_emulator(), "emulator", lifespan="off", stop_timeout=30) as emulator:
        app = build(
            Settings(openai_upstream=emulator.url, anthropic_upstream=emulator.url, tenant_header="x-tenant")
        )
        with serving(app, "proxy", stop_timeout=30) as proxy:
            key_a, key_b = "sk-tenant-A-key-111", "sk-tenant-B-key-222"
            for n, key in enumerate([key_a, key_a]):
                client = openai.OpenAI(api_key=key, base_url=proxy.url + "/v1", max_retries=0, timeout=10)
                client.chat.completions.create(model="gpt-4.1", messages=messages)  # type: ignore[arg-type]
                wait_counted(proxy.url, n + 1)
            hit = metric(proxy.url, "cachewarden_input_tokens_total", source="predicted", kind="cached")
            assert hit > 0, "tenant A's second request should be a predicted hit"
            client = openai.OpenAI(api_key=key_b, base_url=proxy.url + "/v1", max_retries=0, timeout=10)
            client.chat.completions.create(model="gpt-4.1", messages=messages)  # type: ignore[arg-type]
            wait_counted(proxy.url, 3)
            # Tenant B sends A's exact prompt: no predicted hit, and its miss is "cold": a diff with A's
            # prompt would name another reason and lose tokens. (Every reason's series exists at 0 from
            # start-up, so the tokens, not the label sets, tell which reasons a request named.)
            assert (
                metric(proxy.url, "cachewarden_input_tokens_total", source="predicted", kind="cached") == hit
            )
            assert metric(proxy.url, "cachewarden_cache_miss_tokens_total") == 0
            # A named tenant (header) behaves the same, and neither it nor a key shows up in a label.
            client = openai.OpenAI(
                api_key=key_a,
                base_url=proxy.url + "/v1",
                max_retries=0,
                timeout=10,
                default_headers={"x-tenant": tenant_header_value},
            )
            client.chat.completions.create(model="gpt-4.1", messages=messages)  # type: ignore[arg-type]
            wait_counted(proxy.url, 4)
            assert (
                metric(proxy.url, "cachewarden_input_tokens_total", source="predicted", kind="cached") == hit
            )
            proxy_state = app.state.proxy
            hashes = {proxy_state.hash_key([("authorization", f"Bearer {k}")]) for k in (key_a, key_b)}
            text = metrics_text(proxy.url)
            for value in label_values(proxy.url):
                # No tenant (a "key:HASH" or a header value) and no key in any label: label values
                # come from bounded vocabularies (some of which, like "output-schema-keys", say "key").
                assert not value.startswith("key:") and "sk-" not in value and "tenant" not in value, value
            for secret in (*hashes, key_a, key_b, "tenant-A", "tenant-B", tenant_header_value):
                assert secret not in text


# -- the upstream is configuration, never a client's header -------------------------------------------


def test_no_client_header_or_target_chooses_the_upstream() -> None:
    good, evil = Recorder(), Recorder()
    with (
        serving(good, "good", lifespan="off", stop_timeout=30) as up,
        serving(evil, "evil", lifespan="off", stop_timeout=30) as bad,
    ):
        app = build(Settings(openai_upstream=up.url, anthropic_upstream=up.url))
        with serving(app, "proxy", stop_timeout=30) as proxy:
            evil_host = f"127.0.0.1:{bad.port}"
            body = json.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}).encode()
            tricks = [
                {"host": evil_host},
                {"x-forwarded-host": evil_host},
                {
                    "x-forwarded-for": "127.0.0.1",
                    "x-forwarded-proto": "http",
                    "x-forwarded-port": str(bad.port),
                },
                {"forwarded": f"for=127.0.0.1;host={evil_host};proto=http"},
                {"x-original-url": f"http://{evil_host}/v1/chat/completions"},
                {"x-rewrite-url": f"http://{evil_host}/v1/chat/completions"},
            ]
            with httpx.Client(timeout=10) as client:
                for headers in tricks:
                    r = client.post(proxy.url + "/v1/chat/completions", content=body, headers=headers)
                    assert r.status_code == 200
            # What httpx refuses to send: raw HTTP/1.1 on a socket.
            raw_requests = [
                f"POST http://{evil_host}/v1/chat/completions HTTP/1.1\r\nHost: {evil_host}\r\n",
                f"POST //{evil_host}/v1/chat/completions HTTP/1.1\r\nHost: {evil_host}\r\n",
                f"POST /%2F%2F{evil_host}/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n:authority: {evil_host}\r\n",
                f"POST @{evil_host}/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            ]
            answers = []
            for head in raw_requests:
                request = (
                    f"{head}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n"
                ).encode() + body
                with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
                    sock.sendall(request)
                    data = b""
                    while chunk := sock.recv(65536):
                        data += chunk
                answers.append(data.split(b"\r\n", 1)[0])
            # Each is forwarded to the configured upstream or refused by the server: never sent elsewhere.
            assert all(a.startswith((b"HTTP/1.1 200", b"HTTP/1.1 400", b"HTTP/1.1 404")) for a in answers), (
                answers
            )
            assert evil.requests == []
            assert len(good.requests) >= len(tricks)
            forwarded_hosts = {dict(h)[b"host"] for _, h in good.requests}
            assert forwarded_hosts == {f"127.0.0.1:{up.port}".encode()}


# -- no prompt text in /metrics -----------------------------------------------------------------------------


def test_metrics_hold_no_prompt_text() -> None:
    with serving(create_emulator(), "emulator", lifespan="off", stop_timeout=30) as emulator:
        app = build(Settings(openai_upstream=emulator.url, anthropic_upstream=emulator.url))
        with serving(app, "proxy", stop_timeout=30) as proxy:
            oa = openai.OpenAI(api_key="sk-rel-marker", base_url=proxy.url + "/v1", max_retries=0, timeout=10)
            tools: Any = [
                {
                    "type": "function",
                    "function": {
                        "name": f"tool_{MARKER}"[:60].replace("-", "_"),
                        "description": MARKER,
                        "parameters": {},
                    },
                }
            ]
            oa.chat.completions.create(
                model="gpt-4.1",
                messages=[
                    {"role": "system", "content": f"Be brief {MARKER}"},
                    {"role": "user", "content": MARKER},
                ],
                tools=tools,
                user=MARKER,
            )
            an = anthropic.Anthropic(api_key="sk-rel-marker", base_url=proxy.url, max_retries=0, timeout=10)
            an.messages.create(
                model="claude-sonnet-5",
                max_tokens=8,
                system=f"System {MARKER}",
                messages=[{"role": "user", "content": f"{MARKER} {MARKER}"}],
                metadata={"user_id": MARKER},
            )
            with httpx.Client(timeout=10) as client:
                # A body may put anything in "model": text is never a label value.
                for model in (f"gpt-4.1 {MARKER}", f"please {MARKER}", MARKER * 10):
                    client.post(
                        proxy.url + "/v1/chat/completions",
                        json={"model": model, "messages": [{"role": "user", "content": MARKER}]},
                        headers={"authorization": "Bearer sk-rel-marker"},
                    )
            wait_counted(proxy.url, 5)
            text = metrics_text(proxy.url)
            assert "zebra" not in text and "7Q4XK9" not in text
            assert "gpt-4.1" in text  # the metrics do carry the requests
