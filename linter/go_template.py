"""Go ``text/template`` files (``.tpl``, ``.tmpl``, ``.gotmpl``) as the same timeline as Jinja's.

Text between actions is static. An action that prints is a value, judged by its fields
(``.CurrentDate``, ``$req.SessionID``) and its functions (sprig's ``now``, ``uuidv4``,
``randAlphaNum``; ``date "15:04"`` is graded by its Go layout). ``template`` / ``block`` insert
another template: static text. Go sorts map keys in ``range`` and ``toJson``, so there is no key
order to report.
"""

from __future__ import annotations

import re

from .frequency import Frequency, of_name
from .template_scan import Piece, Scan
from .vocab import Volatile, classify_call, classify_name, is_per_request, is_per_user

_ACTION = re.compile(r"\{\{-?\s*(?P<body>.*?)\s*-?\}\}", re.S)
_GO_SIGNS = re.compile(r"\{\{-?\s*(?:\.[A-Za-z_]|\$|range\b|end\b|define\b|template\b|with\b)")
_CONTROL = frozenset({"if", "else", "end", "with", "range", "define", "break", "continue", "return"})
_FIELD = re.compile(r"(?:\$[A-Za-z_]\w*|\$)?(?:\.[A-Za-z_]\w*)+|\$[A-Za-z_]\w*")
_WORD = re.compile(r"(?<![.\w$])[A-Za-z_]\w*")
_SPRIG: dict[str, Volatile] = {
    "now": "timestamp",
    "date": "timestamp",
    "dateInZone": "timestamp",
    "unixEpoch": "timestamp",
    "uuidv4": "unique-id",
    "randAlphaNum": "random",
    "randAlpha": "random",
    "randNumeric": "random",
    "randAscii": "random",
    "randInt": "random",
    "shuffle": "random",
}
# Go layouts name a reference time: the finest element present is how often the text changes.
_LAYOUT: tuple[tuple[Frequency, str], ...] = (
    ("second", "05"),
    ("minute", "04"),
    ("hour", "15"),
    ("hour", "03"),
    ("day", "02"),
    ("day", "Mon"),
    ("month", "Jan"),
    ("month", "01"),
    ("year", "2006"),
)


def is_go_template(text: str) -> bool:
    return bool(_GO_SIGNS.search(text))


def scan_go(text: str) -> Scan:
    scan = Scan()
    last = 0
    for m in _ACTION.finditer(text):
        if m.start() > last:
            scan.pieces.append(Piece(True, last, m.start(), text=text[last : m.start()]))
        last = m.end()
        body = m.group("body")
        first = body.split(None, 1)[0] if body.split() else ""
        if not body or body.startswith("/*"):
            continue
        if first in ("template", "block"):
            name = re.search(r'"([^"]+)"', body)
            scan.pieces.append(Piece(True, m.end(), m.end(), include=name.group(1) if name else "?"))
            continue
        piece = _value(body, m.start("body"), m.end("body"))
        if first in _CONTROL and piece.volatile is None:
            continue  # `if .Premium`, `range .Items`: no text of its own
        scan.pieces.append(piece)
    if last < len(text):
        scan.pieces.append(Piece(True, last, len(text), text=text[last:]))
    return scan


def _value(body: str, start: int, end: int) -> Piece:
    piece = Piece(False, start, end, label=body.split("|")[0].strip()[:60])
    for m in _FIELD.finditer(body):
        name = m.group().lstrip("$.").replace("$", "")
        if not name:
            continue
        if is_per_user(name) and not piece.per_user:
            piece.per_user = name
        piece.per_request = piece.per_request or is_per_request(name)
        kind = classify_name(name)
        if kind and piece.volatile is None:
            piece.volatile, piece.label = kind, m.group()
            piece.frequency = of_name(name) if kind == "timestamp" else "request"
    for m in _WORD.finditer(re.sub(r'"[^"]*"', '""', body)):
        word = m.group()
        kind = _SPRIG.get(word) or (classify_call(word) if word not in _CONTROL else None)
        if kind and piece.volatile is None:
            piece.volatile, piece.label = kind, word
            piece.frequency = _layout(body) if kind == "timestamp" else "request"
    return piece


def _layout(body: str) -> Frequency:
    layout = re.search(r'"([^"]*)"', body)
    if layout is None:
        return "request"
    return next((frequency for frequency, element in _LAYOUT if element in layout.group(1)), "request")
