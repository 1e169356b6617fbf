"""Detectors for per-request values in prompt text: timestamps and unique ids.

Each detector is a list of compiled patterns; a finder returns ``(start, end)`` spans. Patterns
are tried one by one (not as one alternation) so that the longest match covering a position wins:
``"Mon, 03 Mar 2026 10:30:15 GMT"`` is one timestamp, not a weekday followed by a clock time.

Stdlib only: the linter reuses these on template files, attribution on the raw text of two requests.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Literal

VolatileKind = Literal["timestamp", "unique-id"]

_I = re.IGNORECASE
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_WEEKDAY = (
    r"(?:mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:r(?:s(?:day)?)?)?|fri(?:day)?|sat(?:urday)?"
    r"|sun(?:day)?)"
)
_WEEKDAY_FULL = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_ORD = r"(?:st|nd|rd|th)?"
_CLOCK = r"\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:\s?[ap]\.?m\.?)?"
_ZONE = r"(?:\s?(?:Z|[+-]\d{2}:?\d{2}|UTC|GMT|[A-Z]{2,4}T)(?![A-Za-z]))?"
_AT_CLOCK = rf"(?:,?\s+(?:at\s+)?{_CLOCK}{_ZONE})?"
_LEAD_DAY = rf"(?:{_WEEKDAY},?\s+)?"

TIMESTAMP_PATTERNS: tuple[re.Pattern[str], ...] = (
    # ISO 8601 / RFC 3339: 2026-03-03, 2026-03-03T10:30:15.123Z, 2026-03-03 10:30+01:00
    re.compile(
        r"(?<![\w.])\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
        r"(?![\w])"
    ),
    # Basic ISO 8601: 20260303T103015Z
    re.compile(r"(?<![\w])\d{8}T\d{4,6}(?:Z|[+-]\d{4})?(?![\w])"),
    # RFC 2822 / HTTP date and dates in words: "Mon, 03 Mar 2026 10:30:15 GMT", "Monday, 3 March 2026",
    # "the 3rd of March, 2026 at 9:15 am"
    re.compile(
        rf"\b{_LEAD_DAY}(?:the\s+)?\d{{1,2}}{_ORD}(?:\s+of)?[\s-]+{_MONTH},?[\s-]+\d{{4}}{_AT_CLOCK}"
        rf"(?:\s+(?:[+-]\d{{4}}|GMT|UTC|[A-Z]{{2,4}}T))?\b",
        _I,
    ),
    # "March 3, 2026", "Monday, March 3rd 2026 10:30"
    re.compile(rf"\b{_LEAD_DAY}{_MONTH}\s+\d{{1,2}}{_ORD},?\s+\d{{4}}{_AT_CLOCK}\b", _I),
    # asctime: "Mon Mar  3 10:30:15 2026"
    re.compile(rf"\b{_WEEKDAY}\s+{_MONTH}\s+\d{{1,2}}\s+{_CLOCK}\s+\d{{4}}\b", _I),
    # Without a year: "Monday, March 3", "3 March", "Tuesday 4th March"
    re.compile(rf"\b{_LEAD_DAY}{_MONTH}\s+\d{{1,2}}{_ORD}\b(?!:)", _I),
    re.compile(rf"\b{_LEAD_DAY}\d{{1,2}}{_ORD}(?:\s+of)?\s+{_MONTH}(?![a-z])", _I),
    # Month and year: "March 2026"
    re.compile(rf"\b{_MONTH}\s+\d{{4}}\b", _I),
    # Numeric dates: 03/03/2026, 2026/03/03, 3.3.2026
    re.compile(r"(?<![\w./])(?:\d{1,2}[/.]\d{1,2}[/.](?:\d{4}|\d{2})|\d{4}/\d{1,2}/\d{1,2})(?![\w/]|\.\d)"),
    # Clock times: 10:30, 10:30:15.250, 9:05 pm, 10:30 UTC
    re.compile(rf"(?<![\w:.]){_CLOCK}{_ZONE}(?![\w:])", _I),
    # A weekday on its own ("Today is Monday").
    re.compile(rf"\b{_WEEKDAY_FULL}\b", _I),
    # Epoch seconds (2017-2033) and milliseconds / microseconds, optionally fractional.
    re.compile(r"(?<![\w.])1[5-9]\d{8}(?:\d{3}|\d{6}|\.\d{1,9})?(?![\w])"),
)

_HEX = r"[0-9a-fA-F]"
UNIQUE_ID_PATTERNS: tuple[re.Pattern[str], ...] = (
    # UUID (any version), optionally braced or urn-prefixed.
    re.compile(rf"(?<![\w-]){_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}(?![\w-])"),
    # ULID.
    re.compile(r"(?<![\w])[0-7][0-9A-HJKMNP-TV-Z]{25}(?![\w])"),
    # Provider-style prefixed ids: req_01H..., toolu_01..., call_abc123, chatcmpl-9x..., msg_...
    re.compile(r"(?<![\w-])[a-z]{2,16}[_-](?=[A-Za-z0-9]*\d)[A-Za-z0-9]{6,}(?![\w-])"),
    # Hex ids: 8+ hex digits with at least one digit and one letter (or 16+ digits).
    re.compile(r"(?<![\w])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}(?![\w])"),
    re.compile(r"(?<![\w])(?=[0-9A-F]*\d)(?=[0-9A-F]*[A-F])[0-9A-F]{8,}(?![\w])"),
    re.compile(r"(?<![\w])\d{16,}(?![\w])"),
    # Base64 / base64url tokens: 16+ chars mixing upper, lower and digits.
    re.compile(
        r"(?<![\w+/-])(?=[A-Za-z0-9+/_-]*\d)(?=[A-Za-z0-9+/_-]*[a-z])(?=[A-Za-z0-9+/_-]*[A-Z])"
        r"[A-Za-z0-9+/_-]{16,}={0,2}(?![\w+/=-])"
    ),
    # Keyed values: request_id=..., "traceId": "...", X-Request-ID: ..., nonce: ...
    re.compile(
        r"(?:request|req|session|sess|trace|span|correlation|conversation|run|message|msg|call|idempotency"
        r"|client|device|user|tool_use|tool_call)[-_ ]?(?:id|key)\b[\"']?\s*[:=]\s*[\"']?"
        r"(?P<v>[^\s\"',;{}()\[\]<>]{4,})",
        _I,
    ),
    re.compile(
        r"\b(?:nonce|cnonce|salt|cache[-_ ]?buster|cb)\b[\"']?\s*[:=]\s*[\"']?"
        r"(?P<v>[^\s\"',;{}()\[\]<>]{4,})",
        _I,
    ),
    re.compile(r"(?<![\w])\"?id\"?\s*[:=]\s*\"?(?P<v>[\w-]{4,})", _I),
)

_PATTERNS: dict[VolatileKind, tuple[re.Pattern[str], ...]] = {
    "timestamp": TIMESTAMP_PATTERNS,
    "unique-id": UNIQUE_ID_PATTERNS,
}

# No timestamp or id we detect is longer than this: a window of this size either side of a position
# holds every match that can cover it, so detection near a position never scans a 400 KB prompt.
MAX_SPAN = 96


def _span(match: re.Match[str]) -> tuple[int, int]:
    # Keyed patterns name the value: the key itself is stable text.
    if "v" in match.re.groupindex and match.group("v") is not None:
        return match.span("v")
    return match.span()


def iter_spans(
    text: str, kind: VolatileKind, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int]]:
    """Every match of ``kind`` in ``text[start:end]`` (overlapping matches of different patterns)."""
    stop = len(text) if end is None else end
    for pattern in _PATTERNS[kind]:
        for match in pattern.finditer(text, start, stop):
            yield _span(match)


def find_spans(text: str, kind: VolatileKind) -> list[tuple[int, int]]:
    """Non-overlapping spans of ``kind`` in ``text``, longest first where they overlap, in text order."""
    chosen: list[tuple[int, int]] = []
    for s, e in sorted(iter_spans(text, kind), key=lambda se: (se[0] - se[1], se[0])):
        if all(e <= cs or s >= ce for cs, ce in chosen):
            chosen.append((s, e))
    return sorted(chosen)


def timestamp_spans(text: str) -> list[tuple[int, int]]:
    return find_spans(text, "timestamp")


def unique_id_spans(text: str) -> list[tuple[int, int]]:
    return find_spans(text, "unique-id")


def span_covering(text: str, pos: int, kind: VolatileKind) -> tuple[int, int] | None:
    """The longest ``kind`` span with ``start <= pos <= end`` (``pos`` inside it or just past it).

    Matches are searched in a window around ``pos`` only. A match that touches the window's edge
    (and not the text's) may be a fragment of a longer token, so it is discarded.
    """
    lo = max(0, pos - MAX_SPAN)
    hi = min(len(text), pos + MAX_SPAN)
    best: tuple[int, int] | None = None
    for s, e in iter_spans(text, kind, lo, hi):
        if (s == lo and lo > 0) or (e == hi and hi < len(text)):
            continue
        if s <= pos <= e and s < e and (best is None or e - s > best[1] - best[0]):
            best = (s, e)
    return best


def changed_value(
    a: str, b: str, pos_a: int, pos_b: int, kinds: Sequence[VolatileKind]
) -> tuple[VolatileKind, tuple[int, int], tuple[int, int]] | None:
    """If the texts first differ (at ``pos_a`` / ``pos_b``) inside a value of one of ``kinds`` in both,
    that kind and the two spans; the first kind in ``kinds`` that fits wins.

    At least one of the two spans must extend past the difference: two values that merely end where
    the texts start to differ are unchanged values followed by another change.
    """
    for kind in kinds:
        sa = span_covering(a, pos_a, kind)
        if sa is None:
            continue
        sb = span_covering(b, pos_b, kind)
        if sb is None:
            continue
        if sa[1] > pos_a or sb[1] > pos_b:
            return kind, sa, sb
    return None
