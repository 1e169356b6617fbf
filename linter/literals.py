"""Per-request values written literally in request text (a captured body's system prompt, a tool).

A timestamp with a time of day, a UUID, and, after a "now" cue ("Today is", "Current time:",
"as of"), a date in any usual form, a weekday or epoch seconds; a session / request / trace id
given with its key ("session_id: 8f3a..."). A bare date without a cue is static text: a policy's
effective date is not a buster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .frequency import Frequency
from .vocab import ISO_DATETIME, RFC_DATETIME, Volatile

_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_WEEKDAY = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_ORD = r"(?:st|nd|rd|th)?"
_DATE_IN_WORDS = (
    rf"(?:{_WEEKDAY},?\s+)?(?:{_MONTH}\s+\d{{1,2}}{_ORD},?\s+\d{{4}}|\d{{1,2}}{_ORD}\s+(?:of\s+)?{_MONTH},?\s+\d{{4}}"
    rf"|{_MONTH}\s+\d{{1,2}}{_ORD}\b)"
)
_CUE = (
    r"(?i:\b(?:today(?:'s date)?|current (?:date|time|timestamp)|date today|the date|now|as of|time now)\b)"
)
CUED = re.compile(
    _CUE
    + r"[\s:,'\"=-]*(?:is\s+)?(?:(?P<date>\d{4}-\d{2}-\d{2}|\d{1,2}/\d{1,2}/\d{2,4}|"
    + _DATE_IN_WORDS
    + r"|"
    + _WEEKDAY
    + r")|(?P<epoch>1[5-9]\d{8}(?:\d{3})?(?:\.\d+)?))"
)
# A weekday with a full date is a rendered "today" even without a cue: "Tuesday, March 4, 2025".
WEEKDAY_DATE = re.compile(
    rf"\b{_WEEKDAY},?\s+(?:{_MONTH}\s+\d{{1,2}}{_ORD},?\s+\d{{4}}|\d{{1,2}}{_ORD}\s+{_MONTH}\s+\d{{4}})"
)
UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}\b"
)
KEYED_ID = re.compile(
    r"(?i:\b(?:session|request|req|trace|span|conversation|correlation|run|thread)[-_ ]?id\b)"
    r"[\"']?\s*[:=]\s*[\"']?(?P<v>[A-Za-z0-9][\w-]{5,})"
)


@dataclass(frozen=True, slots=True)
class Literal:
    kind: Volatile
    start: int
    end: int
    frequency: Frequency


def _clock(text: str) -> Frequency:
    return "second" if re.search(r"\d:\d{2}:\d{2}", text) else "minute"


def find_literal(text: str) -> Literal | None:
    """The first per-request literal in ``text``."""
    found: list[Literal] = []
    for pattern in (ISO_DATETIME, RFC_DATETIME):
        if m := pattern.search(text):
            found.append(Literal("timestamp", m.start(), m.end(), _clock(m.group())))
    if m := UUID.search(text):
        found.append(Literal("unique-id", m.start(), m.end(), "request"))
    if m := KEYED_ID.search(text):
        found.append(Literal("unique-id", m.start("v"), m.end("v"), "request"))
    if m := WEEKDAY_DATE.search(text):
        found.append(Literal("timestamp", m.start(), m.end(), "day"))
    if m := CUED.search(text):
        group = "date" if m.group("date") else "epoch"
        found.append(
            Literal("timestamp", m.start(group), m.end(group), "day" if group == "date" else "second")
        )
    return min(found, key=lambda lit: (lit.start, -lit.end), default=None)
