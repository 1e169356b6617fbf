"""``TokenRope``: a token stream made of tuples that the next stream of the conversation shares.

A request's stream is its conversation's previous one up to where the two part, then a few new
tokens. As one flat tuple, every request copied the whole stream (~24,000 tokens at 1,000
messages: a fresh 190 KB block, each of its items referenced once more, and the previous one's let
go) although only its last few hundred tokens were new. A rope keeps the shared part as the very
tuples the previous stream holds, so a request builds what is new in it:

* chunks are tuples whose sizes at least halve along the stream (a binary counter of sizes): a cut
  near the end falls in a small chunk, there are O(log n) of them, and each token is copied into a
  merged chunk O(log n) times over the conversation;
* the tokens after the last segment (the reply priming) are a chunk of their own: the next request
  cuts exactly there, so it copies none of the chunk before it.

A rope is immutable, like the tuple it replaces: indexes keep their work on a stream by its identity
(``is_frozen``). Slices are tuples (the indexes hash and compare blocks), equality is by content,
with tuples too.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain
from typing import Any, overload

__all__ = ["TokenRope", "as_tokens", "grown", "is_frozen"]


class TokenRope(Sequence[int]):
    """An immutable sequence of ints held as a tuple of tuples (see the module doc)."""

    __slots__ = ("__weakref__", "_chunks", "_len", "_starts")

    def __init__(self, chunks: tuple[tuple[int, ...], ...]) -> None:
        self._chunks = tuple(c for c in chunks if c)
        self._starts = [0, *accumulate(map(len, self._chunks))]  # chunk i is [starts[i], starts[i+1])
        self._len = self._starts[-1]

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        return self._chunks

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[int, ...]: ...
    def __getitem__(self, i: int | slice) -> int | tuple[int, ...]:
        starts, chunks = self._starts, self._chunks
        if isinstance(i, slice):
            start, stop, step = i.indices(self._len)
            if step != 1:
                return tuple(self)[i]
            if start >= stop:
                return ()
            k = bisect_right(starts, start) - 1
            if stop <= starts[k + 1]:  # most slices (a block) lie in one chunk
                return chunks[k][start - starts[k] : stop - starts[k]]
            parts = [chunks[k][start - starts[k] :]]
            k += 1
            while starts[k + 1] < stop:
                parts.append(chunks[k])
                k += 1
            parts.append(chunks[k][: stop - starts[k]])
            return tuple(chain.from_iterable(parts))
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("TokenRope index out of range")
        k = bisect_right(starts, i) - 1
        return chunks[k][i - starts[k]]

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(self._chunks)

    def __contains__(self, value: object) -> bool:
        return any(value in c for c in self._chunks)

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, TokenRope):
            return self._len == other._len and (self._chunks == other._chunks or tuple(self) == tuple(other))
        if isinstance(other, tuple | list):
            return self._len == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # equal to the equal tuple's

    def __repr__(self) -> str:
        return f"TokenRope({tuple(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (TokenRope, (self._chunks,))


def is_frozen(tokens: Sequence[int]) -> bool:
    """Whether ``tokens`` can never change: an index may keep its work on it by its identity."""
    return type(tokens) is tuple or type(tokens) is TokenRope


def as_tokens(tokens: Sequence[int]) -> Sequence[int]:
    """``tokens`` to index and slice: as it is when it is a list, a tuple or a rope, else a list of it
    (a caller may pass any sequence, e.g. a range or an array)."""
    return tokens if isinstance(tokens, list | tuple | TokenRope) else list(tokens)


def grown(
    earlier: Sequence[int] | None, keep: int, content: Sequence[int], after: Sequence[int]
) -> TokenRope:
    """``earlier[:keep] + content + after`` as a rope sharing the chunks of ``earlier`` below
    ``keep``; ``after`` (the reply priming) stays a chunk of its own. ``earlier`` must be frozen."""
    if earlier is None or keep <= 0:
        chunks: tuple[tuple[int, ...], ...] = ()
        starts = [0]
    elif type(earlier) is TokenRope:
        chunks, starts = earlier._chunks, earlier._starts
    else:
        chunks, starts = (tuple(earlier),), [0, len(earlier)]
    keep = min(max(keep, 0), starts[-1])
    k = bisect_right(starts, keep) - 1  # the chunk ``keep`` falls in (or starts)
    out = list(chunks[:k])
    head = chunks[k][: keep - starts[k]] if k < len(chunks) and keep > starts[k] else ()
    last = head + tuple(content)
    if last:
        out.append(last)
    # Sizes at least halve along the rope: a cut near its end copies little.
    while len(out) >= 2 and len(out[-2]) < 2 * len(out[-1]):
        out[-2:] = [out[-2] + out[-1]]
    if after:
        out.append(tuple(after))
    return TokenRope(tuple(out))
