"""The values the rule engine produces: hits from checks, findings for reporters, fixes as edits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
Applicability = Literal["safe", "unsafe", "display-only"]


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace source[start:end] (character offsets) with ``content``."""

    start: int
    end: int
    content: str


@dataclass(frozen=True, slots=True)
class Hit:
    """What a check reports: a rule code, a 0-based offset span and the message arguments.

    ``severity`` overrides the rule's for this hit: a value that changes only once per process is
    ``info`` where one that changes per request is the rule's ``error``."""

    code: str
    start: int
    end: int
    args: dict[str, Any] = field(default_factory=dict)
    edits: tuple[Edit, ...] = ()
    severity: Severity | None = None


@dataclass(frozen=True, slots=True)
class Fix:
    applicability: Applicability
    title: str
    edits: tuple[Edit, ...]
    spans: tuple[tuple[int, int, int, int], ...] = ()  # (line, column, end_line, end_column) per edit


@dataclass(frozen=True, slots=True)
class Finding:
    """One reported problem; lines and columns are 1-based, end exclusive (like Ruff)."""

    code: str
    name: str
    reason: str
    severity: Severity
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str
    fix: Fix | None
    source_line: str = ""
