"""Image tokens by OpenAI's documented rules (vision guide, "Calculating costs": its worked examples)."""

from __future__ import annotations

import base64
import struct
import zlib

from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.images import image_tokens, size_of_data_url, size_of_image


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))


def test_tile_rule_worked_examples() -> None:
    # "A 1024 x 1024 square image in detail: high mode costs 765 tokens" (4 tiles: 85 + 4 x 170).
    assert image_tokens("gpt-4o", "high", (1024, 1024)) == 765
    # "A 2048 x 4096 image in detail: high mode costs 1105 tokens" (768 x 1536: 6 tiles).
    assert image_tokens("gpt-4o", "high", (2048, 4096)) == 1105
    # "A 4096 x 8192 image in detail: low most costs 85 tokens".
    assert image_tokens("gpt-4o", "low", (4096, 8192)) == 85
    assert image_tokens("gpt-4o-mini", "low", (512, 512)) == 2833
    assert image_tokens("gpt-4o-mini", "high", (512, 512)) == 2833 + 5667


def test_patch_rule_worked_examples() -> None:
    # "1024 x 1024 → 1024 patches"; "1800 x 2400 → 1452 patches" (scaled down to fit 1,536), times
    # the model's multiplier (gpt-4.1-mini 1.62, gpt-4.1-nano 2.46), rounded up.
    assert image_tokens("gpt-4.1-mini", "auto", (1024, 1024)) == 1659
    assert image_tokens("gpt-4.1-nano", "auto", (1800, 2400)) == 3572


def test_sizes_from_headers() -> None:
    assert size_of_image(png(640, 480)) == (640, 480)
    assert size_of_image(b"GIF89a" + struct.pack("<HH", 33, 44)) == (33, 44)
    jpeg = (
        b"\xff\xd8"
        + b"\xff\xe0\x00\x10"
        + b"\x00" * 14
        + b"\xff\xc0\x00\x11\x08"
        + struct.pack(">HH", 300, 200)
    )
    assert size_of_image(jpeg + b"\x00" * 16) == (200, 300)
    url = "data:image/png;base64," + base64.b64encode(png(2048, 4096)).decode()
    assert size_of_data_url(url) == (2048, 4096)
    assert size_of_data_url("https://example.com/cat.png") is None


def test_adapter_counts_an_inline_image_by_its_size() -> None:
    url = "data:image/png;base64," + base64.b64encode(png(2048, 4096)).decode()
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}],
    }
    (image,) = [s for s in parse_request(body).segments if s.kind == "image"]
    assert image.fixed_tokens == 1105
    remote = {"type": "image_url", "image_url": {"url": "https://example.com/x.png", "detail": "low"}}
    body["messages"][0]["content"] = [remote]  # type: ignore[index]
    (image,) = [s for s in parse_request(body).segments if s.kind == "image"]
    assert image.fixed_tokens == 85
