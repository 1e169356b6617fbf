"""The counter's memories: content tokens per segment, and the latest streams for the next prompt of a
conversation to start from. Both bounded by entries and by tokens held; both thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .prompt import Prompt, Segment

if TYPE_CHECKING:
    from .counting import TokenizedPrompt


class SegmentMemo:
    """A bounded, thread-safe map from segment key to its content tokens.

    Bounded by entries and by the tokens held (a tuple of ints costs ~8 bytes a token), so a few
    huge segments cannot hold memory that the entry count alone would allow.
    """

    def __init__(self, entries: int, max_tokens: int = 20_000_000) -> None:
        self._max = max(0, entries)
        self._max_tokens = max_tokens
        self._tokens = 0
        self._data: OrderedDict[tuple[str, str, str], tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> tuple[int, ...] | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            return hit

    def put(self, key: tuple[str, str, str], value: tuple[int, ...]) -> None:
        if self._max == 0 or len(value) > self._max_tokens:
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._tokens -= len(old)
            self._data[key] = value
            self._tokens += len(value)
            while len(self._data) > self._max or self._tokens > self._max_tokens:
                _, dropped = self._data.popitem(last=False)
                self._tokens -= len(dropped)

    @property
    def tokens(self) -> int:
        return self._tokens

    def __len__(self) -> int:
        return len(self._data)


@dataclass(frozen=True, slots=True)
class Shape:
    """What the whole prompt decides about its framing: where the tools and the schema end, which
    message the OpenAI tools section joins, whether legacy functions are declared, where the first
    top-level system text is (indexes into the segments; -1 / None when there is none)."""

    first_tool: int
    last_tool: int
    last_schema: int
    host: int | None
    legacy_functions: bool
    first_system: int | None


@dataclass(frozen=True, slots=True)
class _Tokenized:
    segments: tuple[Segment, ...]  # held: the key is its id
    provider: str
    model: str
    tokenized: TokenizedPrompt
    shape: Shape


class LatestStreams:
    """The latest tokenizations, by the identity of their prompt's segments, for the next prompt of each
    conversation to start from (``Prompt.basis``). Bounded by entries and tokens; thread-safe.

    The streams are the ones the engine's history holds too, so the memory is mostly shared.
    """

    def __init__(self, entries: int = 1024, max_tokens: int = 4_000_000) -> None:
        self._max, self._max_tokens, self._tokens = entries, max_tokens, 0
        self._data: OrderedDict[int, _Tokenized] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, segments: tuple[Segment, ...]) -> _Tokenized | None:
        with self._lock:
            held = self._data.get(id(segments))
        return held if held is not None and held.segments is segments else None

    def put(self, prompt: Prompt, tokenized: TokenizedPrompt, shape: Shape) -> None:
        entry = _Tokenized(prompt.segments, prompt.provider, prompt.model, tokenized, shape)
        with self._lock:
            old = self._data.pop(id(prompt.segments), None)
            if old is not None:
                self._tokens -= len(old.tokenized.tokens)
            self._data[id(prompt.segments)] = entry
            self._tokens += len(tokenized.tokens)
            while len(self._data) > self._max or self._tokens > self._max_tokens:
                _, dropped = self._data.popitem(last=False)
                self._tokens -= len(dropped.tokenized.tokens)

    def resume(self, prompt: Prompt) -> tuple[Shape, int, list[int], list[tuple[int, int]]] | None:
        """Where tokenizing ``prompt`` can start from its basis' stream, with that stream's head.

        Only at a message boundary after the tools, the schema and the host message, with nothing
        but messages after it: every framing decision before that point is then the basis' own.
        """
        basis = prompt.basis
        earlier = basis.prompt() if basis is not None else None
        if basis is None or earlier is None:
            return None
        held = self.get(earlier.segments)
        if held is None or held.provider != prompt.provider or held.model != prompt.model:
            return None
        old, new = earlier.segments, prompt.segments
        j = min(basis.shared, len(old), len(new))
        if old[:j] != new[:j]:  # the same objects, bar the few re-read head segments
            return None
        while j > 0 and not (_boundary(old, j) and _boundary(new, j)):
            j -= 1
        shape = held.shape
        if j == 0 or j <= max(shape.last_tool, shape.last_schema, -1 if shape.host is None else shape.host):
            return None
        if any(s.kind in ("tool", "schema") for s in new[j:]):
            return None
        end = held.tokenized.spans[j - 1][1]
        return shape, j, list(held.tokenized.tokens[:end]), list(held.tokenized.spans[:j])


def _boundary(segs: Sequence[Segment], j: int) -> bool:
    """Whether segment ``j - 1`` ends its message (framing closes it whatever follows)."""
    if j >= len(segs):
        return True
    before = segs[j - 1].message_index
    return before is None or segs[j].message_index != before
