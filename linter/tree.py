"""A parsed JSON / YAML document that remembers where each value and key sits in the source.

The standard parsers drop positions; rules need them to report ``line:col`` and fixes need them to
rewrite one object in place. JSON is parsed here (a strict RFC 8259 reader); YAML comes from
PyYAML's composer, whose nodes carry marks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from .sources import line_starts


class ParseError(ValueError):
    """The file is not valid JSON / YAML; ``offset`` is where reading stopped."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass(slots=True)
class Node:
    """A value with its [start, end) offsets; objects keep (key, key_start, child) in source order."""

    kind: str  # object | array | string | scalar
    start: int
    end: int
    value: Any = None  # scalars only
    members: list[tuple[str, int, Node]] = field(default_factory=list)
    items: list[Node] = field(default_factory=list)

    def get(self, key: str) -> Node | None:
        for name, _, child in self.members:
            if name == key:
                return child
        return None

    def text(self) -> str | None:
        return self.value if self.kind == "string" else None

    def to_python(self) -> Any:
        if self.kind == "object":
            return {k: v.to_python() for k, _, v in self.members}
        if self.kind == "array":
            return [v.to_python() for v in self.items]
        return self.value


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_LITERALS = {"true": True, "false": False, "null": None}


def _string(literal: str) -> str:
    """A matched JSON string literal's value; without an escape it is the text between the quotes."""
    return literal[1:-1] if "\\" not in literal else str(json.loads(literal))


class _JSONReader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def skip(self, pos: int) -> int:
        m = _WS.match(self.text, pos)
        return m.end() if m else pos

    def value(self, pos: int) -> Node:
        pos = self.skip(pos)
        ch = self.text[pos : pos + 1]
        if ch == "{":
            return self.container(pos, "}", "object")
        if ch == "[":
            return self.container(pos, "]", "array")
        if ch == '"':
            m = _STRING.match(self.text, pos)
            if not m:
                raise ParseError("invalid string", pos)
            return Node("string", pos, m.end(), _string(m.group()))
        for word, val in _LITERALS.items():
            if self.text.startswith(word, pos):
                return Node("scalar", pos, pos + len(word), val)
        m = _NUMBER.match(self.text, pos)
        if m and m.end() > pos:
            return Node("scalar", pos, m.end(), json.loads(m.group()))
        raise ParseError("expected a JSON value", pos)

    def container(self, pos: int, close: str, kind: str) -> Node:
        self.depth += 1
        if self.depth > 500:
            raise ParseError("nested too deeply", pos)
        node = Node(kind, pos, pos)
        pos = self.skip(pos + 1)
        if self.text.startswith(close, pos):
            node.end = pos + 1
            self.depth -= 1
            return node
        while True:
            if kind == "object":
                pos = self.skip(pos)
                m = _STRING.match(self.text, pos)
                if not m:
                    raise ParseError("expected a string key", pos)
                key_start, key = pos, _string(m.group())
                pos = self.skip(m.end())
                if not self.text.startswith(":", pos):
                    raise ParseError("expected ':'", pos)
                child = self.value(pos + 1)
                node.members.append((key, key_start, child))
            else:
                child = self.value(pos)
                node.items.append(child)
            pos = self.skip(child.end)
            if self.text.startswith(",", pos):
                pos += 1
                continue
            if self.text.startswith(close, pos):
                node.end = pos + 1
                self.depth -= 1
                return node
            raise ParseError(f"expected ',' or '{close}'", pos)


def parse_json(text: str) -> Node:
    if text.startswith("\ufeff"):
        # A UTF-8 byte order mark, as .NET tools write their JSON: whitespace here, offsets kept.
        text = " " + text[1:]
    reader = _JSONReader(text)
    root = reader.value(0)
    end = reader.skip(root.end)
    if end != len(text):
        raise ParseError("extra data after the JSON value", end)
    return root


# libyaml's parser when PyYAML was built with it (10-20x faster on large files); marks are the same.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_STR_TAG = "tag:yaml.org,2002:str"


def _from_yaml(node: yaml.Node, starts: list[int], constructor: yaml.SafeLoader) -> Node:
    def offset(mark: Any) -> int:
        return int(starts[mark.line] + mark.column) if mark.line < len(starts) else int(mark.index)

    start, end = offset(node.start_mark), offset(node.end_mark)
    if isinstance(node, yaml.MappingNode):
        out = Node("object", start, end)
        for key, val in node.value:
            out.members.append((str(key.value), offset(key.start_mark), _from_yaml(val, starts, constructor)))
        return out
    if isinstance(node, yaml.SequenceNode):
        return Node("array", start, end, items=[_from_yaml(v, starts, constructor) for v in node.value])
    # Resolve the scalar through the safe constructor so ints, bools and dates mean what YAML says;
    # a tag only another loader knows (mkdocs' `!!python/name:...`) stays the text it is. A string
    # (most scalars) is its text: no constructor call.
    if node.tag == _STR_TAG:
        value = node.value
    else:
        try:
            value = constructor.construct_object(node, deep=True)
        except yaml.YAMLError:
            value = str(node.value)
    kind = "string" if isinstance(value, str) else "scalar"
    return Node(kind, start, end, value)


def parse_yaml(text: str) -> Node | None:
    """The first document of a YAML file (None when empty); raises ParseError."""
    try:
        # The first document; the others must be valid too (a Kubernetes manifest has several).
        documents = list(yaml.compose_all(text, Loader=_LOADER))
        root = documents[0] if documents else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise ParseError(f"not valid YAML ({problem})", mark.index if mark is not None else 0) from exc
    if root is None:
        return None
    starts = line_starts(text)
    return _from_yaml(root, starts, yaml.SafeLoader(""))
