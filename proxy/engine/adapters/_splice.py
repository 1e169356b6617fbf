"""Parsing a body that only appends items to an earlier body by parsing what it appends.

An agent's next request is the previous one's bytes with a turn or two inserted after the last item
of ``messages`` (or Responses ``input``); everything before and after is the same bytes.
``load_body`` would parse all of it again (a 145 KB, 1,000-message body: ~0.5 ms, most of a
request's analysis). Here the new body is checked against the earlier one with two memcmps, and
only the inserted text is parsed, wrapped as an array of its own.

Why the result is exactly ``load_body``'s: JSON is lexed left to right, so ``P[:a]`` (the earlier
body up to the end of its last item, ``a``, whitespace then the ``]`` that closes the item array
outside every string following) leaves the parser inside that array, just after its last item.
The new body is ``P[:a] + M + P[a:]``; if ``M`` is ``, v1, …, vk`` (any whitespace) and
``[v1, …, vk]`` parses as one complete array, the parser reads the same ``v1 … vk`` as further
items, then the same ``]`` and the same rest. Any other ``M`` (an edit, a key after the array, a
number that goes on, a truncated value) fails one of the checks and the body is parsed whole.

Where the items close is proved once per body, the first time a later body looks like it extends
it (``closing_candidate``, ``closes_items``): ``P[:c+1] + "}"`` must parse as an object whose last
key is the items key, and what follows ``c`` must be the body's remaining keys, without that key
again (so the array closed at ``c`` is the one the parse kept). That costs about one parse; the
bodies that extend it then carry the offset on (it moves by what each one inserts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._body import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, CheckedBody, json_depth_ok

__all__ = ["closes_items", "closing_candidate", "extend", "find_closing", "items_key", "splice_point"]

_WHITESPACE = b" \t\r\n"
# Brackets ``find_closing`` tries from the end of a body before it gives up.
_LOOKS = 256


def items_key(body: Mapping[str, Any]) -> str | None:
    """The key of the list a conversation appends to: Responses ``input``, else ``messages``."""
    for key in ("input", "messages"):
        items = body.get(key)
        if isinstance(items, list) and items:
            return key
    return None


def closing_candidate(raw: bytes, near: int) -> int | None:
    """The ``]`` that would close the items array if ``near`` (where a later body first differs
    from ``raw``) is where its last item ends: the next bracket, with only whitespace before it."""
    c = raw.find(b"]", near)
    if c < 0 or raw[near:c].strip(_WHITESPACE):
        return None
    return c


def find_closing(raw: bytes, body: Mapping[str, Any], key: str) -> int | None:
    """The ``]`` that closes ``body[key]`` in ``raw``, proved (``closes_items``), looked for from
    the end: what follows the items (tools, a schema) holds a few brackets of its own."""
    end = len(raw)
    for _ in range(_LOOKS):
        c = raw.rfind(b"]", 0, end)
        if c < 0:
            return None
        if closes_items(raw, body, key, c):
            return c
        end = c
    return None


def closes_items(raw: bytes, body: Mapping[str, Any], key: str, c: int) -> bool:
    """Whether the ``]`` at ``c`` closes ``body[key]`` in ``raw`` (``body`` is ``load_body(raw)``):
    ``raw[:c+1] + "}"`` is an object whose last key is ``key``, and what follows ``c`` is the rest of
    the body's keys, without ``key`` again (so the array closed at ``c`` is the one the parse kept)."""
    keys = list(body)
    if key not in body:
        return False
    after = keys[keys.index(key) + 1 :]
    head_keys = len(keys) - len(after)
    return _rest_is(raw[c + 1 :], body, after, key) and _head_ends_with(raw[: c + 1], key, head_keys)


def splice_point(raw: bytes, close: int) -> int:
    """Where items are inserted: just after the last item, before the whitespace ahead of ``close``."""
    at = close
    while at > 0 and raw[at - 1] in _WHITESPACE:
        at -= 1
    return at


def _rest_is(rest: bytes, body: Mapping[str, Any], after: list[str], key: str) -> bool:
    """Whether ``rest`` (what follows a candidate bracket) is the body's keys after ``key``, and only them."""
    text = rest.strip(_WHITESPACE)
    if not after:
        return text == b"}"
    if text[:1] != b",":
        return False
    try:
        tail = orjson.loads(b"{" + text[1:])
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(tail, dict)
        and key not in tail
        and list(tail) == after
        and all(tail[k] == body[k] for k in after)
    )


def _head_ends_with(head: bytes, key: str, count: int) -> bool:
    """Whether ``head + "}"`` is an object of ``count`` keys whose last one is ``key``: then the
    bracket ending ``head`` closes that key's array, outside every string."""
    try:
        obj = orjson.loads(head + b"}")
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and len(obj) == count and next(reversed(obj)) == key


def extend(
    raw: bytes,
    earlier_raw: bytes,
    earlier: Mapping[str, Any],
    key: str,
    at: int,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> CheckedBody | None:
    """``load_body(raw)`` when ``raw`` is ``earlier_raw`` with items inserted at ``at``, just after
    the last item of ``earlier[key]`` (``splice_point``); None when it is anything else (parse it
    whole)."""
    size, rest = len(raw), len(earlier_raw) - at
    if size <= len(earlier_raw) or size > max_bytes:
        return None
    view = memoryview(earlier_raw)
    # Two memcmps, no copies: the bytes up to the last item and from there on are the earlier body's.
    if not (raw.startswith(view[:at]) and raw.endswith(view[at:])):
        return None
    inserted = raw[at : size - rest].lstrip(_WHITESPACE)
    if inserted[:1] != b",":
        return None
    wrapped = b"[" + inserted[1:] + b"]"
    try:
        new = orjson.loads(wrapped)
    except orjson.JSONDecodeError:
        return None
    # The wrapper stands where the items array is (depth 2): its items nest as deep as they would there.
    if not isinstance(new, list) or not new or not json_depth_ok(wrapped, max_depth - 1):
        return None
    body = CheckedBody(earlier)
    body[key] = [*earlier[key], *new]
    return body
