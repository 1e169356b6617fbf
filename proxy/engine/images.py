"""OpenAI image input tokens by the documented rules, from the image's own header when it is inline.

OpenAI's vision guide ("Calculating costs") prices an image by its size:

- tile models (GPT-4o, GPT-4.1, GPT-4.5, o1, o3, ...): ``detail: "low"`` costs the base tokens; else
  the image is scaled to fit in 2048 x 2048, then so that its shortest side is 768 px, and every
  512 px tile costs ``tile`` tokens on top of the base (GPT-4o: 85 + 170 per tile, so 1024 x 1024 is
  765; GPT-4o mini: 2,833 + 5,667 per tile);
- patch models (GPT-4.1 mini / nano, o4-mini, GPT-5 mini / nano): 32 x 32 px patches, at most 1,536
  (the image is scaled down until it fits), times a per-model multiplier.

A ``data:`` URL carries the image: its width and height are read from the PNG / GIF / JPEG / WebP
header (only the first few KiB are decoded). A remote URL or a file id is fetched by the provider:
its size is unknown here, and the documented 1024 x 1024 estimate stands in for it.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

# (model prefix, base, per tile) for tile models; the longest prefix wins.
_TILES: tuple[tuple[str, int, int], ...] = (
    ("gpt-4o-mini", 2833, 5667),
    ("gpt-4o", 85, 170),
    ("gpt-4.1", 85, 170),
    ("gpt-4.5", 85, 170),
    ("chatgpt-4o", 85, 170),
    ("o1", 75, 150),
    ("o3", 75, 150),
    ("gpt-5", 70, 140),
    ("computer-use", 65, 129),
)
# (model prefix, multiplier) for patch models.
_PATCHES: tuple[tuple[str, float], ...] = (
    ("gpt-4.1-mini", 1.62),
    ("gpt-4.1-nano", 2.46),
    ("o4-mini", 1.72),
    ("gpt-5-mini", 1.62),
    ("gpt-5-nano", 2.46),
)
DEFAULT_SIZE = (1024, 1024)  # the guide's worked example; used when the size is unknown
_HEADER_CHARS = 64 * 1024  # base64 characters decoded to find the size (JPEG: after EXIF)


def _longest(model: str, prefixes: list[str]) -> int:
    """Index of the longest prefix of ``model`` in ``prefixes``, or -1."""
    best = -1
    for i, prefix in enumerate(prefixes):
        if model.startswith(prefix) and (best < 0 or len(prefix) > len(prefixes[best])):
            best = i
    return best


def image_tokens(model: str, detail: object, size: tuple[int, int] | None) -> int:
    """Input tokens of one image for ``model`` (see the module doc)."""
    name = model.lower()
    width, height = size or DEFAULT_SIZE
    patch = _longest(name, [row[0] for row in _PATCHES])
    tile = _longest(name, [row[0] for row in _TILES])
    if patch >= 0 and (tile < 0 or len(_PATCHES[patch][0]) >= len(_TILES[tile][0])):
        return math.ceil(_patches(width, height) * _PATCHES[patch][1])
    _, base, per_tile = _TILES[tile] if tile >= 0 else ("", 85, 170)
    if detail == "low":
        return base
    return base + per_tile * _tiles(width, height)


def _tiles(width: int, height: int) -> int:
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    return math.ceil(w / 512) * math.ceil(h / 512)


def _patches(width: int, height: int) -> int:
    w, h = float(width), float(height)
    raw = math.ceil(w / 32) * math.ceil(h / 32)
    if raw <= 1536:
        return raw
    # Scale so that the patches fit the budget, then so that the width is a whole number of patches.
    shrink = math.sqrt(32 * 32 * 1536 / (w * h))
    w, h = w * shrink, h * shrink
    shrink *= math.floor(w / 32) / (w / 32)
    w, h = width * shrink, height * shrink
    return min(1536, math.ceil(w / 32) * math.ceil(h / 32))


def size_of_data_url(url: str) -> tuple[int, int] | None:
    """Width and height of an inline (``data:...;base64,``) image, or None."""
    if not url.startswith("data:"):
        return None
    head, _, payload = url.partition(",")
    if ";base64" not in head:
        return None
    chunk = payload[:_HEADER_CHARS]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        data = base64.b64decode(chunk, validate=False)
    except (binascii.Error, ValueError):
        return None
    return size_of_image(data)


def size_of_image(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, WebP or JPEG header (None when it is none of these)."""
    try:
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return int(w), int(h)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", data[6:10])
            return int(w), int(h)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data)
        if data[:2] == b"\xff\xd8":
            return _jpeg(data)
    except struct.error:
        return None
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if kind == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return int(w) & 0x3FFF, int(h) & 0x3FFF
    return None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        # Start of frame (baseline, progressive, ...; not DHT 0xC4, JPG 0xC8, DAC 0xCC).
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(w), int(h)
        i += 2 + length
    return None
