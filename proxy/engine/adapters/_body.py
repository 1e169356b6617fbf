"""Reading a request body safely: parse limits, typed accessors that name the path, compact JSON.

Every adapter goes through these helpers so that a malformed body always surfaces as a
RequestError naming where the problem is, never as a KeyError / TypeError / RecursionError.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

import orjson
from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.engine.prompt import CacheControl, digest_text

Obj = Mapping[str, Any]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_DEPTH = 256

# Keys that mark cache breakpoints: metadata, never prompt content (they must not enter text or digest).
META_KEYS = frozenset({"cache_control", "prompt_cache_breakpoint"})


class CheckedBody(dict[str, Any]):
    """A body ``load_body`` parsed and depth-checked: ``parse_request`` does not check it again."""

    __slots__ = ()


# Depth from the JSON text (C-speed passes instead of a walk over every container): escapes out,
# everything but quotes and brackets out, strings out, then each pass drops the empty pairs.
_ESCAPES = re.compile(rb"\\.", re.DOTALL)
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_STRINGS = re.compile(rb'"[^"]*"')
_EMPTY_PAIRS = re.compile(rb"\[\]|\{\}")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
# Passes before a linear count takes over (each pass costs the length of what is left).
_PASSES = 8
# orjson re-serialises only what JSON has: anything else goes to ``default`` and the walk decides.
_DUMPS_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def load_body(
    data: bytes | str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> dict[str, Any]:
    """Parse a request body into a JSON object, or raise RequestError with a one-line reason."""
    if isinstance(data, str):
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RequestError(f"body is not valid UTF-8 (lone surrogate at character {exc.start})") from None
    elif isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
    else:
        raise RequestError(f"body must be bytes or str, not {type(data).__name__}")
    if len(raw) > max_bytes:
        raise RequestError(f"body is {len(raw)} bytes, over the limit of {max_bytes}")
    try:
        # Checked separately (C speed) so that the message can say "UTF-8" and where, not orjson's wording.
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"body is not valid UTF-8 (byte offset {exc.start})") from None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):
            raise RequestError(f"body is nested deeper than {max_depth} levels") from None
        raise RequestError(f"body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RequestError(f"body must be a JSON object, not {json_type(value)}")
    if not json_depth_ok(raw, max_depth):
        raise RequestError(f"body is nested deeper than {max_depth} levels")
    # Checked at least as strictly as parse_request would: it need not walk the body again.
    return CheckedBody(value) if max_depth <= DEFAULT_MAX_DEPTH else value


def check_depth(value: Any, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Reject containers nested deeper than max_depth (iteratively: the check itself cannot recurse)."""
    try:
        text = orjson.dumps(value, default=_reject, option=_DUMPS_OPTIONS)
    except TypeError:  # not plain JSON data (or deeper than orjson goes): walk it
        pass
    else:
        if not json_depth_ok(text, max_depth):
            raise RequestError(f"body is nested deeper than {max_depth} levels")
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise RequestError(f"body is nested deeper than {max_depth} levels")
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, Mapping | list | tuple))
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item if isinstance(v, Mapping | list | tuple))


def _reject(_: Any) -> Any:
    raise TypeError


def json_depth_ok(text: bytes, max_depth: int) -> bool:
    """Whether valid JSON ``text`` nests containers at most ``max_depth`` deep (the top level is 1)."""
    brackets = text.translate(None, _NOT_STRUCTURE)
    if brackets.count(b"[") + brackets.count(b"{") <= max_depth:
        return True  # each level opens a bracket (those inside strings only add to the count)
    if b"\\" in text:
        text = _ESCAPES.sub(b"", text)  # every escape sequence, left to right (an escaped \\ first)
    text = text.translate(None, _NOT_STRUCTURE)
    if b'"' in text:
        # Adjacent quotes: an empty string, or two strings with nothing between: either can go.
        text = _STRINGS.sub(b"", text.replace(b'""', b""))
    # A pass removes exactly the containers with no container inside, so depth = passes to empty.
    passes = 0
    while text and passes < _PASSES:
        text = _EMPTY_PAIRS.sub(b"", text)
        passes += 1
    if not text:
        return passes <= max_depth
    # Deeper still: what is left nests (depth - passes) deep; count it in one linear scan.
    return passes + max(accumulate(array("b", text.translate(_STEPS)))) <= max_depth


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def compact(value: Any) -> str:
    """Compact JSON in the original key order, non-ASCII kept as is: a key-order change changes the text."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        # Only reachable for bodies handed over as Python objects (ints over 64 bits, lone surrogates,
        # non-str keys): the stdlib encoder accepts them and yields the same compact shape.
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RequestError(f"value cannot be serialised as JSON: {exc}") from None


def canonical(value: Any) -> str:
    """Key-sorted compact JSON: the form of a parameter whose key order does not matter to the provider."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        try:
            return json.dumps(
                value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
            )
        except (TypeError, ValueError) as exc:
            raise RequestError(f"value cannot be serialised as JSON: {exc}") from None


def strip_meta(obj: Obj) -> dict[str, Any]:
    """The object without breakpoint keys, other keys in their original order."""
    return {k: v for k, v in obj.items() if k not in META_KEYS}


def strip_meta_deep(value: Any) -> Any:
    """The value without breakpoint keys at any level (depth is bounded by check_depth)."""
    if isinstance(value, Mapping):
        return {k: strip_meta_deep(v) for k, v in value.items() if k not in META_KEYS}
    if isinstance(value, list | tuple):
        return [strip_meta_deep(v) for v in value]
    return value


def content_digest(kind: str, role: str | None, text: str, identity: str) -> str:
    """Digest for segments whose text does not hold their content (images, files): hash the block too."""
    return digest_text(f"{kind}\x00{role}\x00{text}\x00{identity}")


def at(path: str, key: str | int) -> str:
    """Child path: ``at("messages", 3)`` -> ``messages[3]``; ``at("messages[3]", "content")``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def as_obj(value: Any, path: str) -> Obj:
    if type(value) is dict:  # what JSON parses to: skip the (slower) abstract-class check
        return value
    if not isinstance(value, Mapping):
        raise RequestError(f"expected an object, got {json_type(value)}", path)
    return value


def as_list(value: Any, path: str) -> list[Any]:
    if type(value) is list:
        return list(value)
    if not isinstance(value, list | tuple):
        raise RequestError(f"expected an array, got {json_type(value)}", path)
    return list(value)


def as_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise RequestError(f"expected a string, got {json_type(value)}", path)
    return value


def opt_str(obj: Obj, key: str, path: str) -> str | None:
    """An optional string field; null counts as absent (SDKs often send explicit nulls)."""
    value = obj.get(key)
    return None if value is None else as_str(value, at(path, key))


def req_str(obj: Obj, key: str, path: str) -> str:
    value = obj.get(key)
    if value is None:
        raise RequestError("missing (expected a string)", at(path, key))
    return as_str(value, at(path, key))


def req_list(obj: Obj, key: str, path: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        raise RequestError("missing (expected an array)", at(path, key))
    return as_list(value, at(path, key))


def opt_list(obj: Obj, key: str, path: str) -> list[Any] | None:
    value = obj.get(key)
    return None if value is None else as_list(value, at(path, key))


def opt_obj(obj: Obj, key: str, path: str) -> Obj | None:
    value = obj.get(key)
    return None if value is None else as_obj(value, at(path, key))


def opt_bool(obj: Obj, key: str, path: str) -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise RequestError(f"expected a boolean, got {json_type(value)}", at(path, key))
    return value


def block_type(block: Obj, path: str) -> str:
    """The ``type`` of a content block: required, a string."""
    return req_str(block, "type", path)


def cache_control(obj: Obj, path: str) -> CacheControl | None:
    """Anthropic ``cache_control`` (or an OpenAI ``prompt_cache_breakpoint``) as metadata."""
    for key in ("cache_control", "prompt_cache_breakpoint"):
        value = obj.get(key)
        if value is None:
            continue
        spec = as_obj(value, at(path, key))
        return CacheControl(ttl="1h" if spec.get("ttl") == "1h" else "5m")
    return None


def read_model(body: Obj, fallback: str | None = None) -> str:
    """The ``model`` field (required unless the caller knows it from elsewhere, e.g. a Bedrock URL)."""
    value = body.get("model")
    if value is None:
        if fallback:
            return fallback
        raise RequestError("missing (expected a string)", "model")
    model = as_str(value, "model")
    if not model:
        raise RequestError("must not be empty", "model")
    return model
