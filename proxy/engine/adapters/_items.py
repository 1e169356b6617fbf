"""Reading a body's list of items (``messages`` / ``input``) so that the next body of a conversation
resumes where it first differs.

An agent's next request repeats the previous one and appends a turn or two, so reading it from
scratch costs per-item Python work on the whole history for what is mostly the same bytes. An
``ItemRun`` keeps what reading the list produced: the segments, where each item's segments end,
the list's compact JSON (orjson's, which joins the items' own dumps with commas) and where each
item ends in it, and the state the adapter carries from item to item (tool-call ids → function
names), logged as it was written. The next body's list is dumped once (C speed), compared byte for
byte with the previous dump (so ``1`` and ``true`` never pass for equal, as they would with ``==``),
and only the items from the first difference on are read; the state at that item is replayed from
the log. When the caller knows the first items are the very objects the previous run read (a body
``reading`` grew by parsing only what it appends: ``ItemRun.same``), there is neither dump nor
compare: the next run keeps the items, and makes the dump only if a later body needs it. The
result is exactly what reading from scratch gives (tests/engine/test_incremental.py).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
from cachewarden.proxy.engine.prompt import Segment


class Carry(dict[str, str]):
    """The state an adapter carries from one item to the next, with every write logged in order."""

    __slots__ = ("log",)

    def __init__(self, log: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(log)
        self.log: list[tuple[str, str]] = list(log)

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        self.log.append((key, value))


@dataclass(frozen=True, slots=True)
class ItemRun:
    """What reading one list of items produced, for the next body of the conversation to resume from."""

    context: Hashable  # what else the items' segments depend on (the model, the carried state before)
    dump: bytes | None  # orjson.dumps(items); None when not made (``same``: then made when needed)
    item_ends: array[int]  # item_ends[i]: offset in ``dump`` just after item i
    segments: tuple[Segment, ...]
    segment_ends: array[int]  # segment_ends[i]: len(segments) after item i
    log: tuple[tuple[str, str], ...]  # the carried state's writes, in order
    log_at: array[int]  # log_at[i]: len(log) before item i
    reused: int = 0  # leading segments taken over from the previous run, not read again
    items: Sequence[Any] = ()  # the items read (JSON values, never changed after: see ``same``)
    # Set by the caller on a copy of the run: the next list's first ``same`` items are this run's
    # ``items`` themselves (the caller built it so: ``reading`` parses only what a body appends), so
    # they are resumed without a dump or a compare.
    same: int = 0

    @property
    def size(self) -> int:
        """Bytes held, roughly (for the bound of a memo of runs): the items as parsed (about three
        times their JSON: dicts and lists around strings the segments share), the dump when made."""
        json = self.item_ends[-1] if self.item_ends else 0
        return 3 * json + len(self.dump or b"") + 16 * len(self.segments)


# Last bytes of a JSON value that nothing can extend: an object, array, string or literal.
_CLOSED = (b"}", b"]", b'"', b"e", b"l")


@dataclass(slots=True)
class Resume:
    """A parse's link to the previous body of its conversation: ``previous`` in, ``run`` out.
    ``head``: the previous body and the segments of its head (what precedes the items' segments:
    tools, schema, top-level system), for ``earlier_head``."""

    previous: ItemRun | None = None
    run: ItemRun | None = None
    head: tuple[Mapping[str, Any], tuple[Segment, ...]] | None = None


def earlier_head(
    body: Mapping[str, Any], resume: Resume | None, keys: Sequence[str]
) -> tuple[Segment, ...] | None:
    """The previous body's head segments when ``body``'s head fields (``keys``: every field the
    adapter reads its head from) are the very objects the previous body held, else None (read it).

    Bodies a ``ConversationReader`` reads are read-only, and one grown from the previous body by
    parsing what it appends shares that body's other values as objects: the same objects read by
    the same adapter give the same segments, so an agent's tools and system prompt are not
    dumped and digested again on every turn (~0.15 ms for 14 tools)."""
    if resume is None or resume.head is None:
        return None
    earlier, segments = resume.head
    for key in keys:
        if body.get(key) is not earlier.get(key):
            return None
    return segments


ItemReader = Callable[[Any, int, Carry], Sequence[Segment]]


def carried_in(run: ItemRun) -> Carry:
    """The state the run's first item was read with: ``read_items`` keeps its log in the context."""
    _, log = cast(tuple[Hashable, tuple[tuple[str, str], ...]], run.context)
    return Carry(log)


def first_difference(a: bytes, b: bytes) -> int:
    """The offset of the first byte where ``a`` and ``b`` differ (the shorter length if one starts the other).

    Binary search on ``startswith`` of memoryview slices: each step is a memcmp without a copy, so
    the whole search runs at C speed.
    """
    n = min(len(a), len(b))
    view = memoryview(a)
    if b.startswith(view[:n]):
        return n
    if b.startswith(view[: n - 1]):
        return n - 1  # the usual case: a list that grew differs where the shorter one closes
    lo, hi = 0, n - 1  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if b.startswith(view[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    return lo


def read_items(
    items: Sequence[Any],
    read: ItemReader,
    *,
    context: Hashable,
    carry: Carry | None = None,
    previous: ItemRun | None = None,
) -> tuple[Sequence[Segment], Carry, ItemRun | None]:
    """The segments of every item, the carried state after the last, and the run for the next body.

    ``carry`` is the state before the first item (e.g. calls made in Responses ``instructions``); its
    log is part of the context. Items that are not plain JSON (bodies built in Python) are read from
    scratch and leave no run.
    """
    start = carry if carry is not None else Carry()
    context = (context, tuple(start.log))
    dump: bytes | None = None
    shared = 0
    plain = True
    if previous is not None and previous.context == context and previous.item_ends:
        same = previous.same
        if same and len(items) >= same and items[same - 1] is previous.items[same - 1]:
            shared = same  # the very items read before: equal by construction, not compared
    if not shared:
        try:
            dump = orjson.dumps(items)
        except TypeError:
            plain = False
        if dump is not None and previous is not None and previous.context == context and previous.item_ends:
            before = previous.dump if previous.dump is not None else _dump(previous.items)
            at = first_difference(dump, before) if before is not None else 0
            shared = bisect_right(previous.item_ends, at)
            if (
                shared
                and previous.item_ends[shared - 1] == at
                and before is not None
                and before[at - 1 : at] not in _CLOSED
            ):
                shared -= 1  # a number may go on (12 → 123): only a closed value ends where it ends
    fresh: list[Segment] = []
    if shared:
        assert previous is not None
        state = Carry(
            previous.log[: previous.log_at[shared]] if shared < len(previous.log_at) else previous.log
        )
        whole = shared == len(previous.segment_ends)
        head = previous.segments if whole else previous.segments[: previous.segment_ends[shared - 1]]
        # Arrays: their slices are one copy of the bytes, not of int objects.
        segment_ends = previous.segment_ends[:shared]
        item_ends = previous.item_ends[:shared]
        log_at = previous.log_at[:shared]
    else:
        state = Carry(start.log)
        head = ()
        segment_ends, item_ends, log_at = array("q"), array("q"), array("q")
    end = item_ends[-1] if item_ends else 0
    count = len(head)
    for i in range(shared, len(items)):
        log_at.append(len(state.log))
        fresh.extend(read(items[i], i, state))
        segment_ends.append(count + len(fresh))
        if plain:
            try:
                # "[" or "," before each item, then the item's own compact dump.
                end += 1 + len(orjson.dumps(items[i]))
            except TypeError:
                plain = False
            item_ends.append(end)
    segments = head + tuple(fresh) if fresh else tuple(head)
    run = None
    if plain:
        run = ItemRun(
            context=context,
            dump=dump,
            item_ends=item_ends,
            segments=segments,
            segment_ends=segment_ends,
            log=tuple(state.log),
            log_at=log_at,
            reused=len(head),
            items=items,
        )
    return segments, state, run


def _dump(items: Sequence[Any]) -> bytes | None:
    try:
        return orjson.dumps(items)
    except TypeError:
        return None
