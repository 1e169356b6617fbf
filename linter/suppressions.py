"""Inline suppressions, in each file type's own comment syntax.

    {# cachewarden: ignore[CW101] #}     Jinja (a comment never reaches the prompt)
    # noqa: CW101   /  # cachewarden: ignore[CW101]        YAML, text
    <!-- cachewarden: ignore[CW101] -->  Markdown
    "//": "cachewarden: ignore[CW204]"   JSON (no comments): a top-level key, applies to the file

A marker applies to its own line, or to the next line when it stands alone on its line; without a
code list it silences every rule there. ``cachewarden: ignore-file[...]`` applies to the whole file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CODES = r"(?:\[(?P<codes>[A-Z0-9,\s]*)\]|:\s*(?P<noqa>[A-Z]+\d+(?:[,\s]+[A-Z]+\d+)*))?"
_MARKER = re.compile(r"(?:cachewarden:\s*(?P<kind>ignore-file|ignore)|(?P<bare>noqa))" + _CODES)
_COMMENT_ONLY = re.compile(r"^\s*(?:\{#.*#\}|#.*|<!--.*-->|//.*)\s*$")
ALL = frozenset({"*"})


@dataclass(slots=True)
class Suppressions:
    lines: dict[int, frozenset[str]] = field(default_factory=dict)
    file: frozenset[str] = frozenset()

    def covers(self, code: str, line: int) -> bool:
        for codes in (self.file, self.lines.get(line, frozenset())):
            if codes and ("*" in codes or code in codes):
                return True
        return False


def _codes(m: re.Match[str]) -> frozenset[str]:
    raw = m.group("codes") if m.group("codes") is not None else m.group("noqa")
    if not raw:
        return ALL
    return frozenset(c for c in re.split(r"[,\s]+", raw) if c)


def parse(text: str, json_header: object = None) -> Suppressions:
    """Suppressions of one file; ``json_header`` is the value of a JSON file's top-level "//" key."""
    out = Suppressions()
    file_codes: set[str] = set()
    marked = "noqa" in text or "cachewarden:" in text
    for number, line in enumerate(text.split("\n") if marked else (), start=1):
        if "noqa" not in line and "cachewarden:" not in line:
            continue
        for m in _MARKER.finditer(line):
            codes = _codes(m)
            if m.group("kind") == "ignore-file":
                file_codes |= codes
                continue
            target = number + 1 if _COMMENT_ONLY.match(line) else number
            out.lines[target] = out.lines.get(target, frozenset()) | codes
    headers = json_header if isinstance(json_header, list) else [json_header]
    for header in headers:
        if isinstance(header, str):
            for m in _MARKER.finditer(header):
                file_codes |= _codes(m)
    out.file = frozenset(file_codes)
    return out
