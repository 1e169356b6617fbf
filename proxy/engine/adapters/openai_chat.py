"""OpenAI Chat Completions body -> Prompt (tools, then the output schema, then messages).

Also holds what the Responses adapter shares with it: tool segments, image token estimates and the
cache-affecting parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from cachewarden.proxy.engine.images import image_tokens as documented_image_tokens
from cachewarden.proxy.engine.images import size_of_data_url
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
)
from ._items import Carry, Resume, earlier_head, read_items

# OpenAI images: the documented rules per model (engine/images.py), from the image's own header
# when it is inline; 85 / 765 are GPT-4o's low detail and 1024 x 1024 figures.
IMAGE_TOKENS_LOW = 85
IMAGE_TOKENS_DEFAULT = 765

SYSTEM_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})


def image_tokens(detail: Any, model: str = "gpt-4o", url: Any = None) -> int:
    """Tokens of one image: by the model's documented rule, sized from an inline image's header."""
    size = size_of_data_url(url) if isinstance(url, str) else None
    return documented_image_tokens(model, detail, size)


def text_kind(role: str | None) -> SegmentKind:
    """Kind of a text part by the role of its message: instructions and tool output stay recognisable."""
    if role in SYSTEM_ROLES:
        return "system"
    if role in TOOL_ROLES:
        return "tool_result"
    return "text"


def whole_kind(role: str | None) -> SegmentKind:
    """Kind of a message whose content is one string."""
    kind = text_kind(role)
    return "message" if kind == "text" else kind


def tool_call_text(name: str, arguments: str) -> str:
    """Text of a tool call: the function name, a newline, the arguments string exactly as sent."""
    return f"{name}\n{arguments}"


def tool_segments(body: Obj, name_of: Callable[[Obj, str], str]) -> list[Segment]:
    """One segment per ``tools[i]``: the element's compact JSON in its own key order."""
    tools = opt_list(body, "tools", "")
    segments: list[Segment] = []
    for i, item in enumerate(tools or []):
        path = at("tools", i)
        tool = as_obj(item, path)
        segments.append(
            Segment(
                path=path,
                kind="tool",
                text=compact(strip_meta(tool)),
                name=name_of(tool, path),
                cache_control=cache_control(tool, path),
            )
        )
    return segments


def schema_segment(spec: Obj | None, path: str) -> Segment | None:
    """The structured-output schema (a ``json_schema`` format), which OpenAI renders before instructions."""
    if spec is None or block_type(spec, path) != "json_schema":
        return None
    inner = spec.get("json_schema")
    holder = as_obj(inner, at(path, "json_schema")) if inner is not None else spec
    return Segment(path=path, kind="schema", text=compact(spec), name=opt_str(holder, "name", path))


def forced_function(body: Obj) -> str | None:
    """The function ``tool_choice`` forces (Chat nests the name under "function", Responses not);
    legacy ``function_call: {"name": ...}`` too. ``allowed_tools`` and "required" force no one name."""
    for key in ("tool_choice", "function_call"):
        choice = body.get(key)
        if isinstance(choice, Mapping) and choice.get("type", "function") == "function":
            inner = choice.get("function")
            name = inner.get("name") if isinstance(inner, Mapping) else choice.get("name")
            if isinstance(name, str):
                return name
    return None


def openai_params(body: Obj, effort: str | None) -> tuple[tuple[str, str], ...]:
    """Cache-affecting parameters (reasoning effort changes the rendered prompt; retention the cache)."""
    params: dict[str, str] = {}
    if effort is not None:
        params["reasoning_effort"] = effort
    retention = opt_str(body, "prompt_cache_retention", "")
    if retention is not None:
        params["prompt_cache_retention"] = retention
    options = opt_obj(body, "prompt_cache_options", "")
    if options is not None:
        params["prompt_cache_options"] = canonical(options)
    return tuple(sorted(params.items()))


def _chat_tool_name(tool: Obj, path: str) -> str:
    kind = block_type(tool, path)
    # {"type": "function", "function": {...}} and {"type": "custom", "custom": {...}} nest the name.
    inner = tool.get(kind)
    if kind in ("function", "custom") or inner is not None:
        return req_str(as_obj(inner, at(path, kind)), "name", at(path, kind))
    return opt_str(tool, "name", path) or kind


def _part_segment(part_value: Any, path: str, role: str, index: int, model: str) -> Segment:
    part = as_obj(part_value, path)
    kind = block_type(part, path)
    mark = cache_control(part, path)
    if kind == "text":
        text = req_str(part, "text", path)
        return Segment(path, text_kind(role), text, role, index, mark)
    if kind == "refusal":
        return Segment(path, "text", req_str(part, "refusal", path), role, index, mark)
    identity = compact(strip_meta(part))
    if kind == "image_url":
        image = part.get("image_url")
        detail = image.get("detail") if isinstance(image, Mapping) else None
        url = image.get("url") if isinstance(image, Mapping) else image
        return Segment(
            path,
            "image",
            "",
            role,
            index,
            mark,
            image_tokens(detail, model, url),
            digest=content_digest("image", role, "", identity),
        )
    if kind == "file":
        return Segment(
            path, "document", "", role, index, mark, digest=content_digest("document", role, "", identity)
        )
    if kind == "input_audio":
        return Segment(
            path, "other", "", role, index, mark, digest=content_digest("other", role, "", identity)
        )
    # Unknown part types: forward compatible, their JSON stands for their content.
    return Segment(path, "other", identity, role, index, mark)


def _tool_call_segment(call_value: Any, path: str, role: str, index: int) -> Segment:
    call = as_obj(call_value, path)
    kind = opt_str(call, "type", path) or "function"
    inner = call.get(kind)
    if inner is None:
        return Segment(path, "other", compact(strip_meta(call)), role, index)
    fn = as_obj(inner, at(path, kind))
    name = req_str(fn, "name", at(path, kind))
    # Arguments stay the string the client sent: re-serialising would hide key-order and escaping changes.
    arguments = opt_str(fn, "arguments", at(path, kind))
    if arguments is None:
        arguments = opt_str(fn, "input", at(path, kind)) or ""
    return Segment(path, "tool_use", tool_call_text(name, arguments), role, index, name=name)


def _content_segments(
    message: Obj, path: str, role: str, index: int, model: str, *, empty: bool = True
) -> list[Segment]:
    """The segments of a message's ``content`` (a string or parts); an empty one when ``empty`` and none."""
    content = message.get("content")
    if isinstance(content, str):
        return [Segment(path, whole_kind(role), content, role, index)]
    segments: list[Segment] = []
    if content is not None:
        parts = as_list(content, at(path, "content"))
        for j, part in enumerate(parts):
            segments.append(_part_segment(part, at(at(path, "content"), j), role, index, model))
    if not segments and empty:
        segments.append(Segment(path, whole_kind(role), "", role, index))
    return segments


def _message_segments(value: Any, index: int, calls: dict[str, str], model: str) -> list[Segment]:
    """Segments of ``messages[index]``; ``calls`` maps tool-call ids seen so far to function names."""
    path = at("messages", index)
    message = as_obj(value, path)
    role = req_str(message, "role", path)
    segments: list[Segment] = []
    name = opt_str(message, "name", path)
    if role in TOOL_ROLES:
        # A tool result is rendered under the name of the function that produced it (the author of
        # the message is "functions.NAME"): from its call id, or the legacy role=function ``name``.
        call_id = opt_str(message, "tool_call_id", path)
        result_name = calls.get(call_id, name) if call_id is not None else name
        return [replace(s, name=result_name) for s in _content_segments(message, path, role, index, model)]
    if name is not None:
        # The author name is rendered in the message header: its own segment keeps it in the digests.
        segments.append(Segment(at(path, "name"), "other", name, role, index))
    segments.extend(_content_segments(message, path, role, index, model, empty=False))
    refusal = opt_str(message, "refusal", path)
    if refusal is not None:
        segments.append(Segment(at(path, "refusal"), "text", refusal, role, index))
    for k, call in enumerate(opt_list(message, "tool_calls", path) or []):
        segment = _tool_call_segment(call, at(at(path, "tool_calls"), k), role, index)
        call_id = opt_str(as_obj(call, at(at(path, "tool_calls"), k)), "id", path)
        if call_id is not None and segment.name is not None:
            calls[call_id] = segment.name
        segments.append(segment)
    legacy = opt_obj(message, "function_call", path)
    if legacy is not None:
        fn_path = at(path, "function_call")
        fn_name = req_str(legacy, "name", fn_path)
        arguments = opt_str(legacy, "arguments", fn_path) or ""
        segments.append(
            Segment(fn_path, "tool_use", tool_call_text(fn_name, arguments), role, index, name=fn_name)
        )
    audio = opt_obj(message, "audio", path)
    if audio is not None:
        segments.append(Segment(at(path, "audio"), "other", compact(audio), role, index))
    name_path = at(path, "name")
    if not any(s.path != name_path for s in segments):
        # An empty message still exists in the rendered prompt: keep its boundary.
        segments.append(Segment(path, whole_kind(role), "", role, index))
    return segments


def _legacy_functions(body: Obj) -> list[Segment]:
    """The deprecated ``functions`` list: rendered like ``tools`` of type function (the same namespace)."""
    segments: list[Segment] = []
    for i, item in enumerate(opt_list(body, "functions", "") or []):
        path = at("functions", i)
        fn = as_obj(item, path)
        segments.append(Segment(path, "tool", compact(strip_meta(fn)), name=req_str(fn, "name", path)))
    return segments


# Every field the head (what precedes the messages' segments) is read from.
_HEAD_KEYS = ("tools", "functions", "response_format")


def parse_chat(body: Obj, model: str | None = None, resume: Resume | None = None) -> Prompt:
    """Read a Chat Completions body (``model`` is the fallback when the body has none, e.g. Azure);
    ``resume`` reads the messages from where they differ from the previous body's (``read_items``)."""
    head: Sequence[Segment] | None = earlier_head(body, resume, _HEAD_KEYS)
    if head is None:
        head = tool_segments(body, _chat_tool_name) + _legacy_functions(body)
        schema = schema_segment(opt_obj(body, "response_format", ""), "response_format")
        if schema is not None:
            head.append(schema)
    name = read_model(body, model)

    def read(message: Any, i: int, calls: Carry) -> list[Segment]:
        return _message_segments(message, i, calls, name)

    # Image estimates depend on the model: runs of another model are not resumed.
    segments, _, run = read_items(
        req_list(body, "messages", ""),
        read,
        context=("openai-chat", name),
        previous=resume.previous if resume is not None else None,
    )
    if resume is not None:
        resume.run = run
    return Prompt(
        provider="openai-chat",
        model=name,
        segments=(*head, *segments),
        params=openai_params(body, opt_str(body, "reasoning_effort", "")),
        prompt_cache_key=opt_str(body, "prompt_cache_key", ""),
        stream=bool(opt_bool(body, "stream", "")),
        forced_function=forced_function(body),
        calls_declined="none" in (body.get("tool_choice"), body.get("function_call")),
    )
