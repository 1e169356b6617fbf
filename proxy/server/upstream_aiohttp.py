"""httpx's client API over aiohttp's connection pool and C HTTP/1.1 parser.

The forwarding process spends most of its CPU in the upstream hop; httpx's own transport parses
with h11, in Python. This transport keeps httpx as the API the proxy is written against
(``client.send(request, stream=True)``, ``aiter_raw``, ``httpx.TransportError``) and lets aiohttp
move the bytes: ``bench/bench_stack.py`` measures the difference. It is the default upstream
client (``--upstream-client``, cli/proxy.py decides), and where it differs from a general-purpose
client it does so to stay a transparent hop:

- nothing is added to the client's request: no ``User-Agent``, ``Accept``, ``Accept-Encoding`` or
  ``Content-Type`` of aiohttp's own, no cookies (one tenant's upstream cookies would reach
  another), no credentials from ``~/.netrc`` and no proxy from the environment (``trust_env``
  off: the auto choice keeps httpx's transport where a proxy is configured);
- the path and query go out exactly as the client sent them (no re-quoting), the headers in their
  order and spelling, the body as one write; the rare request aiohttp cannot send byte for byte (a
  header value that is not UTF-8, a name repeated in another case, a path that is not ASCII) goes
  through httpx's own transport instead; the response's body comes
  back still compressed (``auto_decompress`` off), de-chunked;
- aiohttp's failures are translated once, here, into the httpx exceptions the forwarder maps to
  502 / 504 and broken streams (forward.py): a timeout is a timeout, a reset or a truncated body
  a read error, a refused connection a connect error;
- TLS uses httpx's context (certifi, ``SSL_CERT_FILE``), so both clients trust the same roots.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import httpx
from multidict import CIMultiDict
from yarl import URL

# Headers aiohttp would add when the client sent none; a proxy adds none of its own.
_NO_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
# Response header lines up to 64 KiB (aiohttp's default is 8 KiB, below what h11 accepts).
_MAX_FIELD = 65536


@contextmanager
def httpx_errors(request: httpx.Request) -> Iterator[None]:
    """aiohttp's exceptions as the httpx ones they correspond to; the most specific first."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(_text(exc), request=request) from exc
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        raise httpx.ReadTimeout(_text(exc), request=request) from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(_text(exc), request=request) from exc
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        raise httpx.ReadError(_text(exc), request=request) from exc
    except aiohttp.InvalidURL as exc:
        raise httpx.UnsupportedProtocol(_text(exc), request=request) from exc
    except aiohttp.ClientError as exc:
        raise httpx.RemoteProtocolError(_text(exc), request=request) from exc


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _url(text: str) -> URL:
    # encoded=True: the client's percent-encoding is kept byte for byte (no re-quoting). Kept only
    # without a query, as forward.py's URLs: a query may hold a key.
    return URL(text, encoded=True) if "?" in text else _plain_url(text)


@functools.lru_cache(maxsize=256)
def _plain_url(text: str) -> URL:
    return URL(text, encoded=True)


@functools.lru_cache(maxsize=16)
def _timeout(connect: float | None, read: float | None, pool: float | None) -> aiohttp.ClientTimeout:
    # httpx's read timeout is the longest wait between two reads, as aiohttp's sock_read; its pool
    # timeout (waiting for a free connection) is aiohttp's connect, which includes that wait.
    return aiohttp.ClientTimeout(total=None, connect=pool, sock_connect=connect, sock_read=read)


def _headers(raw: list[tuple[bytes, bytes]]) -> CIMultiDict[str] | None:
    """The headers as aiohttp takes them, or None where it could not send them byte for byte: it
    writes header values as UTF-8, so a value that is not UTF-8 (latin-1 text, say) would change,
    and its session keeps only the last of two names that differ in case only."""
    out: CIMultiDict[str] = CIMultiDict()
    spelt: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1")
        if spelt.setdefault(key.lower(), key) != key:
            return None
        try:
            out.add(key, value.decode())
        except UnicodeDecodeError:
            return None
    return out


class _Body(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with httpx_errors(self._request):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        # A body not read to its end leaves the connection in an unknown state: close it.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session, created in the event loop of the first request (see the module doc)."""

    def __init__(self, *, keepalive_expiry: float = 60.0, ssl_context: ssl.SSLContext | None = None) -> None:
        self._keepalive = keepalive_expiry
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None
        # For the rare request aiohttp cannot send unchanged (``_headers``, a non-ASCII URL).
        self._fallback: httpx.AsyncHTTPTransport | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=0,  # no bound, as httpx.Limits(max_connections=None)
            keepalive_timeout=self._keepalive,
            ssl=self._ssl or httpx.create_ssl_context(),
        )
        return aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=_NO_AUTO_HEADERS,
            auto_decompress=False,
            trust_env=False,
            timeout=aiohttp.ClientTimeout(total=None),
            max_line_size=_MAX_FIELD,
            max_field_size=_MAX_FIELD,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._session
        if session is None:
            session = self._session = self._open()
        t: dict[str, Any] = request.extensions.get("timeout", {})
        headers = _headers(request.headers.raw)
        if headers is None or not request.url.raw_path.isascii():
            if self._fallback is None:
                self._fallback = httpx.AsyncHTTPTransport(
                    verify=self._ssl or True, limits=httpx.Limits(keepalive_expiry=self._keepalive)
                )
            return await self._fallback.handle_async_request(request)
        with httpx_errors(request):
            response = await session.request(
                request.method,
                _url(str(request.url)),
                headers=headers,
                # The request's own stream (forward.py's signals when its last byte went out); framed
                # by its Content-Length (a stream without one would go out chunked).
                data=request.stream if "content-length" in request.headers else None,
                allow_redirects=False,
                compress=None,
                timeout=_timeout(t.get("connect"), t.get("read"), t.get("pool")),
            )
        version = response.version
        http_version = f"HTTP/{version.major}.{version.minor}".encode() if version else b"HTTP/1.1"
        extensions: dict[str, Any] = {"http_version": http_version}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode("latin-1", "replace")
        return httpx.Response(
            response.status,
            headers=list(response.raw_headers),
            stream=_Body(response, request),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        fallback, self._fallback = self._fallback, None
        if fallback is not None:
            await fallback.aclose()
