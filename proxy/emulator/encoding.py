"""Compressed responses, as the providers' edges send them to clients that accept compression.

The client's ``Accept-Encoding`` picks the coding: the highest ``q`` among those the emulator can
write, ties broken by zstd, then br, then gzip (the order a CDN prefers them in); ``identity`` or
nothing accepted means plain bytes. zstd and br need the ``zstandard`` and ``brotli`` packages; a
coding whose package is missing is never chosen. A stream is compressed event by event and flushed
after each, so that the client reads every event when it is sent, as through a real edge.
"""

from __future__ import annotations

import importlib
import zlib
from typing import Any, Protocol

_PREFERENCE = ("zstd", "br", "gzip")


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_zstd = _module("zstandard")
_brotli = _module("brotli")


def available() -> tuple[str, ...]:
    """The codings this process can write."""
    return tuple(c for c in _PREFERENCE if c == "gzip" or (c == "br" and _brotli) or (c == "zstd" and _zstd))


def choose(accept: str | None) -> str | None:
    """The coding for a response to a request with this ``Accept-Encoding`` (None: identity)."""
    if not accept:
        return None
    weights: dict[str, float] = {}
    for item in accept.split(","):
        name, _, params = item.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        weights[name.strip().lower()] = q
    star = weights.get("*", 0.0)
    best: tuple[float, int, str] | None = None
    for rank, coding in enumerate(available()):
        q = weights.get(coding, star)
        if q > 0 and (best is None or (q, -rank) > (best[0], best[1])):
            best = (q, -rank, coding)
    return None if best is None else best[2]


class Encoder(Protocol):
    def chunk(self, data: bytes) -> bytes:
        """``data`` compressed and flushed: the client can decode all of it now."""

    def finish(self) -> bytes:
        """The end of the compressed stream."""


class _Gzip:
    def __init__(self) -> None:
        self._z = zlib.compressobj(6, zlib.DEFLATED, 31)

    def chunk(self, data: bytes) -> bytes:
        return self._z.compress(data) + self._z.flush(zlib.Z_SYNC_FLUSH)

    def finish(self) -> bytes:
        return self._z.flush(zlib.Z_FINISH)


class _Brotli:
    def __init__(self) -> None:
        self._c = _brotli.Compressor()

    def chunk(self, data: bytes) -> bytes:
        out: bytes = self._c.process(data) + self._c.flush()
        return out

    def finish(self) -> bytes:
        out: bytes = self._c.finish()
        return out


class _Zstd:
    def __init__(self) -> None:
        self._c = _zstd.ZstdCompressor().compressobj()

    def chunk(self, data: bytes) -> bytes:
        out: bytes = self._c.compress(data) + self._c.flush(_zstd.COMPRESSOBJ_FLUSH_BLOCK)
        return out

    def finish(self) -> bytes:
        out: bytes = self._c.flush(_zstd.COMPRESSOBJ_FLUSH_FINISH)
        return out


def encoder(coding: str) -> Encoder:
    if coding == "gzip":
        return _Gzip()
    if coding == "br":
        return _Brotli()
    if coding == "zstd":
        return _Zstd()
    raise ValueError(f"cannot write content-coding {coding!r}")


def compress(coding: str, data: bytes) -> bytes:
    """A whole body in one coding."""
    enc = encoder(coding)
    return enc.chunk(data) + enc.finish()
