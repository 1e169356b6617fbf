"""Decompressing a response body on the side, chunk by chunk, for the usage parser: br and zstd.

(gzip and deflate are zlib's, in ``usage``.) The relay forwards the bytes as they came; this only
reads a copy. ``brotli`` and ``zstandard`` are imported when first needed: without them a coding is
not decodable (``decoder`` returns None) and the usage ends as unparsed, never as an error.
A decoder stops at ``limit`` decompressed bytes (a small compressed body can expand enormously):
past it ``feed`` raises, which the tracker records as a failure, and the relay goes on untouched.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol


class Decoder(Protocol):
    def feed(self, chunk: bytes) -> bytes:
        """The decompressed bytes ``chunk`` completes (possibly none yet)."""


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class _Bounded:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._out = 0

    def _count(self, data: bytes) -> bytes:
        self._out += len(data)
        if self._out > self._limit:
            raise ValueError("decompressed body beyond the parse limit")
        return data


class _Brotli(_Bounded):
    def __init__(self, module: Any, limit: int) -> None:
        super().__init__(limit)
        self._d = module.Decompressor()

    def feed(self, chunk: bytes) -> bytes:
        # brotli >= 1.2 can cap one call's output; the rest waits in the decompressor for the next.
        try:
            data = self._d.process(chunk, output_buffer_limit=self._limit + 1 - self._out)
        except TypeError:
            data = self._d.process(chunk)
        return self._count(bytes(data))


class _Zstd(_Bounded):
    def __init__(self, module: Any, limit: int) -> None:
        super().__init__(limit)
        self._d = module.ZstdDecompressor().decompressobj()
        self._done = False

    def feed(self, chunk: bytes) -> bytes:
        if self._done:
            return b""
        data = bytes(self._d.decompress(chunk))
        # One frame per response; bytes after its end (never seen from a provider) are ignored.
        self._done = bool(getattr(self._d, "eof", False))
        return self._count(data)


def decoder(coding: str, limit: int) -> Decoder | None:
    """A side decoder for ``coding`` (``br`` or ``zstd``), or None when none can be made."""
    if coding == "br":
        module = _module("brotli")
        return None if module is None else _Brotli(module, limit)
    if coding == "zstd":
        module = _module("zstandard")
        return None if module is None else _Zstd(module, limit)
    return None
