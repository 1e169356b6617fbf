"""How often a volatile value changes, and what that means for the finding.

A clock rendered to the second busts every request; a date once a day (one cache write a day is
cheap next to a 5-minute TTL); a value computed once at import or when an agent object is built
changes once per process. The grade sets the message ("changes every minute") and the severity:
the rule's own (error) down to a minute, warning for an hour, info for a day or slower and for
values frozen per process.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from .findings import Severity
from .vocab import words

Frequency = Literal[
    "request", "second", "minute", "hour", "day", "week", "month", "year", "process", "instance"
]

# strftime directives, finest first: the finest one in a format is how often the text changes.
_DIRECTIVES: tuple[tuple[Frequency, str], ...] = (
    ("request", "fsc"),  # microseconds, epoch seconds, locale date-and-time (with seconds)
    ("second", "STX"),
    ("minute", "MR"),
    ("hour", "HIp"),
    ("day", "djaAuwxDeF"),
    ("week", "UWVG"),
    ("month", "mbBh"),
    ("year", "Yy"),
)
_DIRECTIVE = re.compile(r"%[-_0^#]?([a-zA-Z])")
_CALENDAR_WORDS: tuple[tuple[str, Frequency], ...] = (
    ("second", "second"),
    ("minute", "minute"),
    ("hour", "hour"),
    ("week", "week"),
    ("month", "month"),
    ("year", "year"),
)
_DAILY_WORDS = frozenset({"date", "today", "todays", "day", "weekday"})
_PHRASE: dict[Frequency, tuple[str, str]] = {
    "request": ("on every request", "which can then never be read from the cache"),
    "second": ("every second", "which can then never be read from the cache"),
    "process": ("once per process (computed at import)", "which each new process prefills again"),
    "instance": ("once per object (computed when it is built)", "which each new object prefills again"),
}


def of_format(fmt: str) -> Frequency | None:
    """The finest period a strftime format shows: ``%Y-%m-%d`` → day, ``%H:%M`` → minute."""
    letters = set(_DIRECTIVE.findall(fmt))
    for frequency, directives in _DIRECTIVES:
        if letters & set(directives):
            return frequency
    return None


def of_name(identifier: str) -> Frequency:
    """``current_date``, ``today`` → day; ``now``, ``timestamp``, ``request_id`` → request."""
    ws = set(words(identifier))
    if ws & {"time", "now", "timestamp", "datetime"}:
        return "request"
    if ws & _DAILY_WORDS:
        return "day"
    # `{{year}}-{{month}}`: a calendar field changes as often as the field does.
    return next((f for word, f in _CALENDAR_WORDS if word in ws), "request")


def severity(frequency: Frequency) -> Severity | None:
    """The hit's severity: None keeps the rule's."""
    if frequency in ("request", "second", "minute"):
        return None
    return "warning" if frequency == "hour" else "info"


def message_args(frequency: Frequency, tokens: int | str) -> dict[str, Any]:
    phrase, consequence = _PHRASE.get(
        frequency, (f"every {frequency}", f"which are prefilled again each new {frequency}")
    )
    shown = f"{tokens:,}" if isinstance(tokens, int) else tokens
    return {"frequency": phrase, "consequence": consequence, "tokens": shown}
