"""Text helpers for explaining a divergence: where two texts part, and a compiler-style caret view.

``common_prefix`` compares slices (C speed) in growing chunks, then bisects inside the first chunk
that differs, so two 400 KB segments that differ near the end cost a few dozen slice comparisons.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T", str, Sequence[int])

_FIRST_CHUNK = 64


def common_prefix(a: T, b: T, i: int = 0, j: int = 0) -> int:
    """Length of the longest common prefix of ``a[i:]`` and ``b[j:]``."""
    limit = min(len(a) - i, len(b) - j)
    if limit <= 0:
        return 0
    done = 0
    step = _FIRST_CHUNK
    while done < limit:
        size = min(step, limit - done)
        if a[i + done : i + done + size] != b[j + done : j + done + size]:
            lo, hi = done, done + size  # the first difference is in [lo, hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if a[i + lo : i + mid] == b[j + lo : j + mid]:
                    lo = mid
                else:
                    hi = mid
            return lo
        done += size
        step *= 2
    return limit


def common_suffix(a: str, b: str, floor_a: int = 0, floor_b: int = 0) -> int:
    """Length of the longest common suffix of ``a[floor_a:]`` and ``b[floor_b:]``."""
    n = min(len(a) - floor_a, len(b) - floor_b)
    if n <= 0:
        return 0
    # Reversing copies the strings once; the prefix search on the copies stays C speed.
    return min(n, common_prefix(a[::-1], b[::-1]))


_VISIBLE = {"\t": "→", "\r": "␍", "\n": "⏎", "\x00": "␀"}


def _visible(ch: str) -> str:
    if ch in _VISIBLE:
        return _VISIBLE[ch]
    return ch if ch.isprintable() else "·"


def context_line(text: str, pos: int, width: int = 80) -> tuple[str, int]:
    """The line of ``text`` around ``pos`` (cropped to about ``width`` columns), and the caret column.

    Control characters are drawn as one visible character each so that the caret column stays
    exact; a position at the end of the text (or of the line) gets a caret just past the last column.
    """
    pos = max(0, min(pos, len(text)))
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    # The differing character itself may be the newline: keep it on the line, drawn as ⏎.
    if end == pos and pos < len(text):
        end += 1
    lo = max(start, pos - width // 2)
    hi = min(end, lo + width)
    lo = max(start, min(lo, hi - width))
    shown = "".join(_visible(c) for c in text[lo:hi])
    prefix = "…" if lo > start else ""
    suffix = "…" if hi < end else ""
    return prefix + shown + suffix, len(prefix) + (pos - lo)


def caret_view(previous: str, next_: str, pos_previous: int, pos_next: int, indent: str = "  ") -> list[str]:
    """Three or four lines: the previous and next text around the divergence, ``^`` under each change."""
    labels = ("previous", "next")
    width = max(len(x) for x in labels)
    lines: list[str] = []
    for label, text, pos in zip(labels, (previous, next_), (pos_previous, pos_next), strict=True):
        shown, column = context_line(text, pos)
        if not text:
            shown = "(empty)"
            column = 0
        lines.append(f"{indent}{label.rjust(width)} | {shown}")
        lines.append(f"{indent}{' ' * width} | {' ' * column}^")
    # One caret line suffices when both carets sit at the same column (the usual case).
    if lines[1] == lines[3]:
        del lines[1]
    return lines
