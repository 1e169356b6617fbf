"""Files as the linter sees them: text with offset ↔ line/column mapping, kind detection, walking."""

from __future__ import annotations

import bisect
import functools
import itertools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["template", "json", "yaml", "toml", "python"]

TEMPLATE_SUFFIXES = frozenset(
    {".j2", ".jinja", ".jinja2", ".txt", ".md", ".prompt", ".prompty", ".tpl", ".tmpl", ".gotmpl"}
)
DATA_SUFFIXES: dict[str, Kind] = {
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".py": "python",
}
SKIP_DIRS = frozenset(
    {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache", ".vscode", ".idea"}
)


# Tools' own configuration (this linter's included): never a prompt file.
_CONFIG_TOML = frozenset(
    {"pyproject.toml", "cargo.toml", "ruff.toml", ".ruff.toml", "pixi.toml", "netlify.toml", "taplo.toml"}
)


def kind_of(path: str) -> Kind | None:
    """The reader for a file name, or None when the linter does not read this kind of file."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix in TEMPLATE_SUFFIXES:
        return "template"
    if suffix == ".toml" and os.path.basename(path).lower() in _CONFIG_TOML:
        return None
    return DATA_SUFFIXES.get(suffix)


@dataclass(slots=True)
class Source:
    """The text of one file plus the line table that turns offsets into 1-based positions."""

    path: str
    text: str
    kind: Kind
    # Built on first use: most files a walk finds have no finding and no site, and never need it.
    _table: list[int] | None = None

    @property
    def _starts(self) -> list[int]:
        if self._table is None:
            self._table = line_starts(self.text)
        return self._table

    def position(self, offset: int) -> tuple[int, int]:
        """(line, column), both 1-based, of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        starts = self._starts
        index = bisect.bisect_right(starts, offset) - 1
        return index + 1, offset - starts[index] + 1

    def line_start(self, line: int) -> int:
        """Offset of the first character of a 1-based line."""
        starts = self._starts
        return starts[max(0, min(line, len(starts)) - 1)]

    def line_text(self, line: int) -> str:
        start = self.line_start(line)
        end = self.text.find("\n", start)
        return self.text[start : end if end >= 0 else len(self.text)].rstrip("\r")

    @property
    def line_count(self) -> int:
        return len(self._starts)


def line_starts(text: str) -> list[int]:
    """Offsets of the first character of each line."""
    # Running sums of the line lengths (C loops), not a Python loop over newline matches: this
    # runs for every file a walk finds, and large files have tens of thousands of lines.
    starts = list(itertools.accumulate([len(line) + 1 for line in text.split("\n")], initial=0))
    starts.pop()
    return starts


_PYTHON_SHEBANG = re.compile(r"#![^\n]*\bpython[0-9.]*\b")


def sniff(text: str) -> Kind | None:
    """The kind of a file without a known extension: a Python script by its ``#!`` line."""
    return "python" if _PYTHON_SHEBANG.match(text) else None


@functools.lru_cache(maxsize=256)
def find_beside(folder: str, name: str, subfolders: tuple[str, ...] = ("",)) -> tuple[str, str] | None:
    """(path, text) of a file another one refers to (an include, a rendered template): looked up in
    ``folder`` and the three folders above it (and their ``subfolders``); None when not found."""
    if not name or os.path.isabs(name):
        return None
    current = folder
    for _ in range(4):
        for sub in subfolders:
            candidate = os.path.join(current, sub, name)
            if os.path.isfile(candidate) and os.path.getsize(candidate) < 2**20:
                try:
                    with open(candidate, encoding="utf-8") as fh:
                        return candidate, fh.read()
                except (OSError, UnicodeDecodeError):
                    return None
        current = os.path.dirname(current)
    return None


def walk(paths: Iterable[str]) -> Iterator[str]:
    """Files to lint under ``paths``, sorted; directories are walked for the suffixes we read."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found: list[str] = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                found.extend(os.path.join(root, f) for f in files if kind_of(f) is not None)
            yield from sorted(found)
        else:
            yield str(path)
