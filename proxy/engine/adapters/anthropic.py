"""Anthropic Messages body -> Prompt (``tools[i]`` -> ``system`` -> ``messages[i].content[j]``).

Breakpoints (``cache_control``) become Segment.cache_control / Prompt.auto_cache and never enter a
segment's text or digest: moving a breakpoint is metadata, not a prompt change.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from typing import Any

from cachewarden.proxy.engine.prompt import Prompt, Segment, SegmentKind

from ._body import (
    Obj,
    as_list,
    as_obj,
    at,
    block_type,
    cache_control,
    canonical,
    compact,
    content_digest,
    opt_bool,
    opt_list,
    opt_obj,
    opt_str,
    read_model,
    req_list,
    req_str,
    strip_meta,
    strip_meta_deep,
)
from ._items import Carry, Resume, carried_in, earlier_head, read_items

# Anthropic bills an image about (width * height) / 750 tokens, and scales images down to about
# 1.15 megapixels first, so ~1600 tokens is the ceiling. Without readable dimensions (URL or file
# sources, formats other than PNG/JPEG) the ceiling is the documented default: it over-predicts
# rather than hides cost.
IMAGE_TOKENS_DEFAULT = 1600
IMAGE_PIXELS_PER_TOKEN = 750
# Enough base64 to reach a JPEG's SOF marker past typical EXIF/ICC headers, small enough to stay cheap.
JPEG_HEADER_B64_CHARS = 96 * 1024

PARAM_OBJECTS = ("tool_choice", "thinking", "context_management", "output_config", "output_format")


class _Flags:
    """What blocks reveal about request-level settings (citations on any document).

    Kept in the items' carried state, so that a body read from where it differs from the previous
    one (``read_items``) knows what the items it did not read revealed.
    """

    __slots__ = ("carry",)
    _CITATIONS = "\x00citations"
    _DEFERRED = "\x00deferred\x00"

    def __init__(self, carry: Carry | None = None) -> None:
        self.carry = carry if carry is not None else Carry()

    @property
    def citations(self) -> bool:
        return self._CITATIONS in self.carry

    @citations.setter
    def citations(self, on: bool) -> None:
        if on and not self.citations:
            self.carry[self._CITATIONS] = "on"

    def deferred(self, name: object) -> str | None:
        """The definition of deferred tool ``name`` (``defer_loading``), as a tool_reference loads it."""
        return self.carry.get(self._DEFERRED + name) if isinstance(name, str) else None

    def defer(self, name: str, definition: str) -> None:
        self.carry[self._DEFERRED + name] = definition


def _png_size(head: bytes) -> tuple[int, int] | None:
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR" or len(head) < 24:
        return None
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    if data[:2] != b"\xff\xd8":
        return None
    pos = 2
    while pos + 9 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        # SOF0..SOF15 carry the frame size; C4 (DHT), C8 (JPG), CC (DAC) share the range but do not.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return int(width), int(height)
        pos += 2 + length
    return None


def image_tokens(source: Any) -> int:
    """Estimated tokens of an image block from its base64 header, or the documented default."""
    if not isinstance(source, Mapping) or source.get("type") != "base64":
        return IMAGE_TOKENS_DEFAULT
    data = source.get("data")
    if not isinstance(data, str):
        return IMAGE_TOKENS_DEFAULT
    try:
        head = data[:JPEG_HEADER_B64_CHARS]
        raw = base64.b64decode(head[: len(head) - len(head) % 4])
    except (binascii.Error, ValueError):
        return IMAGE_TOKENS_DEFAULT
    size = _png_size(raw) or _jpeg_size(raw)
    if size is None or size[0] <= 0 or size[1] <= 0:
        return IMAGE_TOKENS_DEFAULT
    return max(1, min(IMAGE_TOKENS_DEFAULT, round(size[0] * size[1] / IMAGE_PIXELS_PER_TOKEN)))


def _document_text(block: Obj, path: str, flags: _Flags) -> str:
    """The text a document contributes when it is given as text; PDFs/files are counted elsewhere."""
    citations = opt_obj(block, "citations", path)
    if citations is not None and citations.get("enabled") is True:
        flags.citations = True
    source = opt_obj(block, "source", path)
    if source is None:
        return ""
    src_path = at(path, "source")
    kind = opt_str(source, "type", src_path)
    if kind == "text":
        return opt_str(source, "data", src_path) or ""
    if kind == "content":
        text, _ = _flatten(source.get("content"), at(src_path, "content"), flags)
        return text
    return ""


def _flatten(value: Any, path: str, flags: _Flags) -> tuple[str, int]:
    """Text and fixed tokens of nested content (tool_result, document, search_result), in order."""
    if value is None:
        return "", 0
    if isinstance(value, str):
        return value, 0
    texts: list[str] = []
    fixed = 0
    for k, item in enumerate(as_list(value, path)):
        item_path = at(path, k)
        block = as_obj(item, item_path)
        kind = block_type(block, item_path)
        if kind == "text":
            texts.append(req_str(block, "text", item_path))
        elif kind == "image":
            fixed += image_tokens(block.get("source"))
        elif kind == "document":
            texts.append(_document_text(block, item_path, flags))
        elif kind == "search_result":
            inner, inner_fixed = _flatten(block.get("content"), at(item_path, "content"), flags)
            texts.extend(t for t in (opt_str(block, "title", item_path), inner) if t)
            fixed += inner_fixed
        elif kind == "tool_reference" and (loaded := flags.deferred(block.get("tool_name"))) is not None:
            # A deferred tool found by a tool search: its definition is loaded here, where it is referenced.
            texts.append(loaded)
        else:
            texts.append(compact(strip_meta(block)))
    return "\n".join(texts), fixed


def _block_segment(value: Any, path: str, role: str | None, index: int | None, flags: _Flags) -> Segment:
    block = as_obj(value, path)
    kind = block_type(block, path)
    mark = cache_control(block, path)
    if kind == "text":
        text_kind: SegmentKind = "system" if role in (None, "system") else "text"
        return Segment(path, text_kind, req_str(block, "text", path), role, index, mark)
    identity = compact(strip_meta(block))
    if kind == "image":
        tokens = image_tokens(block.get("source"))
        return Segment(
            path, "image", "", role, index, mark, tokens, digest=content_digest("image", role, "", identity)
        )
    if kind == "document":
        text = _document_text(block, path, flags)
        return Segment(
            path, "document", text, role, index, mark, digest=content_digest("document", role, text, identity)
        )
    if kind == "tool_use":
        name = req_str(block, "name", path)
        # Input keeps the client's key order: a reordered input is a different prompt (a cache bust).
        text = f"{name}\n{compact(block.get('input', {}))}"
        return Segment(path, "tool_use", text, role, index, mark, name=name)
    if kind == "tool_result":
        text, fixed = _flatten(block.get("content"), at(path, "content"), flags)
        if opt_bool(block, "is_error", path):
            text = f"[is_error]\n{text}"
        # Images inside a result are not in its text: hash the blocks too (minus breakpoints, at any level).
        digest = content_digest("tool_result", role, text, compact(strip_meta_deep(block))) if fixed else ""
        return Segment(path, "tool_result", text, role, index, mark, fixed, digest=digest)
    if kind == "thinking":
        # The signature only authenticates the block; it is not prompt content.
        return Segment(path, "thinking", opt_str(block, "thinking", path) or "", role, index, mark)
    if kind == "redacted_thinking":
        return Segment(path, "thinking", opt_str(block, "data", path) or "", role, index, mark)
    label = block.get("name")
    return Segment(path, "other", identity, role, index, mark, name=label if isinstance(label, str) else None)


def _tool_segment(value: Any, path: str) -> Segment:
    tool = as_obj(value, path)
    name = req_str(tool, "name", path)
    return Segment(
        path, "tool", compact(strip_meta(tool)), name=name, cache_control=cache_control(tool, path)
    )


def _params(body: Obj, flags: _Flags) -> tuple[tuple[str, str], ...]:
    """Parameters that invalidate the system or message cache (provider-caching.md §2.4, §2.7)."""
    params: dict[str, str] = {}
    for key in PARAM_OBJECTS:
        value = opt_obj(body, key, "")
        if value is not None:
            params[key] = canonical(value)
    speed = opt_str(body, "speed", "")
    if speed is not None:
        params["speed"] = speed
    for tool in opt_list(body, "tools", "") or []:
        tool_type = tool.get("type") if isinstance(tool, Mapping) else None
        if isinstance(tool_type, str) and tool_type.startswith("web_search"):
            params["web_search"] = "on"
    if flags.citations:
        params["citations"] = "on"
    return tuple(sorted(params.items()))


def _message_segments(value: Any, i: int, carry: Carry) -> list[Segment]:
    """Segments of ``messages[i]`` (what documents reveal about citations goes into ``carry``)."""
    path = at("messages", i)
    message = as_obj(value, path)
    role = req_str(message, "role", path)
    content = message.get("content")
    content_path = at(path, "content")
    if isinstance(content, str):
        kind: SegmentKind = "system" if role == "system" else "message"
        return [Segment(content_path, kind, content, role, i)]
    blocks = as_list(content, content_path) if content is not None else []
    if not blocks:
        # An empty message still has a boundary in the rendered prompt.
        return [Segment(content_path, "message", "", role, i)]
    flags = _Flags(carry)
    return [_block_segment(block, at(content_path, j), role, i, flags) for j, block in enumerate(blocks)]


def parse_anthropic(body: Obj, model: str | None = None, resume: Resume | None = None) -> Prompt:
    """Read a Messages body (``model`` is the fallback when the body has none, e.g. Bedrock invoke);
    ``resume`` reads the messages from where they differ from the previous body's (``read_items``)."""
    previous = resume.previous if resume is not None else None
    reused = earlier_head(body, resume, _HEAD_KEYS)
    if reused is not None and previous is not None:
        # The state the head left for the items (deferred tools, citations): the earlier run's.
        flags = _Flags(carried_in(previous))
        head = list(reused)
    else:
        flags, head = _head(body)
    segments, carried, run = read_items(
        req_list(body, "messages", ""),
        _message_segments,
        context="anthropic",
        carry=flags.carry,
        previous=previous,
    )
    if resume is not None:
        resume.run = run
    flags.citations = flags.citations or _Flags(carried).citations
    return Prompt(
        provider="anthropic",
        model=read_model(body, model),
        segments=(*head, *segments),
        params=_params(body, flags),
        auto_cache=cache_control(body, ""),
        stream=bool(opt_bool(body, "stream", "")),
    )


# Every field the head (what precedes the messages' segments) is read from.
_HEAD_KEYS = ("tools", "system")


def _head(body: Obj) -> tuple[_Flags, list[Segment]]:
    """The tools' and system prompt's segments, and what they reveal to the messages (``_Flags``)."""
    flags = _Flags()
    head: list[Segment] = []
    for i, value in enumerate(opt_list(body, "tools", "") or []):
        tool = _tool_segment(value, at("tools", i))
        if isinstance(value, Mapping) and value.get("defer_loading") is True and tool.name is not None:
            # Tool search: a deferred tool is not in the prompt (nor in its cached prefix) until a
            # tool_reference loads it (platform.claude.com/docs/en/agents-and-tools/tool-use/tool-search-tool;
            # pydantic-ai test_tool_search_eval[anthropic].yaml#1: 887 reported, 887 counted without it).
            loaded = {k: v for k, v in strip_meta(value).items() if k != "defer_loading"}
            flags.defer(tool.name, compact(loaded))
        else:
            head.append(tool)
    system = body.get("system")
    if isinstance(system, str):
        head.append(Segment("system", "system", system))
    elif system is not None:
        for i, block in enumerate(as_list(system, "system")):
            head.append(_block_segment(block, at("system", i), None, None, flags))
    return flags, head
