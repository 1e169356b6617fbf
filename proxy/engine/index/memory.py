"""The prefix index: longest common token prefix between a new prompt and recent prompts of its scope.

Layout (like vLLM's prefix cache): a prompt's tokens are cut into blocks of ``block_size``; each
block is a node keyed by ``hash((root key, hash of the blocks up to it))``; the root's key derives
from the scope. Identical prefixes therefore share their nodes (memory is paid once),
and scopes never share a node: every match is also checked by parent identity and token equality,
so neither a hash collision nor a crafted prompt can leak one scope's prefix into another's.

A lookup walks the new prompt's full blocks through one dict (cost ~ prompt length, not number of
stored prompts; a tuple's walk is shared by the calls on it and the next prompt of the scope starts
from the blocks it shares with the previous one, see ``_Query`` in ``query``), then extends into
the next block token by token against the children of the deepest matched node. Those children sit
in a small burst trie (``_Fan`` in ``trie``) keyed by the token at each depth, so a node with many
children (many tails diverging mid-block after a shared system prompt) still costs a few dict
probes, not a scan.

What is held, in which order, how an inserted path is refreshed (run by run, not block by block:
a conversation's next prompt costs its runs and new blocks, not its length) and how it is trimmed
to the caps lives in ``lru`` (``_Held``, the
base class of ``MemoryIndex``). The interface every backend shares (``PrefixIndex``, ``Match``,
``IndexStats``, ``NO_MATCH``) lives in ``base``; this module re-exports it, so that importing it
from here keeps working.

Time is always passed in (``now``); nothing reads the clock, so tests are deterministic.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import cast

from .base import NO_MATCH, IndexStats, Match, PrefixIndex
from .lru import _Held
from .query import _packed, _Query, _query, cached_query
from .rope import as_tokens, is_frozen
from .trie import _add_kid, _Entry, _extend, _Node, _pack, _Stamp

__all__ = ["NO_MATCH", "IndexStats", "Match", "MemoryIndex", "PrefixIndex"]

# Scopes whose latest prompt a MemoryIndex keeps for the next prompt of the scope to start from.
_LAST_SCOPES = 64


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


class MemoryIndex(_Held):
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
            self._reset()
            # scope -> the _Query of its latest insert (see _Query.adopt), for the most recent scopes.
            self._last: OrderedDict[str, _Query] = OrderedDict()

    def stats(self) -> IndexStats:
        with self._lock:
            return IndexStats(entries=len(self._entries), tokens=self._tokens, blocks=len(self._nodes))

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match:
        toks = as_tokens(tokens)
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
        toks = as_tokens(tokens)
        with self._lock:
            if not toks:
                return entry_id if entry_id is not None else self._new_id()
            root = self._roots.get(scope)
            if root is None:
                # A root is in no run: nothing evicts it but its last child leaving.
                root = self._roots[scope] = _Node(_scope_key(scope), None, array("i"), _Stamp(now, None, []))
                self._root_scope[root] = scope
            q = _query(toks, self._bs)
            fresh = _Stamp(now, None, [])
            path = self._build(scope, root, q, now, fresh)
            entry = self._entry_for(path[-1], len(toks), entry_id, now) if path else None
            eid = entry.id if entry else (entry_id if entry_id is not None else self._new_id())
            self._refresh(path, fresh, now, entry)
            self._trim(now)
            # The full blocks, for the marks of this prompt (checked for evictions when reused), and for
            # the next prompt of the scope to adopt (tuples and ropes only: a list may change in between).
            del path[q.full :]
            q.paths[(self._gen, scope)] = path
            if is_frozen(toks):
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
        toks = as_tokens(tokens)
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
        toks = as_tokens(tokens)
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
            # The earlier prompt of the same conversation when the counter says which one it is
            # (many conversations of a tenant share its scope: the scope's last one is most often
            # another conversation's), else the scope's last one.
            earlier = cached_query(q.origin[0], self._bs) if q.origin is not None else None
            if earlier is None or earlier is q:
                earlier = self._last.get(scope)
            if earlier is not None:
                q.adopt(earlier)
        path = q.take_path(pkey)
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
            # The query's own list when it is all of it (lookup and insert): not copied.
            return path if start == blocks else path[:blocks]
        looked = list(map(self._nodes.get, q.keys(root.key)[start:blocks]))
        # Up to the first miss, every key was found.
        found = cast(list[_Node], looked[: looked.index(None)] if None in looked else looked)
        if found:
            good = self._verified(q, start, path[-1] if path else root, found)
            # Grown in place: the list is the query's own (``adopt`` and ``insert`` store copies, and
            # no caller keeps it), and a copy would cost the conversation's whole path.
            path.extend(found[:good])
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

    def _build(self, scope: str, root: _Node, q: _Query, now: float, fresh: _Stamp) -> list[_Node]:
        """Nodes of every block of the query (the last one may be partial), created where missing
        (into the run ``fresh``)."""
        # The walk's own list of full blocks, grown in place (``insert`` cuts the partial block off
        # again): a copy would cost the conversation's whole path on every insert.
        path = self._held(scope, root, q, q.full)
        cur = path[-1] if path else root
        nodes, keys = self._nodes, q.keys(root.key)
        # The blocks to build, sliced from one tuple of them: a rope's slice is a call of its own.
        bs, first = q.bs, len(path)
        rest = tuple(q.toks[first * bs :])
        for i in range(first, len(keys)):
            block = rest[(i - first) * bs : (i - first + 1) * bs]
            key = keys[i]
            node = nodes.get(key)
            if node is None:
                packed = _pack(block)
                node = _Node(key, cur, packed, fresh)
                node.pos = len(fresh.nodes)
                fresh.nodes.append(node)
                fresh.end += 1
                nodes[key] = node
                self._tokens += len(packed)
                _add_kid(cur, node)
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
