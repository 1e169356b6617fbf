"""``BasisMemo``: a value of each recent prompt, made from the prompt it was read from.

A conversation's next prompt shares its leading segments with the one it was read from
(``Prompt.basis``: equal segments, markers included). A value over all of a prompt's segments (its
marked segments, its image count) is then the basis prompt's value, less what the basis' own tail
held, plus what the new tail holds: a long conversation's request scans what is new in it, not its
whole history. Values are kept for the latest prompts (by the identity of their segments), which
are the bases of the next ones; thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from .prompt import Prompt, Segment

__all__ = ["BasisMemo"]

T = TypeVar("T")
Segments = tuple[Segment, ...]


class BasisMemo(Generic[T]):
    """``of(prompt)``: ``whole(segments)``, or ``grown(basis value, basis segments, segments,
    shared)`` where the basis' value is kept (``shared``: the leading segments both have)."""

    def __init__(
        self,
        whole: Callable[[Segments], T],
        grown: Callable[[T, Segments, Segments, int], T],
        size: int = 1024,
    ) -> None:
        self._whole, self._grown, self._size = whole, grown, size
        self._data: OrderedDict[int, tuple[Segments, T]] = OrderedDict()
        self._lock = threading.Lock()

    def _get(self, segs: Segments) -> tuple[Segments, T] | None:
        with self._lock:
            held = self._data.get(id(segs))
        return held if held is not None and held[0] is segs else None

    def of(self, prompt: Prompt) -> T:
        segs = prompt.segments
        known = self._get(segs)
        if known is not None:
            return known[1]
        basis = prompt.basis
        earlier = basis.prompt() if basis is not None else None
        before = self._get(earlier.segments) if earlier is not None else None
        value: T
        if basis is not None and earlier is not None and before is not None:
            old = earlier.segments
            shared = min(basis.shared, len(segs), len(old))
            if shared and old[shared - 1] != segs[shared - 1]:  # a cheap guard, as counting's
                shared = 0
            value = self._grown(before[1], old, segs, shared)
        else:
            value = self._whole(segs)
        with self._lock:
            self._data[id(segs)] = (segs, value)
            self._data.move_to_end(id(segs))
            while len(self._data) > self._size:
                self._data.popitem(last=False)
        return value
