"""The segments of a prompt that carry a ``cache_control`` marker, found from its basis prompt's.

A conversation's next prompt shares its leading segments with the one it was read from
(``Prompt.basis``: equal segments, markers included), so its markers below the shared part are that
prompt's, and only what follows is scanned (at C speed): a long conversation carries a few markers
among thousands of segments, and each request would otherwise pay for its whole history.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import OrderedDict
from itertools import compress, repeat
from operator import attrgetter, is_not

from .prompt import Prompt, Segment

__all__ = ["MARKED", "MarkedSegments"]

_CACHE_CONTROL = attrgetter("cache_control")


class MarkedSegments:
    """The indexes of a prompt's marked segments, ascending (see the module doc). Bounded (the
    latest prompts, by the identity of their segments); thread-safe."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._data: OrderedDict[int, tuple[tuple[Segment, ...], tuple[int, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def _get(self, segs: tuple[Segment, ...]) -> tuple[int, ...] | None:
        with self._lock:
            held = self._data.get(id(segs))
        return held[1] if held is not None and held[0] is segs else None

    def of(self, prompt: Prompt) -> tuple[int, ...]:
        segs = prompt.segments
        known = self._get(segs)
        if known is not None:
            return known
        start = 0
        head: tuple[int, ...] = ()
        basis = prompt.basis
        earlier = basis.prompt() if basis is not None else None
        if basis is not None and earlier is not None and (before := self._get(earlier.segments)) is not None:
            start = min(basis.shared, len(segs), len(earlier.segments))
            if start and earlier.segments[start - 1] != segs[start - 1]:  # a cheap guard, as counting's
                start = 0
            head = before[: bisect_left(before, start)]
        flags = map(is_not, map(_CACHE_CONTROL, segs[start:]), repeat(None))
        marked = head + tuple(compress(range(start, len(segs)), flags))
        with self._lock:
            self._data[id(segs)] = (segs, marked)
            self._data.move_to_end(id(segs))
            while len(self._data) > self._size:
                self._data.popitem(last=False)
        return marked


MARKED = MarkedSegments()
