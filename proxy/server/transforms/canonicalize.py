"""Canonicalisation: named transforms that make equal requests serialise into equal prompts.

Providers render the parsed body into the prompt in the body's own key order, so two JSON-equal
requests whose objects list keys in another order are two different prompts, and the second misses
the cache (reason ``key-order``). Each transform rewrites one kind of subtree of a parsed body in
place and says whether it changed anything.

Safe transforms keep the body JSON-equal (same data once parsed; dict equality ignores order) and
are on by default in ``canonicalize`` / ``optimize`` mode:

- ``tool-schema-keys``   sort keys, recursively, of tool schemas: Chat ``tools[].function.parameters``,
                         Responses ``tools[].parameters``, Anthropic ``tools[].input_schema``.
- ``output-schema-keys`` the same for output schemas: Chat ``response_format.json_schema.schema``,
                         Responses ``text.format.schema``, Anthropic ``output_format.schema`` and
                         ``output_config.format.schema``.
- ``tool-call-keys``     tool-call inputs in the history: Anthropic ``tool_use.input`` (keys sorted
                         recursively: Anthropic warns that unstable key order there breaks caches);
                         Chat ``tool_calls[].function.arguments`` and Responses ``function_call``
                         ``arguments`` strings, re-serialised with sorted keys and compact separators
                         only when they parse as a JSON object (the text changes, the parsed value not).

"Safe" is JSON-equality, and the provider renders what it parses in key order (that is why key
order busts caches), so every transform changes the prompt once, the same way for every request.
One consequence to know: under OpenAI Structured Outputs the model writes an object's fields in the
order of the schema's ``properties``; sorted properties give JSON-equal output in another field
order (a schema that puts ``reasoning`` before ``answer`` on purpose should name its fields so that
the sorted order is the intended one, or stay in observe mode).

Unsafe transforms change what the model reads, so they run only when named
(``--unsafe-transforms tool-order,newlines``):

- ``tool-order``  sort the tool list by name; cache breakpoints on tools stay at their positions.
- ``newlines``    CRLF -> LF and no trailing spaces / tabs on any line of system text and of tool
                  descriptions (in Markdown two trailing spaces are a line break).

Every transform is idempotent (tests/proxy/test_proxy_canonicalize.py proves it with hypothesis).
This module does not speak HTTP and holds no state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.prompt import Provider

Body = dict[str, Any]
Apply = Callable[[Body, Provider], bool]

# Anthropic tool-call block types whose ``input`` the client sends back in the history.
_TOOL_CALL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
# System text in OpenAI message lists.
_SYSTEM_ROLES = frozenset({"system", "developer"})
_TRAILING = " \t\r"


@dataclass(frozen=True, slots=True)
class Transform:
    name: str
    safe: bool
    apply: Apply


# -- helpers --------------------------------------------------------------------------------------


def sort_keys_deep(value: Any) -> tuple[Any, bool]:
    """``value`` with every object's keys sorted, recursively, and whether any order changed.

    Arrays keep their order: ``required``, ``enum`` and list items are data, not keys.
    """
    if isinstance(value, dict):
        changed = list(value) != sorted(value)
        out: dict[str, Any] = {}
        for key in sorted(value):
            out[key], inner = sort_keys_deep(value[key])
            changed = changed or inner
        return out, changed
    if isinstance(value, list):
        items = [sort_keys_deep(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


def _sort_field(parent: Any, key: str) -> bool:
    """Sorts ``parent[key]`` in place when it is an object; True when that changed its order."""
    if not isinstance(parent, dict) or not isinstance(parent.get(key), dict):
        return False
    parent[key], changed = sort_keys_deep(parent[key])
    return bool(changed)


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    """The items of a list that are objects (anything else in a malformed body is skipped)."""
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, dict))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError("number out of range")
    return number


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        # Which duplicate wins is up to each parser: re-serialising would pick one. Leave it alone.
        raise ValueError("duplicate key")
    return out


def loads_strict(text: str) -> Any:
    """JSON as the RFC defines it: no NaN / Infinity, no out-of-range numbers, no duplicate keys.

    Integers keep full precision (the stdlib parser; orjson turns big ones into floats).
    """
    return json.loads(
        text, parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_pairs
    )


def canonical_arguments(arguments: str) -> str | None:
    """Key-sorted compact JSON for an ``arguments`` string holding a JSON object, else None."""
    try:
        value = loads_strict(arguments)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None  # a string, number or array: nothing to sort, and the text is the model's own
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape: keep the client's escaped form
        return None
    return text


def normalise_newlines(text: str) -> str:
    """CRLF -> LF and no trailing spaces / tabs on any line.

    Done per LF-separated line with ``rstrip(" \\t\\r")`` so that it is idempotent: "a\\r \\n" has no
    CRLF until its space goes, and a two-step replace would leave one for a second pass.
    """
    return "\n".join(line.rstrip(_TRAILING) for line in text.split("\n"))


def _newlines_field(parent: Any, key: str) -> bool:
    if not isinstance(parent, dict) or not isinstance(parent.get(key), str):
        return False
    new = normalise_newlines(parent[key])
    if new == parent[key]:
        return False
    parent[key] = new
    return True


def _newlines_descriptions(value: Any) -> bool:
    """Normalises every ``description`` string in a tool definition (the tool's and its schema's)."""
    changed = False
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "description" and isinstance(inner, str):
                changed = _newlines_field(value, key) or changed
            else:
                changed = _newlines_descriptions(inner) or changed
    elif isinstance(value, list):
        for inner in value:
            changed = _newlines_descriptions(inner) or changed
    return changed


def _newlines_parts(content: Any, part_types: frozenset[str]) -> bool:
    """System content: a string, or a list of text parts (``text`` / ``input_text``)."""
    changed = False
    for part in _dicts(content):
        if part.get("type") in part_types:
            changed = _newlines_field(part, "text") or changed
    return changed


# -- safe transforms ------------------------------------------------------------------------------


def tool_schema_keys(body: Body, provider: Provider) -> bool:
    changed = False
    for tool in _dicts(body.get("tools")):
        if provider == "anthropic":
            changed = _sort_field(tool, "input_schema") or changed
        elif provider == "openai-chat":
            changed = _sort_field(tool.get("function"), "parameters") or changed
        else:
            changed = _sort_field(tool, "parameters") or changed
    return changed


def output_schema_keys(body: Body, provider: Provider) -> bool:
    if provider == "anthropic":
        config = body.get("output_config")
        a = _sort_field(body.get("output_format"), "schema")
        b = _sort_field(config.get("format") if isinstance(config, dict) else None, "schema")
        return a or b
    if provider == "openai-chat":
        response_format = body.get("response_format")
        if not isinstance(response_format, dict):
            return False
        return _sort_field(response_format.get("json_schema"), "schema")
    text = body.get("text")
    return _sort_field(text.get("format") if isinstance(text, dict) else None, "schema")


def _canonical_arguments_field(parent: Any) -> bool:
    if not isinstance(parent, dict) or not isinstance(parent.get("arguments"), str):
        return False
    new = canonical_arguments(parent["arguments"])
    if new is None or new == parent["arguments"]:
        return False
    parent["arguments"] = new
    return True


def tool_call_keys(body: Body, provider: Provider) -> bool:
    changed = False
    if provider == "anthropic":
        for message in _dicts(body.get("messages")):
            for block in _dicts(message.get("content")):
                if block.get("type") in _TOOL_CALL_BLOCKS:
                    changed = _sort_field(block, "input") or changed
    elif provider == "openai-chat":
        for message in _dicts(body.get("messages")):
            for call in _dicts(message.get("tool_calls")):
                changed = _canonical_arguments_field(call.get("function")) or changed
    else:
        for item in _dicts(body.get("input")):
            if item.get("type") == "function_call":
                changed = _canonical_arguments_field(item) or changed
    return changed


# -- unsafe transforms ----------------------------------------------------------------------------


def _tool_name(tool: dict[str, Any], provider: Provider) -> str | None:
    holder = tool.get("function") if provider == "openai-chat" else tool
    name = holder.get("name") if isinstance(holder, dict) else None
    return name if isinstance(name, str) else None


def tool_order(body: Body, provider: Provider) -> bool:
    """Sorts tools by name (unnamed ones, e.g. built-in tools, last, in their order).

    A breakpoint (``cache_control``) on a tool marks "cache up to here": it stays at its position,
    so a client that marks its last tool still caches all of them.
    """
    tools = body.get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return False

    def key(tool: dict[str, Any]) -> tuple[bool, str]:
        name = _tool_name(tool, provider)
        return (name is None, name or "")

    ordered = sorted(tools, key=key)  # stable: equal keys keep their order, so a second pass is a no-op
    if all(a is b for a, b in zip(ordered, tools, strict=True)):
        return False
    marks = [tool.get("cache_control") for tool in tools]
    stripped = [{k: v for k, v in tool.items() if k != "cache_control"} for tool in ordered]
    pairs = zip(stripped, marks, strict=True)
    body["tools"] = [t if mark is None else {**t, "cache_control": mark} for t, mark in pairs]
    return True


def newlines(body: Body, provider: Provider) -> bool:
    changed = False
    for tool in _dicts(body.get("tools")):
        changed = _newlines_descriptions(tool) or changed
    if provider == "anthropic":
        system = body.get("system")
        if isinstance(system, str):
            changed = _newlines_field(body, "system") or changed
        else:
            changed = _newlines_parts(system, frozenset({"text"})) or changed
        return changed
    items_key, parts = ("messages", frozenset({"text"}))
    if provider == "openai-responses":
        changed = _newlines_field(body, "instructions") or changed
        items_key, parts = "input", frozenset({"input_text", "text"})
    for message in _dicts(body.get(items_key)):
        if message.get("role") not in _SYSTEM_ROLES:
            continue
        if isinstance(message.get("content"), str):
            changed = _newlines_field(message, "content") or changed
        else:
            changed = _newlines_parts(message.get("content"), parts) or changed
    return changed


# -- the registry ---------------------------------------------------------------------------------

# In application order. Key sorting and newline normalisation touch disjoint things (keys versus
# string values) and tool order only moves whole tools, so the composition is idempotent too.
TRANSFORMS: tuple[Transform, ...] = (
    Transform("tool-schema-keys", True, tool_schema_keys),
    Transform("output-schema-keys", True, output_schema_keys),
    Transform("tool-call-keys", True, tool_call_keys),
    Transform("tool-order", False, tool_order),
    Transform("newlines", False, newlines),
)
SAFE_TRANSFORMS: tuple[str, ...] = tuple(t.name for t in TRANSFORMS if t.safe)
UNSAFE_TRANSFORMS: tuple[str, ...] = tuple(t.name for t in TRANSFORMS if not t.safe)


def select(unsafe: Iterable[str] = ()) -> tuple[Transform, ...]:
    """Every safe transform plus the unsafe ones named, in application order."""
    names = set(unsafe)
    unknown = names - set(UNSAFE_TRANSFORMS)
    if unknown:
        raise ValueError(f"unknown unsafe transform(s): {', '.join(sorted(unknown))}")
    return tuple(t for t in TRANSFORMS if t.safe or t.name in names)


def canonicalize(body: Body, provider: Provider, transforms: tuple[Transform, ...]) -> list[str]:
    """Applies ``transforms`` to ``body`` in place; returns the names of those that changed it."""
    return [t.name for t in transforms if t.apply(body, provider)]
