"""The segments of a prompt that carry a ``cache_control`` marker (their indexes, ascending).

Taken from the basis prompt's below the segments both share (``basis_memo``), and the rest scanned
at C speed: a long conversation carries a few markers among thousands of segments, and each request
would otherwise pay for its whole history.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import compress, repeat
from operator import attrgetter, is_not

from .basis_memo import BasisMemo, Segments

__all__ = ["MARKED"]

_CACHE_CONTROL = attrgetter("cache_control")


def _scan(segs: Segments, start: int = 0) -> tuple[int, ...]:
    flags = map(is_not, map(_CACHE_CONTROL, segs[start:]), repeat(None))
    return tuple(compress(range(start, len(segs)), flags))


def _grown(before: tuple[int, ...], old: Segments, segs: Segments, shared: int) -> tuple[int, ...]:
    return before[: bisect_left(before, shared)] + _scan(segs, shared)


MARKED: BasisMemo[tuple[int, ...]] = BasisMemo(_scan, _grown)
