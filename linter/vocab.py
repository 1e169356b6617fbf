"""What names and literals mean: clock values, per-request ids, random values, per-user data.

Identifiers are split into words (``requestId`` → request, id; ``current_date`` → current, date)
so that the rules match meaning, not spelling. Literal patterns only match values that vary per
request; a bare date such as a policy's effective date is static text.
"""

from __future__ import annotations

import re
from typing import Literal

Volatile = Literal["timestamp", "unique-id", "random"]

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

_CLOCK_WORDS = frozenset({"now", "today", "timestamp", "datetime", "utcnow", "clock", "ts"})
_DATE_WORDS = frozenset({"date", "time", "day", "hour", "minute", "second", "weekday", "year", "month"})
_NOW_QUALIFIERS = frozenset({"current", "today", "todays", "now", "request", "local", "utc", "iso", "server"})
_ID_QUALIFIERS = frozenset(
    {
        "request",
        "req",
        "session",
        "trace",
        "span",
        "correlation",
        "conversation",
        "thread",
        "run",
        "invocation",
        "transaction",
        "call",
        "turn",
        "chat",
        "message",
        "msg",
    }
)
_ID_WORDS = frozenset({"uuid", "guid", "nonce", "ulid"})
_RANDOM_CALLS = frozenset(
    {"random", "randint", "randrange", "choice", "shuffle", "sample", "uniform", "lipsum"}
)
_ID_CALLS = frozenset({"uuid", "uuid1", "uuid4", "uuid7", "ulid", "token_hex", "token_urlsafe", "nanoid"})
_CLOCK_CALLS = frozenset({"now", "utcnow", "today", "time", "datetime", "strftime", "timestamp", "isoformat"})
_PER_REQUEST_WORDS = frozenset(
    {
        "question",
        "query",
        "input",
        "inputs",
        "message",
        "messages",
        "history",
        "conversation",
        "document",
        "documents",
        "docs",
        "context",
        "contexts",
        "chunks",
        "passages",
        "results",
        "request",
        "prompt",
        "task",
        "utterance",
        "transcript",
        "attachments",
        "retrieved",
        "search",
    }
)
# Words of an agent's own configuration (its persona, its character): the same text on every
# request that agent serves, so `personality_context` is not this request's context.
_AGENT_CONFIG_WORDS = frozenset({"personality", "persona", "personas", "character", "backstory", "bio"})
_USER_HEADS = frozenset({"user", "customer", "account", "member", "profile", "client", "patient", "employee"})
_PERSONAL_WORDS = frozenset(
    {
        "name",
        "email",
        "phone",
        "address",
        "username",
        "firstname",
        "lastname",
        "fullname",
        "birthday",
        "dob",
        "city",
        "country",
        "locale",
        "timezone",
        "tz",
        "plan",
        "tier",
        "id",
        "preferences",
        "age",
    }
)


PERSONAL_WORDS = _PERSONAL_WORDS


def words(identifier: str) -> list[str]:
    """``requestId.value`` → [request, id, value]."""
    return [w.lower() for w in _WORD.findall(identifier)]


def classify_name(identifier: str) -> Volatile | None:
    """Whether a variable name (dotted path allowed) reads like a per-request volatile value."""
    ws = words(identifier)
    if not ws:
        return None
    bag = set(ws)
    if bag & _ID_WORDS or (bag & {"id", "ids", "key"} and bag & _ID_QUALIFIERS):
        return "unique-id"
    if bag & _CLOCK_WORDS or (bag & _DATE_WORDS and (bag & _NOW_QUALIFIERS or len(ws) == 1)):
        return "timestamp"
    if "random" in bag or "rand" in bag or "seed" in bag:
        return "random"
    return None


def classify_call(name: str) -> Volatile | None:
    """A function or method called in a template: ``now()``, ``uuid4()``, ``random()``."""
    low = name.lower()
    if low in _CLOCK_CALLS:
        return "timestamp"
    if low in _ID_CALLS:
        return "unique-id"
    if low in _RANDOM_CALLS:
        return "random"
    return None


def is_per_request(identifier: str) -> bool:
    """A variable that carries this request's input (the question, retrieved documents, history)."""
    ws = words(identifier)
    if set(ws) & _AGENT_CONFIG_WORDS:
        return False
    return bool(ws) and (
        ws[0] in _PER_REQUEST_WORDS or ws[-1] in _PER_REQUEST_WORDS or bool(set(ws) & {"user"})
    )


def is_per_user(identifier: str) -> bool:
    """``user.name``, ``user_email``, ``customer.plan``: data that differs per end user."""
    ws = words(identifier)
    if not ws:
        return False
    if ws[0] in _USER_HEADS or (ws[0] == "current" and len(ws) > 1 and ws[1] in _USER_HEADS):
        return True
    return ws[0] in {"username", "email", "fullname", "firstname", "lastname"} or (
        len(ws) >= 2 and ws[-1] in _PERSONAL_WORDS and ws[0] in {"first", "last", "full", "my", "their"}
    )


# strftime directives that only make sense for clock output: %Y, %m, %d, %H, %M, %S, %j, %s...
STRFTIME = re.compile(r"%[-_0^#]?[YymdHIMSjUWaAbBpzZcxXsf]")

# A timestamp with a time of day (ISO 8601 / RFC 3339, optionally with seconds, fraction and zone).
ISO_DATETIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?(?![\w:])"
)
# RFC 2822 / HTTP dates: "Tue, 05 Mar 2024 10:15:00 GMT".
RFC_DATETIME = re.compile(
    r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}(?::\d{2})?"
)
