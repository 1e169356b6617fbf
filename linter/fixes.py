"""Apply fixes: safe ones under --fix, unsafe ones too under --unsafe-fixes; never display-only ones."""

from __future__ import annotations

from collections.abc import Sequence

from .findings import Edit, Finding


def applicable(finding: Finding, unsafe: bool) -> bool:
    fix = finding.fix
    if fix is None or not fix.edits:
        return False
    return fix.applicability == "safe" or (unsafe and fix.applicability == "unsafe")


def apply_fixes(text: str, findings: Sequence[Finding], unsafe: bool) -> tuple[str, int]:
    """The text with every applicable, non-overlapping fix applied, and how many fixes were applied.

    A fix whose edits overlap an earlier one is skipped; the caller lints again and repeats (as Ruff
    does) so nested fixes, such as sorting an object inside another, land on the next pass.
    """
    chosen: list[Edit] = []
    applied = 0
    for finding in findings:
        if not applicable(finding, unsafe):
            continue
        assert finding.fix is not None
        edits = sorted(finding.fix.edits, key=lambda e: e.start)
        if any((e.start < c.end and c.start < e.end) or (e.start == c.start) for e in edits for c in chosen):
            continue
        chosen.extend(edits)
        applied += 1
    for edit in sorted(chosen, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.content + text[edit.end :]
    return text, applied
