"""Whitespace rules on a template's raw text: CRLF (CW205), trailing spaces (CW206), mixed indent (CW207)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from .findings import Edit, Hit

_TRAILING = re.compile(r"[ \t]+(?=\r?$)", re.M)
_INDENT = re.compile(r"^([ \t]+)\S", re.M)


def check_text(text: str, markdown: bool = False) -> Iterator[Hit]:
    """``markdown``: two trailing spaces are a hard line break there, written on purpose."""
    first_crlf = text.find("\r\n")
    if first_crlf >= 0:
        edits = tuple(Edit(m.start(), m.end(), "\n") for m in re.finditer(r"\r\n", text))
        # One finding per file: the fix converts every line, and a line-per-finding report is noise.
        yield Hit("CW205", first_crlf, first_crlf + 2, {"count": len(edits)}, edits)
    trailing = " \n" in text or "\t\n" in text or " \r\n" in text or "\t\r\n" in text
    for m in _TRAILING.finditer(text) if trailing or text.endswith((" ", "\t")) else ():
        if markdown and m.group() == "  ":
            continue
        yield Hit("CW206", m.start(), m.end(), {}, (Edit(m.start(), m.end(), ""),))
    tabs: list[re.Match[str]] = []
    spaces: list[re.Match[str]] = []
    for m in _INDENT.finditer(text) if "\t" in text else ():  # no tab, no mixed indentation
        indent = m.group(1)
        if " " in indent and "\t" in indent:
            yield Hit("CW207", m.start(1), m.end(1), {"kind": "tabs and spaces on one line"})
        (tabs if indent.startswith("\t") else spaces).append(m)
    if tabs and spaces:
        minority = tabs if len(tabs) < len(spaces) else spaces
        m = minority[0]
        kind = "tabs" if minority is tabs else "spaces"
        yield Hit(
            "CW207", m.start(1), m.end(1), {"kind": f"{kind} where the rest of the file uses the other"}
        )
