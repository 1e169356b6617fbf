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


@dataclass(slots=True, eq=False)
class _Tokenized:
    segments: tuple[Segment, ...]  # held: the key is its id
    provider: str
    model: str
    tokenized: TokenizedPrompt
    shape: Shape
    # The lists ``tokenized``'s tuples were made from (equal to them, never changed since), for the
    # next prompt of the conversation to take over and extend: one copy of the stream per request
    # (its tuple) instead of three. Taken once; a second prompt on the same basis copies the tuple.
    work: tuple[list[int], list[tuple[int, int]]] | None
    weight: int  # tokens counted against the bound for this entry (its lists too while held)


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where tokenizing a prompt starts: its basis' stream up to there, as lists to extend."""

    shape: Shape
    start: int  # the first segment to tokenize
    tokens: list[int]  # the basis' stream up to ``start`` (``earlier[:end]``)
    spans: list[tuple[int, int]]
    earlier: Sequence[int]  # the basis' whole stream
    end: int  # len(tokens) as resumed: ``tokens[:end]`` stays ``earlier[:end]`` unless cut below it


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

    def put(
        self,
        prompt: Prompt,
        tokenized: TokenizedPrompt,
        shape: Shape,
        work: tuple[list[int], list[tuple[int, int]]] | None = None,
    ) -> None:
        """Hold ``tokenized``; ``work``: the lists its tokens and spans were made from, handed over
        (the caller never touches them again)."""
        weight = len(tokenized.tokens) * (2 if work is not None else 1)
        entry = _Tokenized(prompt.segments, prompt.provider, prompt.model, tokenized, shape, work, weight)
        with self._lock:
            old = self._data.pop(id(prompt.segments), None)
            if old is not None:
                self._tokens -= old.weight
            self._data[id(prompt.segments)] = entry
            self._tokens += weight
            while len(self._data) > self._max or self._tokens > self._max_tokens:
                _, dropped = self._data.popitem(last=False)
                self._tokens -= dropped.weight

    def _take(self, held: _Tokenized) -> tuple[list[int], list[tuple[int, int]]] | None:
        with self._lock:
            work, held.work = held.work, None
        return work

    def resume(self, prompt: Prompt) -> Resumed | None:
        """Where tokenizing ``prompt`` can start from its basis' stream, with that stream's head.

        Only at a message boundary after the tools, the schema and the host message, with nothing
        but messages after it: every framing decision before that point is then the basis' own.
        The basis' leading ``shared`` segments are the prompt's own (``reading`` proves it: the
        same objects, or a re-read head equal to the earlier one), so nothing here walks them.
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
        if j and old[j - 1] != new[j - 1]:  # a cheap guard: the last shared segment
            return None
        while j > 0 and not (_boundary(old, j) and _boundary(new, j)):
            j -= 1
        shape = held.shape
        if j == 0 or j <= max(shape.last_tool, shape.last_schema, -1 if shape.host is None else shape.host):
            return None
        if any(s.kind in ("tool", "schema") for s in new[j:]):
            return None
        stream = held.tokenized.tokens
        end = held.tokenized.spans[j - 1][1]
        work = self._take(held)
        if work is None:
            return Resumed(shape, j, list(stream[:end]), list(held.tokenized.spans[:j]), stream, end)
        tokens, spans = work
        # Cut in place: only what follows ``end`` is freed (a slice would copy the whole stream).
        del tokens[end:]
        del spans[j:]
        return Resumed(shape, j, tokens, spans, stream, end)


def _boundary(segs: Sequence[Segment], j: int) -> bool:
    """Whether segment ``j - 1`` ends its message (framing closes it whatever follows). Between two
    tool messages it does not: Chat Completions renders the results of parallel calls as one message
    (counting._parallel_run), whose last one closes it."""
    if j >= len(segs):
        return True
    before = segs[j - 1].message_index
    if segs[j - 1].kind == segs[j].kind == "tool_result" and segs[j - 1].role == segs[j].role == "tool":
        return False
    return before is None or segs[j].message_index != before
