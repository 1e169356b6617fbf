"""A TOML prompt file (pr-agent keeps its prompts so: ``[pr_review_prompt]`` with ``system`` and
``user`` multi-line strings) as a tree of nodes with offsets.

``tomllib`` reads the values but drops positions. Each string is then found from its key, in the
table its header opens: a string whose text is the file's text from there on (a literal string, or
a basic one without escapes) maps every offset exactly; any other maps to where its value starts.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from .sources import line_starts
from .tree import Node, ParseError

_HEADER = re.compile(r"^[ \t]*\[\[?[ \t]*(?P<name>[^\]\n]+?)[ \t]*\]\]?[ \t]*(?:#[^\n]*)?$", re.M)
_AT_LINE = re.compile(r"at line (\d+), column (\d+)")
_OPENERS = ('"""', "'''", '"', "'")


def parse_toml(text: str) -> Node:
    """Raises ParseError on a file that is not valid TOML."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ParseError(str(exc), _offset(text, str(exc))) from exc
    tables = _tables(text)
    return _node(text, data, (), tables)


def _offset(text: str, message: str) -> int:
    m = _AT_LINE.search(message)
    if m is None:
        return 0
    line, column = int(m.group(1)), int(m.group(2))
    starts = line_starts(text)
    return min(starts[min(line, len(starts)) - 1] + column - 1, len(text))


def _tables(text: str) -> dict[tuple[str, ...], tuple[int, int]]:
    """Each ``[a.b]`` header's table: where its body starts and ends; ``()`` is the top level."""
    headers = list(_HEADER.finditer(text))
    spans: dict[tuple[str, ...], tuple[int, int]] = {(): (0, headers[0].start() if headers else len(text))}
    for i, m in enumerate(headers):
        path = tuple(part.strip().strip("\"'") for part in m.group("name").split("."))
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        spans.setdefault(path, (m.end(), end))
    return spans


def _node(
    text: str, value: Any, path: tuple[str, ...], tables: dict[tuple[str, ...], tuple[int, int]]
) -> Node:
    start, end = tables.get(path, (0, 0))
    node = Node("object", start, end)
    for key, child in value.items():
        if isinstance(child, dict):
            inner = _node(text, child, (*path, key), tables)
            node.members.append((key, inner.start, inner))
            continue
        key_at, value_at = _find_key(text, key, start, end)
        node.members.append((key, key_at, _leaf(text, child, value_at)))
    return node


def _find_key(text: str, key: str, start: int, end: int) -> tuple[int, int]:
    """Where ``key = `` sits in its table's body, and where its value starts (the table's start
    when it is not found: a dotted key, an inline table)."""
    name = re.escape(key)
    pattern = re.compile(rf"""^[ \t]*(?:{name}|"{name}"|'{name}')[ \t]*=[ \t]*""", re.M)
    m = pattern.search(text, start, end)
    return (m.start(), m.end()) if m else (start, start)


def _leaf(text: str, value: Any, at: int) -> Node:
    if isinstance(value, list):
        return Node("array", at, at, items=[_leaf(text, v, at) for v in value])
    if not isinstance(value, str):
        return Node("scalar", at, at, value=value)
    opener = next((o for o in _OPENERS if text.startswith(o, at)), "")
    body = at + len(opener)
    if len(opener) == 3:  # a newline right after the opening quotes is not part of the string
        body += 2 if text.startswith("\r\n", body) else 1 if text.startswith("\n", body) else 0
    exact = bool(opener) and text.startswith(value, body)
    # A zero-length node when the text is not the file's (escapes): offsets map to its start.
    return Node("string", body, body + len(value) if exact else body, value=value)
