"""OpenAI Responses body -> Prompt (tools, then ``text.format``, then ``instructions``, then ``input``)."""

from __future__ import annotations

from typing import Any

from cachewarden.proxy.engine.prompt import Prompt, Segment

from ._body import (
    Obj,
    as_list,
    as_obj,
    at,
    block_type,
    cache_control,
    compact,
    content_digest,
    opt_bool,
    opt_obj,
    opt_str,
    read_model,
    req_str,
    strip_meta,
)
from ._items import Carry, Resume, earlier_head, read_items
from .openai_chat import (
    forced_function,
    image_tokens,
    openai_params,
    schema_segment,
    text_kind,
    tool_call_text,
    tool_segments,
    whole_kind,
)

TEXT_PARTS = frozenset({"input_text", "output_text"})


def _tool_name(tool: Obj, path: str) -> str:
    kind = block_type(tool, path)
    if kind in ("function", "custom"):
        return req_str(tool, "name", path)
    # Built-in tools (web_search, file_search, mcp, ...) have no name of their own: their type names them.
    return opt_str(tool, "name", path) or kind


def _part_segment(value: Any, path: str, role: str, index: int | None, model: str) -> Segment:
    part = as_obj(value, path)
    kind = block_type(part, path)
    mark = cache_control(part, path)
    if kind in TEXT_PARTS:
        return Segment(path, text_kind(role), req_str(part, "text", path), role, index, mark)
    if kind == "refusal":
        return Segment(path, "text", opt_str(part, "refusal", path) or "", role, index, mark)
    identity = compact(strip_meta(part))
    if kind == "input_image":
        tokens = image_tokens(part.get("detail"), model, part.get("image_url"))
        digest = content_digest("image", role, "", identity)
        return Segment(path, "image", "", role, index, mark, tokens, digest=digest)
    if kind == "input_file":
        # A file's text is extracted server-side: its tokens are unknown here, its identity is the block.
        return Segment(
            path, "document", "", role, index, mark, digest=content_digest("document", role, "", identity)
        )
    return Segment(path, "other", identity, role, index, mark)


def _output_text(value: Any, path: str, model: str) -> tuple[str, int]:
    """Text and fixed tokens of a tool output: a string, or a list of content parts."""
    if value is None:
        return "", 0
    if isinstance(value, str):
        return value, 0
    texts: list[str] = []
    fixed = 0
    for j, item in enumerate(as_list(value, path)):
        part = as_obj(item, at(path, j))
        text = part.get("text")
        if isinstance(text, str):
            texts.append(text)
        elif part.get("type") == "input_image":
            fixed += image_tokens(part.get("detail"), model, part.get("image_url"))
        else:
            texts.append(compact(strip_meta(part)))
    return "\n".join(texts), fixed


def _message_segments(item: Obj, path: str, index: int | None, model: str) -> list[Segment]:
    role = req_str(item, "role", path)
    content = item.get("content")
    if isinstance(content, str):
        return [Segment(path, whole_kind(role), content, role, index)]
    parts = as_list(content, at(path, "content")) if content is not None else []
    segments = [_part_segment(p, at(at(path, "content"), j), role, index, model) for j, p in enumerate(parts)]
    # An empty message still has a boundary in the rendered prompt.
    return segments or [Segment(path, whole_kind(role), "", role, index)]


def _item_segments(
    value: Any, path: str, index: int | None, calls: dict[str, str], model: str
) -> list[Segment]:
    """Segments of one input item; ``calls`` maps the call ids seen so far to function names."""
    item = as_obj(value, path)
    kind = opt_str(item, "type", path)
    if kind is None or kind == "message":
        return _message_segments(item, path, index, model)
    if kind in ("function_call", "custom_tool_call"):
        name = req_str(item, "name", path)
        call_id = opt_str(item, "call_id", path)
        if call_id is not None:
            calls[call_id] = name
        # Arguments stay the string the client sent: re-serialising would hide key-order changes.
        arguments = opt_str(item, "arguments" if kind == "function_call" else "input", path) or ""
        text = tool_call_text(name, arguments)
        item_id = opt_str(item, "id", path)
        return [Segment(path, "tool_use", text, "assistant", index, name=name, item_id=item_id)]
    if kind in ("function_call_output", "custom_tool_call_output"):
        text, fixed = _output_text(item.get("output"), at(path, "output"), model)
        # Rendered under the name of the function that produced it (as in Chat Completions).
        output_id = opt_str(item, "call_id", path)
        producer = calls.get(output_id) if output_id is not None else None
        return [Segment(path, "tool_result", text, "tool", index, fixed_tokens=fixed, name=producer)]
    if kind == "reasoning":
        # The visible summary is the text; the opaque encrypted content still decides identity.
        texts = [s["text"] for s in _list_of_objs(item, "summary", path) if isinstance(s.get("text"), str)]
        texts += [c["text"] for c in _list_of_objs(item, "content", path) if isinstance(c.get("text"), str)]
        text = "\n".join(texts)
        digest = content_digest("thinking", "assistant", text, compact(strip_meta(item)))
        return [Segment(path, "thinking", text, "assistant", index, digest=digest)]
    role = item.get("role")
    role = role if isinstance(role, str) else ("tool" if kind.endswith("_output") else "assistant")
    return [Segment(path, "other", compact(strip_meta(item)), role, index, cache_control(item, path))]


def _list_of_objs(item: Obj, key: str, path: str) -> list[Obj]:
    value = item.get(key)
    if value is None:
        return []
    return [as_obj(v, at(at(path, key), j)) for j, v in enumerate(as_list(value, at(path, key)))]


# Every field the head (what precedes the input items' segments) is read from.
_HEAD_KEYS = ("tools", "text", "instructions")


def parse_responses(body: Obj, model: str | None = None, resume: Resume | None = None) -> Prompt:
    """Read a Responses body (``model`` is the fallback when the body has none); ``resume`` reads the
    input items from where they differ from the previous body's (``read_items``)."""
    instructions = body.get("instructions")
    # Instruction items read with the model and carry calls to the input: only text is taken over.
    reused = (
        earlier_head(body, resume, _HEAD_KEYS)
        if instructions is None or isinstance(instructions, str)
        else None
    )
    if reused is not None:
        segments = list(reused)
    else:
        segments = tool_segments(body, _tool_name)
        text_config = opt_obj(body, "text", "")
        if text_config is not None:
            schema = schema_segment(opt_obj(text_config, "format", "text"), "text.format")
            if schema is not None:
                segments.append(schema)
        if isinstance(instructions, str):
            segments.append(Segment("instructions", "system", instructions))
    name = read_model(body, model)
    calls = Carry()
    if instructions is not None and not isinstance(instructions, str):
        for i, item in enumerate(as_list(instructions, "instructions")):
            segments.extend(_item_segments(item, at("instructions", i), None, calls, name))
    items = body.get("input")
    if isinstance(items, str):
        segments.append(Segment("input", "message", items, "user", 0))
    elif items is not None:

        def read(item: Any, i: int, carried: Carry) -> list[Segment]:
            return _item_segments(item, at("input", i), i, carried, name)

        # Image estimates depend on the model: runs of another model are not resumed.
        read_segments, _, run = read_items(
            as_list(items, "input"),
            read,
            context=("openai-responses", name),
            carry=calls,
            previous=resume.previous if resume is not None else None,
        )
        segments.extend(read_segments)
        if resume is not None:
            resume.run = run
    reasoning = opt_obj(body, "reasoning", "")
    effort = opt_str(reasoning, "effort", "reasoning") if reasoning is not None else None
    return Prompt(
        provider="openai-responses",
        model=name,
        segments=tuple(segments),
        params=openai_params(body, effort),
        previous_response_id=opt_str(body, "previous_response_id", ""),
        prompt_cache_key=opt_str(body, "prompt_cache_key", ""),
        stream=bool(opt_bool(body, "stream", "")),
        forced_function=forced_function(body),
    )
