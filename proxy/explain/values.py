"""Values: a segment changed in place, explained region by region from the raw text of both sides.

The texts are compared up to their first difference, the difference is explained (a timestamp or
id value covering it on both sides, an enclosing JSON value equal as data, a whitespace run), and
the comparison resumes after the explained region. Nothing is normalised before the comparison, so
a change can never be hidden; normalising only ever explains a difference already found. The first
difference nothing explains is a real edit, and the classification stops there: past it, positions
in the two texts no longer correspond.

``shared_chars`` reads the same regions the other way round: the characters of the earlier text that
the later one still holds in place, which is what the tokens-lost costing counts as reusable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .textdiff import common_prefix, common_suffix
from .volatile import changed_value

# A region classifier gives up on a segment after this many explained differences (pathological inputs).
MAX_REGIONS = 32
# Enclosing JSON values tried around a difference (innermost first).
MAX_JSON_CANDIDATES = 48


@dataclass(frozen=True, slots=True)
class Region:
    """One difference of two texts, explained (``code``) or not (a real edit)."""

    code: str  # timestamp | unique-id | key-order | whitespace | "" (unexplained: a real edit)
    offset_previous: int
    offset_next: int
    detail: str
    end_previous: int  # where the texts agree again (for "": the end of the previous text)


def short(text: str, limit: int = 48) -> str:
    """A value as a quoted, truncated JSON string for a detail line."""
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return json.dumps(text, ensure_ascii=False)


def json_same(x: Any, y: Any) -> bool:
    """Equal as JSON data: objects ignore key order; ``true`` is not ``1``; ``1`` equals ``1.0``."""
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return x == y
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(json_same(v, y[k]) for k, v in x.items())
    if isinstance(x, list):
        return len(x) == len(y) and all(json_same(u, v) for u, v in zip(x, y, strict=True))
    return bool(x == y)


_DECODER = json.JSONDecoder()


def _decode(text: str, start: int) -> tuple[Any, int] | None:
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None


def _json_starts(a: str, b: str, pa: int, pb: int, aligned: tuple[int, int]) -> Iterable[tuple[int, int]]:
    """Starts (in ``a`` and ``b``) of JSON values that may enclose the difference at ``pa`` / ``pb``:
    the whole texts, the parts after equal first lines (tool calls are ``name\\n{arguments}``), then
    every ``{`` / ``[`` before the difference, innermost first. A start inside the current equal
    stretch (which began at ``aligned``) lies at the same distance before the difference in both."""
    yield 0, 0
    na, nb = a.find("\n"), b.find("\n")
    if 0 <= na < pa and na == nb and a[:na] == b[:nb]:
        yield na + 1, nb + 1
    i, _ = aligned
    pos = pa + 1
    for _ in range(MAX_JSON_CANDIDATES):
        pos = max(a.rfind("{", i, pos), a.rfind("[", i, pos))
        if pos < 0:
            return
        yield pos, pos - pa + pb


def _json_difference(
    a: str, b: str, pa: int, pb: int, aligned: tuple[int, int]
) -> tuple[int, int, str] | None:
    """If a JSON value enclosing the difference is equal as data on both sides: its two ends and how
    its text differs."""
    tried: set[int] = set()
    for start_a, start_b in _json_starts(a, b, pa, pb, aligned):
        if start_a in tried:
            continue
        tried.add(start_a)
        if start_a >= len(a) or start_b >= len(b) or a[start_a] not in "{[" or b[start_b] not in "{[":
            continue
        left = _decode(a, start_a)
        if left is None or left[1] <= pa:
            continue
        right = _decode(b, start_b)
        if right is None or right[1] <= pb:
            continue
        if json_same(left[0], right[0]):
            raw_a, raw_b = a[start_a : left[1]], b[start_b : right[1]]
            return left[1], right[1], _json_detail(left[0], right[0], raw_a, raw_b)
    return None


def _keys_in_order(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [(k, _keys_in_order(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_keys_in_order(v) for v in value]
    return []


def _json_detail(x: Any, y: Any, raw_a: str, raw_b: str) -> str:
    if _keys_in_order(x) != _keys_in_order(y):
        return "equal JSON with the keys in another order"
    if ("\\u" in raw_a) != ("\\u" in raw_b) or raw_a.count("\\") != raw_b.count("\\"):
        return "equal JSON with other string escaping (e.g. \\u00e9 vs é)"
    return "equal JSON with other spacing"


def _whitespace_difference(
    a: str, b: str, pa: int, pb: int, floor: tuple[int, int]
) -> tuple[int, int, str] | None:
    """If the difference is inside a whitespace run and the texts agree again right after it."""
    in_a = pa < len(a) and a[pa].isspace()
    in_b = pb < len(b) and b[pb].isspace()
    if not (in_a or in_b):
        return None
    ea, eb = pa, pb
    while ea < len(a) and a[ea].isspace():
        ea += 1
    while eb < len(b) and b[eb].isspace():
        eb += 1
    at_end = ea == len(a) and eb == len(b)
    if not at_end and not (ea < len(a) and eb < len(b) and a[ea] == b[eb]):
        return None
    # Back up to the start of the run (equal on both sides) to show the whole run.
    sa, sb = pa, pb
    while sa > floor[0] and sb > floor[1] and a[sa - 1].isspace() and a[sa - 1] == b[sb - 1]:
        sa, sb = sa - 1, sb - 1
    run_a, run_b = a[sa:ea], b[sb:eb]
    if "\r" in run_a or "\r" in run_b:
        what = "line endings differ (CRLF vs LF)"
    elif at_end or ea == len(a) or eb == len(b):
        what = "trailing whitespace differs"
    else:
        what = "whitespace differs"
    return ea, eb, f"{what}: {json.dumps(run_a)} vs {json.dumps(run_b)}"


def text_regions(a: str, b: str, limit: int = MAX_REGIONS) -> list[Region]:
    """The successive differences of two texts, each explained or, for the last, not (code "").

    Stops at the first difference it cannot explain: past a real edit, positions in the two texts no
    longer correspond.
    """
    out: list[Region] = []
    i = j = 0
    while len(out) < limit:
        k = common_prefix(a, b, i, j)
        pa, pb = i + k, j + k
        if pa >= len(a) and pb >= len(b):
            break
        found = changed_value(a, b, pa, pb, ("timestamp", "unique-id"))
        if found is not None:
            kind, sa, sb = found
            what = "date/time" if kind == "timestamp" else "per-request id"
            detail = f"{what} {short(a[sa[0] : sa[1]])} → {short(b[sb[0] : sb[1]])}"
            i, j = max(sa[1], pa), max(sb[1], pb)
            out.append(Region(kind, pa, pb, detail, i))
            if (i, j) == (pa, pb):
                break
            continue
        explained = _json_difference(a, b, pa, pb, (i, j))
        code = "key-order"
        if explained is None:
            explained = _whitespace_difference(a, b, pa, pb, (i, j))
            code = "whitespace"
        if explained is None:
            out.append(Region("", pa, pb, "", len(a)))
            break
        ea, eb, detail = explained
        out.append(Region(code, pa, pb, detail, ea))
        if (ea, eb) == (pa, pb):
            break
        i, j = ea, eb
    return out


def shared_chars(a: str, b: str) -> list[tuple[int, int]]:
    """Character intervals of ``a`` that ``b`` still holds in place: the stretches between explained
    differences, and after an unexplained edit the common tail."""
    out: list[tuple[int, int]] = []
    at = 0
    regions = text_regions(a, b)
    for region in regions:
        if region.offset_previous > at:
            out.append((at, region.offset_previous))
        at = region.end_previous
    last = regions[-1] if regions else None
    if last is not None and not last.code:
        tail = common_suffix(a, b, last.offset_previous, last.offset_next)
        if tail:
            out.append((len(a) - tail, len(a)))
    elif at < len(a):
        out.append((at, len(a)))
    return out
