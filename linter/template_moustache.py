"""Templates of the moustache dialects Jinja cannot parse: Semantic Kernel (``{{$firstName}}``,
``{{time.Now}}``, ``{{recall $input}}``), Handlebars and Mustache (``{{#each items}}``).

They are read by their ``{{ ... }}`` fields: static text between them, each field judged by the
names in it like a ``str.format`` field (``template_scan.field_piece``).
"""

from __future__ import annotations

import re

from .frequency import of_name
from .template_scan import Piece, Scan, field_piece
from .vocab import classify_name

# `{{$firstName}}`, `{{time.Date}}`, `{{recall $input}}`, `{{#each items}}`: Semantic Kernel,
# Handlebars and Mustache templates, which Jinja cannot parse.
_MOUSTACHE = re.compile(r"\{\{\{?~?\s*(.*?)\s*~?\}?\}\}", re.S)
_MOUSTACHE_NAME = re.compile(r"[$@]?([A-Za-z_][\w.\-]*)")
_CLOCK_OBJECTS = frozenset({"time", "clock", "datetime"})  # Semantic Kernel's TimePlugin: time.Now


def moustache_scan(text: str) -> Scan:
    """A template of another dialect read by its ``{{ ... }}`` fields: static text between them,
    each field judged by the names in it (block helpers ``{{#if}}`` / ``{{/if}}`` are control
    flow, not values)."""
    scan = Scan()
    last = 0
    for m in _MOUSTACHE.finditer(text):
        if m.start() > last:
            scan.pieces.append(Piece(True, last, m.start(), text=text[last : m.start()]))
        last = m.end()
        body = m.group(1)
        if not body or body[0] in "#/^!>" or body in ("else", "this", "."):
            continue
        names = [n.group(1) for n in _MOUSTACHE_NAME.finditer(body)]
        if not names:
            continue
        scan.pieces.append(_moustache_piece(names, m.start(), m.end()))
    if last < len(text):
        scan.pieces.append(Piece(True, last, len(text), text=text[last:]))
    return scan


def _moustache_piece(names: list[str], start: int, end: int) -> Piece:
    head, *args = names
    parts = head.split(".")
    if len(parts) == 2 and parts[0].lower() in _CLOCK_OBJECTS and classify_name(parts[1]) == "timestamp":
        piece = Piece(False, start, end, label=head, volatile="timestamp", frequency=of_name(parts[1]))
        return piece
    piece = field_piece(head, "", start, end)
    for arg in args if piece.volatile is None else ():
        found = field_piece(arg, "", start, end)
        piece.volatile = piece.volatile or found.volatile
        piece.frequency = found.frequency if found.volatile else piece.frequency
        piece.per_request = piece.per_request or found.per_request
        piece.per_user = piece.per_user or found.per_user
    return piece
