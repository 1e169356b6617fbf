"""The prefix index: longest common token prefix between a new prompt and recent prompts of its scope.

Layout (like vLLM's prefix cache): a prompt's tokens are cut into blocks of ``block_size``; each
block is a node keyed by ``hash((root key, hash of the blocks up to it))``; the root's key derives
from the scope. Identical prefixes therefore share their nodes (memory is paid once),
and scopes never share a node: every match is also checked by parent identity and token equality,
so neither a hash collision nor a crafted prompt can leak one scope's prefix into another's.

A lookup walks the new prompt's full blocks through one dict (cost ~ prompt length, not number of
stored prompts; a tuple's walk is shared by the calls on it and the next prompt of the scope starts
from the blocks it shares with the previous one, see ``_Query``), then extends into the next
block token by token against the children of the deepest matched node. Those children sit in a
small burst trie (``_Fan``) keyed by the token at each depth, so a node with many children (many
tails diverging mid-block after a shared system prompt) still costs a few dict probes, not a scan.

Time is always passed in (``now``); nothing reads the clock, so tests are deterministic.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import struct
import threading
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Protocol, cast

__all__ = ["IndexStats", "Match", "MemoryIndex", "PrefixIndex"]

# A fan (group of children sharing their first ``depth`` tokens) splits by the next token once it
# holds more children than this: short lists scan faster than dicts, long ones must not be scanned.
_FAN_OUT = 8
# Token tuples whose per-sequence work (_Query) is kept for the next call: one request looks its
# stream up, inserts it and marks it in two indexes, and a few requests run at once.
_QUERY_CACHE = 16
# Scopes whose latest prompt a MemoryIndex keeps for the next prompt of the scope to start from.
_LAST_SCOPES = 64


@dataclass(frozen=True, slots=True)
class Match:
    """Result of a lookup. Token counts are exact; ``age_seconds`` refers to the held prefix."""

    common_prefix_tokens: int
    held_prefix_tokens: int
    entry_id: str | None
    entry_tokens: int
    age_seconds: float | None


NO_MATCH = Match(0, 0, None, 0, None)


@dataclass(frozen=True, slots=True)
class IndexStats:
    entries: int
    tokens: int  # tokens held in distinct blocks
    blocks: int


class PrefixIndex(Protocol):
    """Backend interface: in memory (``MemoryIndex``) or, later, a shared store."""

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match: ...

    def insert(
        self,
        scope: str,
        tokens: Sequence[int],
        *,
        now: float,
        entry_id: str | None = None,
        ttl: float | None = None,
    ) -> str: ...

    def mark(
        self,
        scope: str,
        tokens: Sequence[int],
        positions: Iterable[int],
        *,
        now: float,
        ttl: float | None = None,
    ) -> None: ...

    def marks(
        self, scope: str, tokens: Sequence[int], positions: Iterable[int], *, now: float, ttl: float
    ) -> dict[int, float]: ...

    def stats(self) -> IndexStats: ...

    def clear(self) -> None: ...


class _Entry:
    """Metadata of one stored prompt (one per distinct token sequence unless ids say otherwise)."""

    __slots__ = ("id", "last_used", "leaf", "tokens")

    def __init__(self, entry_id: str, tokens: int, leaf: _Node, now: float) -> None:
        self.id = entry_id
        self.tokens = tokens
        self.leaf = leaf
        self.last_used = now


class _Node:
    """One distinct block. ``entry`` is the most recent prompt that went through it (for Match),
    ``ends`` the prompt that ends exactly here (so identical prompts reuse one entry)."""

    __slots__ = ("ends", "entry", "key", "kids", "last_seen", "marks", "parent", "tokens")

    def __init__(self, key: int, parent: _Node | None, tokens: array[int], now: float) -> None:
        self.key = key
        self.parent = parent
        self.tokens = tokens
        self.last_seen = now
        self.kids: _Fan | None = None
        self.entry: _Entry | None = None
        self.ends: _Entry | None = None
        self.marks: dict[tuple[int, ...], float] | None = None


class _Fan:
    """Children of one node that share their first ``depth`` tokens; ``newest`` = most recently seen."""

    __slots__ = ("depth", "items", "newest", "split")

    def __init__(self, depth: int) -> None:
        self.depth = depth
        # Unsplit: all children here. Split: only the (at most one) child of exactly ``depth`` tokens.
        self.items: list[_Node] = []
        self.split: dict[int, _Fan] | None = None
        self.newest: _Node | None = None


def _pack(block: Sequence[int]) -> array[int]:
    # 4 bytes a token instead of a tuple of int objects (~40 bytes a token): the index is mostly tokens.
    try:
        return array("i", block)
    except OverflowError:
        return array("q", block)


def _scope_key(scope: str) -> int:
    # str hashes are salted per process; a stable digest keeps chain keys reproducible across replicas.
    return int.from_bytes(hashlib.blake2b(scope.encode("utf-8", "surrogatepass"), digest_size=8).digest())


def _threshold(now: float, ttl: float) -> float:
    return -math.inf if ttl <= 0 else now - ttl


_PARENT = attrgetter("parent")
_TOKENS = attrgetter("tokens")
_ITEMSIZE = attrgetter("itemsize")


def _neg_last_seen(node: _Node) -> float:
    return -node.last_seen


_generations = itertools.count(1)


class _Query:
    """The work on one token sequence that every walk of it shares, whatever the index or scope.

    Blocks are the full blocks, then the partial last one if any. ``chain()[i]`` hashes blocks
    ``0..i`` (a node's key is ``hash((root key, chain[i]))``, so the chain is computed once for all
    scopes and indexes). ``paths`` remembers, per (index generation, scope), held nodes of the first
    full blocks: the lookup, insert and marks of one request walk once. ``adopt`` takes the chain,
    keys and paths of the blocks shared with an earlier sequence (the previous request of the
    conversation), so that a request costs its new blocks, not its whole length.
    """

    __slots__ = ("_adopted", "_chain", "_complete", "_keys", "bs", "full", "paths", "toks")

    def __init__(self, toks: Sequence[int], bs: int) -> None:
        self.toks = toks
        self.bs = bs
        self.full = len(toks) // bs
        self._chain: list[int] = []
        self._complete = False
        self._adopted = False
        self._keys: dict[int, list[int]] = {}
        self.paths: dict[tuple[int, str], list[_Node]] = {}

    def block(self, i: int) -> tuple[int, ...]:
        """The tokens of block ``i`` (the last one may be partial)."""
        return tuple(self.toks[i * self.bs : (i + 1) * self.bs])

    def chain(self) -> list[int]:
        if not self._complete:
            toks, bs, full = self.toks, self.bs, self.full
            chain = list(self._chain)
            append = chain.append
            c = chain[-1] if chain else 0
            # Block tuples are not kept: many small objects for the garbage collector.
            for block in zip(*[iter(toks[len(chain) * bs : full * bs])] * bs, strict=False):
                c = hash((c, block))
                append(c)
            if len(toks) % bs:
                append(hash((c, tuple(toks[full * bs :]))))
            self._chain, self._complete = chain, True
        return self._chain

    def keys(self, root_key: int) -> list[int]:
        chain = self.chain()
        keys = self._keys.get(root_key, [])
        if len(keys) < len(chain):
            keys = self._keys[root_key] = keys + list(
                map(hash, zip(repeat(root_key), chain[len(keys) :], strict=False))
            )
        return keys

    def adopt(self, earlier: _Query) -> None:
        """Take over what ``earlier`` computed for the full blocks both sequences start with (once)."""
        if self._adopted or earlier is self or earlier.bs != self.bs:
            return
        self._adopted = True
        shared = _common_blocks(self.toks, earlier.toks, self.bs, min(self.full, earlier.full))
        if not shared:
            return
        if not self._complete and len(self._chain) < shared <= len(earlier._chain):
            self._chain = earlier._chain[:shared]
        for root_key, keys in earlier._keys.items():
            if len(self._keys.get(root_key, ())) < shared <= len(keys):
                self._keys[root_key] = keys[:shared]
        for pkey, path in earlier.paths.items():
            if len(self.paths.get(pkey, ())) < min(shared, len(path)):
                self.paths[pkey] = path[:shared]


def _common_blocks(a: Sequence[int], b: Sequence[int], bs: int, limit: int) -> int:
    """How many full blocks (at most ``limit``) ``a`` and ``b`` start with (C-speed slice compares)."""
    lo, hi = 0, limit
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
_queries_lock = threading.Lock()


def _query(toks: Sequence[int], bs: int) -> _Query:
    """The shared work on ``toks``; kept for the next call only for tuples, which cannot change."""
    if type(toks) is not tuple:
        return _Query(toks, bs)
    key = (id(toks), bs)
    with _queries_lock:
        q = _queries.get(key)
        if q is not None and q.toks is toks:
            _queries.move_to_end(key)
            return q
    q = _Query(toks, bs)
    with _queries_lock:
        # The entry holds the tuple, so its id cannot be reused while the entry lives.
        _queries[key] = q
        _queries.move_to_end(key)
        while len(_queries) > _QUERY_CACHE:
            _queries.popitem(last=False)
    return q


class MemoryIndex:
    """In-process ``PrefixIndex``, bounded by tokens held (LRU), entries and age. Thread-safe."""

    def __init__(
        self,
        *,
        block_size: int = 16,
        max_entries: int = 100_000,
        max_tokens: int = 50_000_000,
        max_age_seconds: float = 24 * 3600,
    ) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self._bs = block_size
        self._max_entries = max(max_entries, 0)
        self._max_tokens = max(max_tokens, 0)
        self._max_age = max_age_seconds
        # Marks are small but unbounded in number otherwise; a few per entry is plenty for breakpoints.
        self._max_marks = 4 * max(self._max_entries, 1)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._gen = 0
        self.clear()

    # -- public API ---------------------------------------------------------------------------------

    def clear(self) -> None:
        with self._lock:
            # Walks remembered by _Query.paths are per generation: a cleared index starts a new one.
            self._gen = next(_generations)
            self._roots: dict[str, _Node] = {}
            self._root_scope: dict[_Node, str] = {}  # to drop a root that has nothing left
            # key -> node, in LRU order (front = least recently touched). A path is touched leaf-first,
            # so every node sits before its ancestors and the front is always a leaf.
            self._nodes: OrderedDict[int, _Node] = OrderedDict()
            self._entries: OrderedDict[str, _Entry] = OrderedDict()
            self._marks: OrderedDict[tuple[_Node, tuple[int, ...]], None] = OrderedDict()
            self._tokens = 0
            # scope -> the _Query of its latest insert (see _Query.adopt), for the most recent scopes.
            self._last: OrderedDict[str, _Query] = OrderedDict()

    def stats(self) -> IndexStats:
        with self._lock:
            return IndexStats(entries=len(self._entries), tokens=self._tokens, blocks=len(self._nodes))

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match:
        toks = _as_seq(tokens)
        with self._lock:
            root = self._roots.get(scope)
            if root is None or not toks:
                return NO_MATCH
            bs = self._bs
            t = _threshold(now, ttl)
            path = self._held(scope, root, _query(toks, bs), len(toks) // bs)
            held_node = path[-1] if path else root
            # last_seen never grows with depth (an insert refreshes its whole path): live nodes are a prefix.
            live_depth = len(path)
            if path and path[-1].last_seen < t:
                live_depth = bisect_right(path, -t, key=_neg_last_seen)
            live_node = path[live_depth - 1] if live_depth else root

            start = len(path) * bs
            rest = toks[start : start + bs]
            held_ext, live_ext, best = _extend(held_node, rest, t) if rest else (0, 0, None)
            if live_node is not held_node:
                rest_live = toks[live_depth * bs : live_depth * bs + bs]
                live_ext = _extend(live_node, rest_live, t)[1]
            held = start + held_ext
            if held == 0:
                return NO_MATCH
            node = best if held_ext and best is not None else held_node
            entry = node.entry
            return Match(
                common_prefix_tokens=live_depth * bs + live_ext,
                held_prefix_tokens=held,
                entry_id=entry.id if entry else None,
                entry_tokens=entry.tokens if entry else 0,
                age_seconds=now - node.last_seen,
            )

    def insert(
        self,
        scope: str,
        tokens: Sequence[int],
        *,
        now: float,
        entry_id: str | None = None,
        ttl: float | None = None,  # for shared stores' own expiry; held prompts age by max_age here
    ) -> str:
        toks = _as_seq(tokens)
        with self._lock:
            if not toks:
                return entry_id if entry_id is not None else self._new_id()
            root = self._roots.get(scope)
            if root is None:
                root = self._roots[scope] = _Node(_scope_key(scope), None, array("i"), now)
                self._root_scope[root] = scope
            q = _query(toks, self._bs)
            path = self._build(scope, root, q, now)
            entry = self._entry_for(path[-1], len(toks), entry_id, now) if path else None
            eid = entry.id if entry else (entry_id if entry_id is not None else self._new_id())
            # Leaf first, so that each parent lands after its children in the LRU order.
            move = self._nodes.move_to_end
            for node in reversed(path):
                if now >= node.last_seen:
                    node.last_seen = now
                    node.entry = entry
                elif node.entry is None:
                    node.entry = entry
                parent = node.parent
                assert parent is not None and parent.kids is not None  # held nodes have a parent
                kids = parent.kids
                if kids.split is None:
                    # _bump_newest for an unsplit fan (the common case), inline.
                    newest = kids.newest
                    if newest is None or node.last_seen >= newest.last_seen:
                        kids.newest = node
                else:
                    _bump_newest(node)
                move(node.key)
            self._trim(now)
            # The full blocks, for the marks of this prompt (checked for evictions when reused), and for
            # the next prompt of the scope to adopt (tuples only: a list may change in between).
            q.paths[(self._gen, scope)] = path[: q.full]
            if type(toks) is tuple:
                last = self._last
                last[scope] = q
                last.move_to_end(scope)
                while len(last) > _LAST_SCOPES:
                    last.popitem(last=False)
            return eid

    def mark(
        self,
        scope: str,
        tokens: Sequence[int],
        positions: Iterable[int],
        *,
        now: float,
        ttl: float | None = None,
    ) -> None:
        toks = _as_seq(tokens)
        with self._lock:
            root = self._roots.get(scope)
            if root is None:
                return
            wanted = sorted({p for p in positions if 0 < p <= len(toks)})
            if not wanted:
                return
            bs = self._bs
            path = self._held(scope, root, _query(toks, bs), wanted[-1] // bs)
            for p in wanted:
                full = p // bs
                # A mark lives on the node of its full blocks: if they are not held, there is nothing to mark.
                if full > len(path):
                    continue
                node = path[full - 1] if full else root
                partial = tuple(toks[full * bs : p])
                if node.marks is None:
                    node.marks = {}
                node.marks[partial] = max(now, node.marks.get(partial, now))
                self._marks[(node, partial)] = None
                self._marks.move_to_end((node, partial))
            self._trim_marks(now)

    def marks(
        self, scope: str, tokens: Sequence[int], positions: Iterable[int], *, now: float, ttl: float
    ) -> dict[int, float]:
        toks = _as_seq(tokens)
        with self._lock:
            root = self._roots.get(scope)
            wanted = sorted({p for p in positions if 0 < p <= len(toks)})
            if root is None or not wanted:
                return {}
            bs = self._bs
            t = _threshold(now, ttl)
            path = self._held(scope, root, _query(toks, bs), wanted[-1] // bs)
            found: dict[int, float] = {}
            for p in wanted:
                full = p // bs
                if full > len(path):
                    continue
                node = path[full - 1] if full else root
                when = node.marks.get(tuple(toks[full * bs : p])) if node.marks else None
                if when is not None and when >= t:
                    found[p] = now - when
            return found

    # -- internals ----------------------------------------------------------------------------------

    def _new_id(self) -> str:
        return f"e{next(self._ids)}"

    def _held(self, scope: str, root: _Node, q: _Query, blocks: int) -> list[_Node]:
        """Nodes of the first ``blocks`` full blocks of the query that are held, stopping at the first miss.

        Starts from the nodes an earlier walk of the same tuple found (those still held: evicting a
        node evicts its subtree, so they are a prefix) and looks the rest up by key all at once.
        """
        pkey = (self._gen, scope)
        if pkey not in q.paths:
            earlier = self._last.get(scope)
            if earlier is not None:
                q.adopt(earlier)
        path = q.paths.get(pkey) or []
        if path and path[-1].parent is None:
            lo, hi = 0, len(path)
            while lo < hi:
                mid = (lo + hi) // 2
                if path[mid].parent is None:
                    hi = mid
                else:
                    lo = mid + 1
            path = path[:lo]
        start = len(path)
        if start >= blocks:
            return path[:blocks]
        looked = list(map(self._nodes.get, q.keys(root.key)[start:blocks]))
        # Up to the first miss, every key was found.
        found = cast(list[_Node], looked[: looked.index(None)] if None in looked else looked)
        if found:
            good = self._verified(q, start, path[-1] if path else root, found)
            path = path + found[:good]
        q.paths[pkey] = path
        return path

    def _verified(self, q: _Query, start: int, parent: _Node, found: list[_Node]) -> int:
        """How many of ``found`` (nodes looked up by key for blocks ``start``...) chain from ``parent``
        and hold exactly the query's tokens: a key proves nothing by itself (collisions, crafted prompts)."""
        n = len(found)
        parents = list(map(_PARENT, found))
        if parents[0] is not parent or parents[1:] != found[:-1]:
            n = next(i for i, (p, c) in enumerate(zip(parents, [parent, *found], strict=False)) if p is not c)
            found = found[:n]
        if not n:
            return 0
        data, sizes, _ = _packed(q, start, n)
        held = list(map(_TOKENS, found))
        # Same item size block by block and the same bytes overall: every node holds a full block (no
        # node holds more than one) equal to the query's. Otherwise compare block by block.
        if list(map(_ITEMSIZE, held)) == sizes and b"".join(map(array.tobytes, held)) == data:
            return n
        for i, tokens in enumerate(held):
            if tokens != _pack(q.block(start + i)):
                return i
        return n

    def _build(self, scope: str, root: _Node, q: _Query, now: float) -> list[_Node]:
        """Nodes of every block of the query (the last one may be partial), created where missing."""
        path = self._held(scope, root, q, q.full)
        cur = path[-1] if path else root
        path = list(path)
        nodes, keys = self._nodes, q.keys(root.key)
        for i in range(len(path), len(keys)):
            block = q.block(i)
            key = keys[i]
            node = nodes.get(key)
            if node is None:
                packed = _pack(block)
                node = _Node(key, cur, packed, now)
                nodes[key] = node
                self._tokens += len(packed)
                if cur.kids is None:
                    cur.kids = _Fan(0)
                _fan_add(cur.kids, node)
            elif node.parent is not cur or node.tokens != _pack(block):
                # A 64-bit key collision: keep the prefix stored so far rather than share a wrong node.
                break
            path.append(node)
            cur = node
        return path

    def _entry_for(self, leaf: _Node, length: int, entry_id: str | None, now: float) -> _Entry:
        current = (
            leaf.ends if leaf.ends is not None and self._entries.get(leaf.ends.id) is leaf.ends else None
        )
        if current is not None and (entry_id is None or entry_id == current.id):
            entry = current
        else:
            # A new id for an exact prompt replaces the old one: the latest request names the prompt.
            if current is not None:
                del self._entries[current.id]
            old = self._entries.pop(entry_id, None) if entry_id is not None else None
            if old is not None and old.leaf.ends is old:
                old.leaf.ends = None
            entry = _Entry(entry_id if entry_id is not None else self._new_id(), length, leaf, now)
        entry.last_used = max(entry.last_used, now)
        leaf.ends = entry
        self._entries[entry.id] = entry
        self._entries.move_to_end(entry.id)
        return entry

    def _trim(self, now: float) -> None:
        """Drop what is too old, then the least recently used blocks and entries over the caps."""
        oldest = now - self._max_age
        nodes = self._nodes
        while nodes:
            node = next(iter(nodes.values()))
            if node.last_seen >= oldest and self._tokens <= self._max_tokens:
                break
            self._evict(node)
        entries = self._entries
        while entries:
            entry = next(iter(entries.values()))
            if entry.last_used >= oldest and len(entries) <= self._max_entries:
                break
            self._drop_entry(entry)
        self._trim_marks(now)

    def _trim_marks(self, now: float) -> None:
        oldest = now - self._max_age
        while self._marks:
            node, partial = next(iter(self._marks))
            assert node.marks is not None
            if node.marks[partial] >= oldest and len(self._marks) <= self._max_marks:
                break
            del self._marks[(node, partial)]
            del node.marks[partial]
            if not node.marks:
                node.marks = None
                self._drop_root_if_empty(node)

    def _drop_entry(self, entry: _Entry) -> None:
        del self._entries[entry.id]
        if entry.leaf.ends is entry:
            entry.leaf.ends = None

    def _evict(self, node: _Node) -> None:
        """Remove a block and everything below it (a descendant without its parent is unreachable)."""
        parent = node.parent
        assert parent is not None
        _fan_remove(parent, node)
        stack = [node]
        while stack:
            n = stack.pop()
            if n.kids is not None:
                stack.extend(_fan_nodes(n.kids))
            del self._nodes[n.key]
            self._tokens -= len(n.tokens)
            if n.ends is not None and self._entries.get(n.ends.id) is n.ends:
                del self._entries[n.ends.id]
            if n.marks:
                for partial in n.marks:
                    del self._marks[(n, partial)]
            n.parent = n.kids = n.marks = n.ends = None
        self._drop_root_if_empty(parent)

    def _drop_root_if_empty(self, node: _Node) -> None:
        if node.parent is None and node.kids is None and node.marks is None:
            scope = self._root_scope.pop(node, None)
            if scope is not None:
                del self._roots[scope]

    def _assert_consistent(self) -> None:
        """Check the structural invariants (for tests): every held node is reachable, counts add up."""
        with self._lock:
            seen = 0
            tokens = 0
            for root in self._roots.values():
                stack = [root]
                while stack:
                    n = stack.pop()
                    if n is not root:
                        assert self._nodes.get(n.key) is n
                        assert n.parent is not None
                        if n.parent is not root:
                            assert n.parent.last_seen >= n.last_seen
                        seen += 1
                        tokens += len(n.tokens)
                    if n.kids is not None:
                        kids = _fan_nodes(n.kids)
                        assert kids, "empty fan left behind"
                        assert n.kids.newest is not None
                        assert max(k.last_seen for k in kids) == n.kids.newest.last_seen
                        assert all(k.parent is n for k in kids)
                        stack.extend(kids)
            assert seen == len(self._nodes), (seen, len(self._nodes))
            assert tokens == self._tokens
            order = list(self._nodes.values())
            rank = {id(n): i for i, n in enumerate(order)}
            for n in order:
                if n.parent is not None and n.parent.parent is not None:
                    assert rank[id(n.parent)] > rank[id(n)], "a parent must be more recent than its child"


def _as_seq(tokens: Sequence[int]) -> Sequence[int]:
    return tokens if isinstance(tokens, list | tuple) else list(tokens)


def _lcp(a: array[int], q: Sequence[int], start: int) -> int:
    n = min(len(a), len(q))
    i = start
    while i < n and a[i] == q[i]:
        i += 1
    return i


def _extend(parent: _Node, q: Sequence[int], t: float) -> tuple[int, int, _Node | None]:
    """Longest prefix of ``q`` (at most one block) that some child of ``parent`` starts with.

    Returns (held tokens, live tokens, the most recently seen child achieving the held length)."""
    fan = parent.kids
    held = live = 0
    best: _Node | None = None
    while fan is not None:
        # Every child under this fan starts with q[:depth]: its newest decides held/live at this depth.
        d = fan.depth
        newest = fan.newest
        if newest is not None:
            held, best = d, newest
            if newest.last_seen >= t:
                live = d
        if fan.split is None:
            for child in fan.items:
                n = _lcp(child.tokens, q, d)
                if n > held or (n == held and best is not None and child.last_seen > best.last_seen):
                    held, best = n, child
                if n > live and child.last_seen >= t:
                    live = n
            break
        if d >= len(q):
            break
        fan = fan.split.get(q[d])
    return held, live, best


def _fan_add(fan: _Fan, node: _Node) -> None:
    toks = node.tokens
    while True:
        newest = fan.newest
        if newest is None or node.last_seen >= newest.last_seen:
            fan.newest = node
        if fan.split is None:
            fan.items.append(node)
            if len(fan.items) > _FAN_OUT:
                _fan_split(fan)
            return
        if len(toks) == fan.depth:
            fan.items.append(node)
            return
        sub = fan.split.get(toks[fan.depth])
        if sub is None:
            sub = fan.split[toks[fan.depth]] = _Fan(fan.depth + 1)
        fan = sub


def _fan_split(fan: _Fan) -> None:
    items, fan.items, fan.split = fan.items, [], {}
    for node in items:
        if len(node.tokens) == fan.depth:
            fan.items.append(node)
            continue
        sub = fan.split.get(node.tokens[fan.depth])
        if sub is None:
            sub = fan.split[node.tokens[fan.depth]] = _Fan(fan.depth + 1)
        _fan_add(sub, node)


def _fan_path(parent: _Node, node: _Node) -> list[_Fan]:
    fan = parent.kids
    path: list[_Fan] = []
    while fan is not None:
        path.append(fan)
        if fan.split is None or len(node.tokens) == fan.depth:
            break
        fan = fan.split.get(node.tokens[fan.depth])
    return path


def _bump_newest(node: _Node) -> None:
    assert node.parent is not None
    for fan in _fan_path(node.parent, node):
        newest = fan.newest
        if newest is None or node.last_seen >= newest.last_seen:
            fan.newest = node


def _fan_remove(parent: _Node, node: _Node) -> None:
    path = _fan_path(parent, node)
    path[-1].items.remove(node)
    for i in range(len(path) - 1, -1, -1):
        fan = path[i]
        if not fan.items and not fan.split:
            if i == 0:
                parent.kids = None
            else:
                up = path[i - 1]
                assert up.split is not None
                del up.split[node.tokens[up.depth]]
        elif fan.newest is node:
            # Rare: LRU eviction takes the least recently touched node, which is rarely a fan's newest.
            fan.newest = max(_fan_nodes(fan), key=lambda n: n.last_seen)


def _fan_nodes(fan: _Fan) -> list[_Node]:
    out: list[_Node] = []
    stack = [fan]
    while stack:
        f = stack.pop()
        out.extend(f.items)
        if f.split:
            stack.extend(f.split.values())
    return out
