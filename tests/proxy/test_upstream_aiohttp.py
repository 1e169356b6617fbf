"""The aiohttp upstream transport is a transparent hop: what the client sent goes out byte for byte,
the upstream's raw body comes back, and aiohttp's failures arrive as the httpx errors the
forwarder translates. Checked against a raw TCP server on 127.0.0.1 that records the bytes."""

from __future__ import annotations

import asyncio
import gzip
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from cachewarden.proxy.cli import proxy as proxy_cmd
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.forward import build_request, make_client, upstream_client
from cachewarden.proxy.server.upstream_aiohttp import AiohttpTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    return head + (await reader.readexactly(length) if length else b"")


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[str]:
    tasks: list[asyncio.Task[Any]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        try:
            await handler(reader, writer)
        finally:
            writer.close()  # also when cancelled below: no socket is left open

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


def aiohttp_client() -> httpx.AsyncClient:
    return make_client(replace(Settings(), upstream_client="aiohttp", upstream_timeout=2.0), env={})


def test_the_request_goes_out_as_the_client_sent_it() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def main() -> None:
        sent: list[bool] = []
        async with raw_server(handler) as base, aiohttp_client() as client:
            url = httpx.URL(base + "/v1/chat/completions?api-version=2024-10-21&x=a%2Fb%20c")
            body = b'{"model": "gpt-4o",  "messages": []}'
            headers = [(b"Authorization", b"Bearer sk-test"), (b"X-Custom", b"One"), (b"X-Custom", b"two")]
            headers.append((b"X-Title", "Café ☕".encode()))
            request = build_request("POST", url, headers, body, lambda: sent.append(True))
            response = await client.send(request, stream=True)
            assert await response.aread() == b"ok"
            await response.aclose()
            # What aiohttp would change goes through httpx's transport: latin-1 bytes (aiohttp writes
            # UTF-8), a name repeated in another case (aiohttp would keep only the last).
            for odd in ([(b"X-Title", b"caf\xe9")], [(b"X-Tag", b"a"), (b"x-tag", b"b")]):
                response = await client.send(
                    build_request("POST", url, odd, b"{}", lambda: None), stream=True
                )
                await response.aread()
                await response.aclose()
        assert sent == [True]  # the body stream signalled that its last byte went out

    asyncio.run(main())
    assert b"\r\nX-Title: caf\xe9\r\n" in seen[1]
    assert b"\r\nX-Tag: a\r\nx-tag: b\r\n" in seen[2]
    head, body = seen[0].split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions?api-version=2024-10-21&x=a%2Fb%20c HTTP/1.1"
    names = [line.split(b":", 1)[0] for line in lines[1:]]
    # The client's headers, repeated ones included, and the framing; nothing of aiohttp's own.
    assert names == [b"host", b"Authorization", b"X-Custom", b"X-Custom", b"X-Title", b"content-length"]
    assert b"X-Custom: One\r\nX-Custom: two\r\nX-Title: Caf\xc3\xa9 \xe2\x98\x95\r\n" in head
    assert body == b'{"model": "gpt-4o",  "messages": []}'
    assert b"chunked" not in head.lower()


def test_the_raw_body_comes_back_still_compressed_and_de_chunked() -> None:
    payload = gzip.compress(b'{"usage": {"prompt_tokens": 3}}' * 50)
    chunks = [payload[:20], payload[20:]]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        head = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n"
        head += b"set-cookie: a=1; Path=/\r\nset-cookie: b=2; Path=/\r\nx-big: " + b"v" * 20_000 + b"\r\n\r\n"
        writer.write(head)
        for chunk in chunks:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        seen_second = await read_request(reader)  # the same connection, kept alive
        cookies.append(b"cookie:" in seen_second.lower())
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()
        writer.close()

    cookies: list[bool] = []

    async def main() -> None:
        async with raw_server(handler) as base, aiohttp_client() as client:
            for expected in (200, 204):
                request = build_request("POST", httpx.URL(base + "/v1/x"), [], b"{}", lambda: None)
                response = await client.send(request, stream=True)
                assert response.status_code == expected
                raw = b"".join([chunk async for chunk in response.aiter_raw()])
                await response.aclose()
                if expected == 200:
                    assert raw == payload
                    assert response.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; Path=/"]
                    assert len(response.headers["x-big"]) == 20_000

    asyncio.run(main())
    assert cookies == [False]  # one tenant's upstream cookies never reach the next request


async def expect(error: type[Exception], call: Callable[[], Awaitable[object]]) -> Exception:
    try:
        await call()
    except error as exc:
        return exc
    raise AssertionError(f"expected {error.__name__}")


def test_failures_arrive_as_httpx_errors() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    async def truncated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    async def main() -> None:
        async with aiohttp_client() as client:

            def send(base: str) -> Callable[[], Awaitable[httpx.Response]]:
                return lambda: client.send(
                    build_request("POST", httpx.URL(base + "/v1/x"), [], b"{}", lambda: None), stream=True
                )

            # Nothing listens on a port that was just closed: refused.
            async with raw_server(silent) as gone:
                pass
            await expect(httpx.ConnectError, send(gone))
            async with raw_server(silent) as base:
                await expect(httpx.ReadTimeout, send(base))  # upstream_timeout=2.0
            async with raw_server(truncated) as base:
                response = await send(base)()

                async def read_all() -> None:
                    async for _ in response.aiter_raw():
                        pass

                # A body cut short is a read error, which the relay turns into a broken stream.
                await expect(httpx.ReadError, read_all)
                await response.aclose()

    asyncio.run(main())


def test_the_upstream_client_is_chosen_and_refused_where_it_cannot_work() -> None:
    auto, aio, plain = (replace(Settings(), upstream_client=c) for c in ("auto", "aiohttp", "httpx"))
    assert upstream_client(auto, {}) == "aiohttp"
    assert upstream_client(plain, {}) == "httpx"
    # Only httpx's transport goes through a forward proxy configured in the environment.
    assert upstream_client(auto, {"HTTPS_PROXY": "http://127.0.0.1:3128"}) == "httpx"
    assert upstream_client(auto, {"https_proxy": " "}) == "aiohttp"
    with pytest.raises(
        ConfigError, match=r"^--upstream-client aiohttp does not go through the proxy in all_proxy"
    ):
        upstream_client(aio, {"all_proxy": "socks5://127.0.0.1:1080"})
    client = make_client(aio, env={})
    assert isinstance(client._transport, AiohttpTransport)
    assert not isinstance(make_client(plain, env={})._transport, AiohttpTransport)


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    request = [
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
    ]
    subprocess.run(
        [*request, "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command for a test certificate"
)
def test_tls_upstreams_are_verified_with_httpx_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()

    async def fetch(client: httpx.AsyncClient, port: int) -> bytes:
        url = httpx.URL(f"https://127.0.0.1:{port}/v1/x")
        response = await client.send(build_request("POST", url, [], b"{}", lambda: None), stream=True)
        body = await response.aread()
        await response.aclose()
        return body

    async def main(trusted: bool) -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        try:
            async with aiohttp_client() as client:
                if trusted:
                    assert await fetch(client, port) == b"ok"
                else:
                    # Not among the trusted roots: refused, as httpx's transport refuses it (502).
                    await expect(httpx.ConnectError, lambda: fetch(client, port))
        finally:
            server.close()

    asyncio.run(main(trusted=False))
    # SSL_CERT_FILE extends httpx's roots, and so the aiohttp client's (the same context).
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    asyncio.run(main(trusted=True))


def test_the_command_refuses_aiohttp_behind_a_forward_proxy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@127.0.0.1:3128")
    assert proxy_cmd.main(["--upstream-client", "aiohttp", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "cachewarden proxy: error: --upstream-client aiohttp does not go through the proxy in "
        "HTTPS_PROXY: use --upstream-client httpx (or leave it unset)\n"
    )
    assert proxy_cmd.main(["--upstream-client", "h2"]) == 2
    assert "argument --upstream-client: invalid choice: 'h2'" in capsys.readouterr().err
