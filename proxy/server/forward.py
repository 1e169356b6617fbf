"""Forwarding: the upstream client, header hygiene, error translation and the streamed relay.

Errors are translated once, here, at the boundary to the upstream (as httpx maps httpcore's)::

    UpstreamError                raised by map_upstream_errors(), answered in the provider's error shape
    ├── status 504  kind "timeout"    httpx.TimeoutException (connect, read, write, pool)
    └── status 502  kind "transport"  any other httpx.TransportError (refused, reset, protocol)
    StreamBroken                 the upstream failed after the response started: the client's
                                 connection is closed without the final chunk, so it sees a broken stream

Upstream 4xx / 5xx responses are not errors here: they are relayed unchanged.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Literal, Protocol

import anyio
import httpx
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.engine.usage import UsageTracker
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from .config import Settings
from .hooks import Flow

Family = Literal["openai", "anthropic"]

# RFC 9110 §7.6.1: meaningful for one connection only. Host and Content-Length are not hop-by-hop
# but are set by the client for the upstream connection, so they are not copied either; nor is
# Expect: the proxy has already read (and, via the server, answered "100 Continue" for) the body.
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)
_NOT_FORWARDED = HOP_BY_HOP | {b"host", b"content-length", b"expect"}


class UpstreamError(Exception):
    """The upstream could not be reached or did not answer in time; answered with ``status``."""

    def __init__(self, status: int, kind: Literal["timeout", "transport"], message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


class StreamBroken(Exception):
    """The upstream response failed after its headers were relayed to the client."""


@contextmanager
def map_upstream_errors(target: str) -> Iterator[None]:
    """Turns httpx transport failures into UpstreamError; the most specific class is matched first."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise UpstreamError(504, "timeout", f"upstream {target} timed out ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise UpstreamError(
            502, "transport", f"upstream {target} unreachable ({type(exc).__name__})"
        ) from exc


# -- headers ----------------------------------------------------------------------------------------


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    # Headers named in Connection are hop-by-hop too (RFC 9110 §7.6.1).
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }


def request_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The client's headers to send upstream: everything end-to-end, byte for byte."""
    drop = _NOT_FORWARDED | _connection_tokens(raw)
    return [(name, value) for name, value in raw if name.lower() not in drop]


def response_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's headers to relay: all but hop-by-hop (Content-Length and -Encoding stay: raw bytes)."""
    drop = HOP_BY_HOP | _connection_tokens(raw)
    return [(name.lower(), value) for name, value in raw if name.lower() not in drop]


# -- errors in the provider's own shape -------------------------------------------------------------

_ANTHROPIC_TYPES = {413: "request_too_large", 502: "api_error", 503: "overloaded_error", 504: "api_error"}
_OPENAI_TYPES = {
    413: ("invalid_request_error", "request_too_large"),
    502: ("server_error", "upstream_unreachable"),
}


def error_response(family: Family, status: int, message: str) -> Response:
    """An error the proxy itself answers, shaped like the provider's so the SDKs parse it."""
    body: dict[str, object]
    if family == "anthropic":
        body = {
            "type": "error",
            "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message},
        }
    else:
        kind, code = _OPENAI_TYPES.get(
            status, ("server_error", "upstream_timeout" if status == 504 else None)
        )
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Response(json.dumps(body).encode(), status_code=status, media_type="application/json")


# -- the client -------------------------------------------------------------------------------------


# The environment variables that route httpx's transport through a forward proxy (lower or upper case).
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def upstream_client(settings: Settings, env: Mapping[str, str]) -> Literal["aiohttp", "httpx"]:
    """What carries the upstream hop: aiohttp's pool and C parser under httpx's API
    (upstream_aiohttp.py; about a third less CPU a request, bench/bench_stack.py), unless
    ``--upstream-client httpx``, or a forward proxy is configured in the environment, which only
    httpx's transport honours. ``--upstream-client aiohttp`` where it cannot work: a ConfigError."""
    proxied = sorted(n for n, value in env.items() if n.lower() in _PROXY_VARIABLES and value.strip())
    installed = importlib.util.find_spec("aiohttp") is not None
    if settings.upstream_client == "httpx":
        return "httpx"
    if settings.upstream_client == "aiohttp":
        if not installed:
            raise ConfigError(
                "--upstream-client aiohttp: aiohttp is not installed (pip install 'cachewarden[proxy]')"
            )
        if proxied:
            raise ConfigError(
                f"--upstream-client aiohttp does not go through the proxy in {proxied[0]}: "
                "use --upstream-client httpx (or leave it unset)"
            )
        return "aiohttp"
    return "aiohttp" if installed and not proxied else "httpx"


def make_client(
    settings: Settings,
    transport: httpx.AsyncBaseTransport | None = None,
    env: Mapping[str, str] | None = None,
) -> httpx.AsyncClient:
    """The one connection pool of an app. Requests are built by ``build_request``, never with the
    client's default headers (which would add Accept-Encoding and User-Agent the client never sent).
    ``transport`` replaces the network (tests); otherwise ``upstream_client`` chooses it."""
    if transport is None and upstream_client(settings, os.environ if env is None else env) == "aiohttp":
        from .upstream_aiohttp import AiohttpTransport

        transport = AiohttpTransport(keepalive_expiry=60)
    timeout = httpx.Timeout(
        settings.upstream_timeout, connect=min(settings.connect_timeout, settings.upstream_timeout)
    )
    # Reject every cookie: a shared jar would carry one tenant's upstream cookies to another.
    jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=100, keepalive_expiry=60)
    return httpx.AsyncClient(
        transport=transport, timeout=timeout, limits=limits, cookies=jar, follow_redirects=False, http2=False
    )


class _SignalledBody(httpx.AsyncByteStream):
    """The request body; calls ``on_sent`` once the last byte has been handed to the connection."""

    def __init__(self, body: bytes, on_sent: Callable[[], None]) -> None:
        self._body = body
        self._on_sent = on_sent

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._body:
            yield self._body
        self._on_sent()


def build_request(
    method: str, url: httpx.URL, headers: list[tuple[bytes, bytes]], body: bytes, on_sent: Callable[[], None]
) -> httpx.Request:
    # stream= disables every automatic header, so Host and Content-Length are set here, once.
    framing = (
        [(b"content-length", str(len(body)).encode())] if body or method in ("POST", "PUT", "PATCH") else []
    )
    return httpx.Request(
        method, url, headers=[(b"host", url.netloc), *headers, *framing], stream=_SignalledBody(body, on_sent)
    )


def upstream_url(base: str, raw_path: bytes, query: bytes) -> httpx.URL:
    """``base`` (configured, may carry a path prefix) + the client's path and query, still percent-encoded."""
    if not query:
        return _upstream_url(base, raw_path)
    return _join(base, raw_path + b"?" + query)


# Building an httpx.URL parses it (~30-100 µs, a few percent of a hop's CPU); a proxy sends nearly
# every request to one of a few URLs. Those without a query are kept (a query may hold a key).
@functools.lru_cache(maxsize=256)
def _upstream_url(base: str, raw_path: bytes) -> httpx.URL:
    return _join(base, raw_path)


def _join(base: str, raw_path: bytes) -> httpx.URL:
    url = httpx.URL(base)
    return url.copy_with(raw_path=url.raw_path.split(b"?", 1)[0].rstrip(b"/") + raw_path)


# -- the relay --------------------------------------------------------------------------------------


async def _replay(content: bytes) -> AsyncIterator[bytes]:
    yield content


class ChunkEditor(Protocol):
    """Rewrites a response body on its way to the client (optimize mode only; see proxy/optimize.py)."""

    def feed(self, chunk: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


async def relay(
    resp: httpx.Response, flow: Flow, tracker: UsageTracker | None, editor: ChunkEditor | None = None
) -> AsyncIterator[bytes]:
    """The upstream's raw (still compressed) body chunks, as they arrive, teed into the usage tracker.

    The tracker reads the upstream's bytes; an ``editor`` changes only what the client receives.
    """
    # A response built in memory (MockTransport, respx) arrives already read: relay its content.
    chunks = _replay(resp.content) if resp.is_stream_consumed else resp.aiter_raw()
    try:
        async for chunk in chunks:
            if flow.timings.first_byte is None:
                flow.timings.first_byte = time.perf_counter()
            if tracker is not None:
                tracker.feed(chunk)
                flow.response_ended = tracker.stream_ended
            if editor is not None:
                chunk = editor.feed(chunk)
                if not chunk:
                    continue  # an empty body message would still be sent: skip it
            yield chunk
        if editor is not None and (rest := editor.flush()):
            yield rest
    except httpx.HTTPError as exc:
        flow.error = f"upstream stream broke: {type(exc).__name__}"
        raise StreamBroken(flow.error) from exc


class RelayResponse(StreamingResponse):
    """A StreamingResponse whose background task (closing the upstream response) runs on every exit:
    completion, a broken upstream, and cancellation when the client disconnects. The caller watches
    for the disconnect, so this class never reads ``receive``."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.stream_response(send)
        finally:
            # Shielded: on cancellation the upstream connection must still be closed, at once.
            with anyio.CancelScope(shield=True):
                if self.background is not None:
                    await self.background()
