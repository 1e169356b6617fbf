"""The work on one token sequence that every walk of it shares (``_Query``), kept between calls.

A lookup hashes the prompt's blocks into a chain once for all scopes and indexes; the lookup,
insert and marks of one request (in two indexes) then share one walk of it, and the next prompt of
the scope starts from the blocks it shares with the previous one. ``_query`` keeps that work for the
next call for tuples and ropes (``rope.is_frozen``) only, which cannot change in between.
"""

from __future__ import annotations

import itertools
import struct
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat

from .rope import is_frozen
from .trie import _Node, _pack

# Tuples built from an earlier one, kept until their query is made (the same analysis).
_DERIVED = 16
# Token tuples whose per-sequence work (_Query) is kept: one request looks its stream up, inserts
# it and marks it in two indexes, and the conversation's next request adopts it (``origin``), while
# requests of many other conversations of the tenant come in between. Bounded in number and in
# tokens (the tuples are the engine's, but kept alive here past its history: ~16 MiB of them).
_QUERIES = 256
_QUERY_TOKENS = 1 << 21


class _Query:
    """The work on one token sequence that every walk of it shares, whatever the index or scope.

    Blocks are the full blocks, then the partial last one if any. ``chain()[i]`` hashes blocks
    ``0..i`` (a node's key is ``hash((root key, chain[i]))``, so the chain is computed once for all
    scopes and indexes). ``paths`` remembers, per (index generation, scope), held nodes of the first
    full blocks: the lookup, insert and marks of one request walk once. ``adopt`` takes the chain
    and keys of the blocks shared with an earlier sequence (the previous request of the
    conversation), and ``take_path`` that sequence's held path when it is first asked for, so that
    a request costs its new blocks, not its whole length.
    """

    __slots__ = ("_adopted", "_base", "_chain", "_complete", "_keys", "bs", "full", "origin", "paths", "toks")

    def __init__(self, toks: Sequence[int], bs: int) -> None:
        self.toks = toks
        self.bs = bs
        self.full = len(toks) // bs
        # Arrays of 64-bit hashes, not lists: ``adopt`` copies a conversation's whole chain and keys
        # on every request, and an array slice is a memcpy where a list's touches every int object.
        self._chain: array[int] = array("q")
        self._complete = False
        self._adopted = False
        self._keys: dict[int, array[int]] = {}
        self.paths: dict[tuple[int, str], list[_Node]] = {}
        # (the query adopted, the full blocks both start with): its paths are taken when needed.
        self._base: tuple[_Query, int] | None = None
        # (earlier tuple, tokens) when this tuple was built from an earlier one (``derived``).
        self.origin: tuple[Sequence[int], int] | None = None

    def block(self, i: int) -> tuple[int, ...]:
        """The tokens of block ``i`` (the last one may be partial)."""
        return tuple(self.toks[i * self.bs : (i + 1) * self.bs])

    def chain(self) -> array[int]:
        if not self._complete:
            toks, bs, full = self.toks, self.bs, self.full
            chain = self._chain  # this query's own array (``adopt`` copies): grown in place
            append = chain.append
            c = chain[-1] if chain else 0
            # Block tuples are not kept: many small objects for the garbage collector.
            for block in zip(*[iter(toks[len(chain) * bs : full * bs])] * bs, strict=False):
                c = hash((c, block))
                append(c)
            if len(toks) % bs:
                append(hash((c, tuple(toks[full * bs :]))))
            self._complete = True
        return self._chain

    def keys(self, root_key: int) -> array[int]:
        chain = self.chain()
        keys = self._keys.get(root_key)
        if keys is None:
            keys = self._keys[root_key] = array("q")
        if len(keys) < len(chain):
            # In place: the array is this query's own (``adopt`` copies), a copy would cost the history.
            keys.extend(map(hash, zip(repeat(root_key), chain[len(keys) :], strict=False)))
        return keys

    def adopt(self, earlier: _Query) -> None:
        """Take over what ``earlier`` computed for the full blocks both sequences start with (once)."""
        if self._adopted or earlier is self or earlier.bs != self.bs:
            return
        self._adopted = True
        limit = min(self.full, earlier.full)
        known = 0
        if self.origin is not None and self.origin[0] is earlier.toks:
            known = min(self.origin[1] // self.bs, limit)  # equal by construction: not compared
        shared = _common_blocks(self.toks, earlier.toks, self.bs, limit, known)
        if not shared:
            return
        if not self._complete and len(self._chain) < shared <= len(earlier._chain):
            self._chain = earlier._chain[:shared]
        for root_key, keys in earlier._keys.items():
            if len(self._keys.get(root_key, ())) < shared <= len(keys):
                self._keys[root_key] = keys[:shared]
        self._base = (earlier, shared)
        # The earlier one has been walked by now: its own base would only keep a chain of every
        # query of the conversation alive.
        earlier._base = None

    def take_path(self, pkey: tuple[int, str]) -> list[_Node]:
        """This query's held path in index ``pkey`` so far: its own, or the one of the query it
        adopted, cut to the blocks both share. That one is taken, not copied (a conversation's
        whole path on every request): the earlier prompt walks again if it is ever looked up
        again. The caller holds the lock of the index ``pkey`` names, the only one that touches
        that path."""
        path = self.paths.get(pkey)
        if path is None and self._base is not None:
            earlier, shared = self._base
            path = earlier.paths.pop(pkey, None)
            if path is not None:
                del path[shared:]  # frees what follows only
                self.paths[pkey] = path
        return path or []


def _common_blocks(a: Sequence[int], b: Sequence[int], bs: int, limit: int, known: int = 0) -> int:
    """How many full blocks (at most ``limit``) ``a`` and ``b`` start with (C-speed slice compares),
    the first ``known`` being equal already (not compared again)."""
    if a[known * bs : limit * bs] == b[known * bs : limit * bs]:
        return limit  # the usual case: the next prompt of a conversation starts with the whole earlier one
    lo, hi = known, limit - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo * bs : mid * bs] == b[lo * bs : mid * bs]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _packed(q: _Query, start: int, n: int) -> tuple[bytes, list[int], Sequence[int]]:
    """Full blocks ``start .. start+n`` of the query packed as ``_pack`` packs them: the bytes, the item
    size of each block and the byte offset where each starts (plus the end)."""
    bs = q.bs
    try:
        data = struct.pack(f"{n * bs}i", *q.toks[start * bs : (start + n) * bs])
        return data, [4] * n, range(0, 4 * bs * n + 1, 4 * bs)
    except struct.error:
        # Some token beyond 32 bits (images, salts): block by block, as _pack does.
        parts: list[bytes] = []
        sizes: list[int] = []
        for i in range(start, start + n):
            try:
                packed = _pack(q.block(i))
            except OverflowError:  # beyond 64 bits: never equal to a held block (see _verified)
                parts.append(b"")
                sizes.append(0)
                continue
            parts.append(packed.tobytes())
            sizes.append(packed.itemsize)
        return b"".join(parts), sizes, [0, *itertools.accumulate(len(p) for p in parts)]


_queries: OrderedDict[tuple[int, int], _Query] = OrderedDict()
_queries_tokens = 0  # tokens of the tuples in _queries
_queries_lock = threading.Lock()
# Tuples built from an earlier one (id -> (tuple, earlier, shared tokens)), for ``_query`` to give
# the queries it creates their origin. Holds the tuples, so an id is theirs while the entry lives.
_derived: OrderedDict[int, tuple[Sequence[int], Sequence[int], int]] = OrderedDict()


def derived(toks: Sequence[int], earlier: Sequence[int], shared: int) -> None:
    """Tell the index that ``toks[:shared] == earlier[:shared]`` holds by construction (the counter
    copied that head from the earlier stream and never cut below it): a walk of ``toks`` adopting
    ``earlier``'s then compares only what follows, not a conversation's whole history again. Only
    for what is certain: a wrong claim would match blocks that differ."""
    if shared <= 0:
        return
    with _queries_lock:
        _derived[id(toks)] = (toks, earlier, min(shared, len(toks), len(earlier)))
        _derived.move_to_end(id(toks))
        while len(_derived) > _DERIVED:
            _derived.popitem(last=False)


def origin_of(toks: Sequence[int]) -> tuple[Sequence[int], int] | None:
    """(earlier tuple, tokens both start with) when ``derived`` said ``toks`` was built from it."""
    got = _derived.get(id(toks))
    return (got[1], got[2]) if got is not None and got[0] is toks else None


def _query(toks: Sequence[int], bs: int) -> _Query:
    """The shared work on ``toks``; kept for the next call only for tuples and ropes, which cannot change."""
    if not is_frozen(toks):
        return _Query(toks, bs)
    key = (id(toks), bs)
    with _queries_lock:
        q = _queries.get(key)
        if q is not None and q.toks is toks:
            _queries.move_to_end(key)
            return q
    q = _Query(toks, bs)
    global _queries_tokens
    with _queries_lock:
        q.origin = origin_of(toks)
        # The entry holds the tuple, so its id cannot be reused while the entry lives.
        old = _queries.pop(key, None)
        _queries[key] = q
        _queries_tokens += len(toks) - (len(old.toks) if old is not None else 0)
        while len(_queries) > _QUERIES or (_queries_tokens > _QUERY_TOKENS and len(_queries) > 1):
            _, gone = _queries.popitem(last=False)
            _queries_tokens -= len(gone.toks)
    return q


def cached_query(toks: Sequence[int], bs: int) -> _Query | None:
    """The kept query of the tuple ``toks``, if it is still kept (``origin`` names such a tuple)."""
    with _queries_lock:
        q = _queries.get((id(toks), bs))
    return q if q is not None and q.toks is toks else None
