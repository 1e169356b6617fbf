"""Human output: ``path:line:col: CODE [*] message``, the source line with a caret, a summary line."""

from __future__ import annotations

from collections.abc import Sequence

from .findings import Finding


def render(findings: Sequence[Finding], summary: dict[str, int], fixed: int) -> str:
    out: list[str] = []
    for f in findings:
        marker = " [*]" if f.fix is not None and f.fix.edits and f.fix.applicability == "safe" else ""
        out.append(f"{f.path}:{f.line}:{f.column}: {f.code}{marker} {f.message}")
        if f.source_line:
            line = f.source_line.expandtabs(1)
            width = max(1, (f.end_column - f.column) if f.end_line == f.line else len(line) - f.column + 1)
            out.append(f"    {line}")
            out.append("    " + " " * (f.column - 1) + "^" * width)
    parts = [f"{summary['findings']} finding{'s' if summary['findings'] != 1 else ''}"]
    parts += [f"{summary[k]} {k}" for k in ("error", "warning", "info") if summary[k]]
    if fixed:
        parts.append(f"{fixed} fixed")
    if summary.get("fixable"):
        parts.append(f"{summary['fixable']} fixable with --fix")
    if summary.get("unsafe_fixable"):
        parts.append(f"{summary['unsafe_fixable']} more with --unsafe-fixes")
    out.append(f"{', '.join(parts)} in {summary['files']} file{'s' if summary['files'] != 1 else ''}.")
    return "\n".join(out)
