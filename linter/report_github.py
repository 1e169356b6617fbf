"""GitHub Actions workflow commands: ``::error file=…,line=…,col=…,endLine=…,title=…::message``."""

from __future__ import annotations

from collections.abc import Sequence

from .findings import Finding

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape(value: str, prop: bool) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if prop else value


def render(findings: Sequence[Finding]) -> str:
    lines = []
    for f in findings:
        props = [f"file={_escape(f.path, True)}", f"line={f.line}"]
        # GitHub ignores columns on multi-line spans; drop them there (as Ruff does).
        if f.end_line == f.line:
            props += [f"col={f.column}", f"endLine={f.end_line}", f"endColumn={f.end_column}"]
        else:
            props.append(f"endLine={f.end_line}")
        props.append(f"title={_escape(f'{f.code} {f.name}', True)}")
        lines.append(f"::{_LEVEL[f.severity]} {','.join(props)}::{_escape(f.message, False)}")
    return "\n".join(lines)
