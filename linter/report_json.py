"""The JSON contract: {"findings": [...], "summary": {...}} (1-based lines and columns)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .findings import Finding


def finding_dict(f: Finding) -> dict[str, Any]:
    fix: dict[str, Any] | None = None
    if f.fix is not None:
        fix = {"applicability": f.fix.applicability, "title": f.fix.title}
        if f.fix.edits:
            fix["edits"] = [
                {"line": a, "column": b, "end_line": c, "end_column": d, "content": e.content}
                for (a, b, c, d), e in zip(f.fix.spans, f.fix.edits, strict=True)
            ]
    return {
        "code": f.code,
        "name": f.name,
        "reason": f.reason,
        "severity": f.severity,
        "path": f.path,
        "line": f.line,
        "column": f.column,
        "end_line": f.end_line,
        "end_column": f.end_column,
        "message": f.message,
        "fix": fix,
    }


def render(findings: Sequence[Finding], summary: dict[str, int]) -> str:
    return json.dumps({"findings": [finding_dict(f) for f in findings], "summary": summary}, indent=2)
