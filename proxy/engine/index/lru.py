"""What a ``MemoryIndex`` holds, in LRU order, and how it is trimmed to its caps (``_Held``).

Held: the root node of each scope, every block node by key, the entries (stored prompts) and the
marks (cache writes at exact positions), each in least-recently-used order. Blocks are ordered by
their runs (``trie._Stamp``): a heap of (time, touch sequence) whose least item is the run to trim
from, bottom node first (a run's nodes are never older than what hangs below them, and a run is
touched after the runs below it, so the least item is always at the bottom of the tree). Stale heap
items (a run touched again, or gone) are skipped and, past twice the live runs, rebuilt away. Caps:
tokens held in distinct blocks, entries, marks, and age (``max_age_seconds``). ``MemoryIndex``
subclasses ``_Held`` and sets the caps; every method here runs under its lock.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import OrderedDict

from .trie import _bump_newest, _Entry, _fan_remove, _kid_nodes, _newest_kid, _Node, _Stamp


class _Held:
    """The held state of a ``MemoryIndex`` and its eviction; ``_reset`` empties it."""

    _lock: threading.Lock
    _max_entries: int
    _max_tokens: int
    _max_age: float
    _max_marks: int

    def _reset(self) -> None:
        self._roots: dict[str, _Node] = {}
        self._root_scope: dict[_Node, str] = {}  # to drop a root that has nothing left
        self._nodes: dict[int, _Node] = {}  # key -> node
        # The live runs, and the heap of (time, sequence, run) that orders them (see the module doc).
        self._stamps: dict[_Stamp, None] = {}
        self._heap: list[tuple[float, int, _Stamp]] = []
        self._seq = itertools.count(1)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._marks: OrderedDict[tuple[_Node, tuple[int, ...]], None] = OrderedDict()
        self._tokens = 0

    def _trim(self, now: float) -> None:
        """Drop what is too old, then the least recently used blocks and entries over the caps."""
        oldest = now - self._max_age
        heap = self._heap
        while heap:
            t, seq, stamp = heap[0]
            if stamp.seq != seq or stamp.start >= stamp.end:
                heapq.heappop(heap)  # touched again since, or gone
                continue
            if t >= oldest and self._tokens <= self._max_tokens:
                break
            self._evict(stamp.nodes[stamp.end - 1])
        entries = self._entries
        while entries:
            entry = next(iter(entries.values()))
            if entry.last_used >= oldest and len(entries) <= self._max_entries:
                break
            self._drop_entry(entry)
        self._trim_marks(now)

    def _refresh(self, path: list[_Node], fresh: _Stamp, now: float, entry: _Entry | None) -> None:
        """Mark a path just inserted as seen ``now`` by ``entry``, run by run (``trie._Stamp``).

        A run the path goes through whole is updated once; a run it leaves part-way is split, the
        smaller side moving to a stamp of its own; ``fresh`` holds the blocks this insert created.
        At each run's head the parent's fans learn their newest child (inside a run they already
        point along it: any other insert through a run's node would have split the run there).
        The cost is the runs on the path plus what moved, not the path's length.
        """
        touched: list[_Stamp] = []
        i, n = 0, len(path)
        while i < n:
            node = path[i]
            stamp = node.stamp
            if stamp is fresh:
                break
            at = node.pos  # the path enters a run at its top (its parent is in another)
            run = stamp.end - at
            k = _shared(path, i, stamp.nodes, at, min(run, n - i))
            newer = now >= stamp.t
            if k < run and k >= run - k:
                # Keep the stamp for the (longer) part on the path; the rest keeps the old time.
                rest = _Stamp(stamp.t, stamp.entry, stamp.nodes[at + k : stamp.end])
                rest.adopt()
                stamp.end = at + k
                del stamp.nodes[stamp.end :]
                self._touch(rest)
            elif k < run:
                # The part on the path is the shorter: it moves to a stamp of its own.
                moved = _Stamp(stamp.t, stamp.entry, stamp.nodes[at : at + k])
                moved.adopt()
                stamp.start = at + k
                stamp = moved
            if newer:
                stamp.t, stamp.entry = now, entry
            elif stamp.entry is None:
                stamp.entry = entry
            touched.append(stamp)
            _newest(node)
            i += k
        if fresh.nodes:
            last = touched[-1] if touched else None
            if last is not None and last.end == len(last.nodes) and last.nodes[-1] is fresh.nodes[0].parent:
                # The new blocks continue the last run: they join it, so a conversation that grows
                # by a turn keeps one run rather than gaining one per turn.
                first = len(last.nodes)
                last.nodes.extend(fresh.nodes)
                last.end = len(last.nodes)
                last.adopt(first)
            else:
                fresh.entry = entry
                touched.append(fresh)
        # Bottom first: a run leaves the eviction heap before the runs it hangs from.
        for stamp in reversed(touched):
            self._touch(stamp)

    def _touch(self, stamp: _Stamp) -> None:
        """Put a run (new, or refreshed) in its place in the eviction order: after what it holds up."""
        self._stamps[stamp] = None
        stamp.seq = next(self._seq)
        heapq.heappush(self._heap, (stamp.t, stamp.seq, stamp))
        if len(self._heap) > 2 * len(self._stamps) + 64:
            self._heap = [(s.t, s.seq, s) for s in self._stamps]
            heapq.heapify(self._heap)

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
                stack.extend(_kid_nodes(n.kids))
            del self._nodes[n.key]
            self._tokens -= len(n.tokens)
            stamp = n.stamp
            # Everything of its run below it goes too (descendants): the run ends where it was.
            stamp.end = min(stamp.end, n.pos)
            if stamp.end <= stamp.start:
                self._stamps.pop(stamp, None)
                # A dead run lets go of its nodes and entry: a node, its run and the run's entry
                # (whose leaf is a node) refer to each other, and those cycles would leave every
                # evicted block to the garbage collector.
                stamp.nodes, stamp.entry = [], None
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
                        kids = _kid_nodes(n.kids)
                        assert kids, "empty fan left behind"
                        newest = _newest_kid(n.kids)
                        assert newest is not None
                        assert max(k.last_seen for k in kids) == newest.last_seen
                        assert all(k.parent is n for k in kids)
                        stack.extend(kids)
            assert seen == len(self._nodes), (seen, len(self._nodes))
            assert tokens == self._tokens
            for stamp in self._stamps:
                assert stamp.start < stamp.end, "a dead run left live"
                for i in range(stamp.start, stamp.end):
                    node = stamp.nodes[i]
                    assert node.stamp is stamp and node.pos == i
                    assert self._nodes.get(node.key) is node
                    if i > stamp.start:
                        assert node.parent is stamp.nodes[i - 1], "a run is one stretch of a path"
            for n in self._nodes.values():
                assert n.stamp in self._stamps and n.stamp.start <= n.pos < n.stamp.end
                p = n.parent
                if p is not None and p.parent is not None and p.stamp is not n.stamp:
                    # The parent's run leaves the heap after the child's: eviction meets leaves first.
                    assert (p.stamp.t, p.stamp.seq) > (n.stamp.t, n.stamp.seq), (
                        "a parent must outlast its child"
                    )


def _shared(path: list[_Node], i: int, run: list[_Node], pos: int, m: int) -> int:
    """How many of ``path[i:i+m]`` are ``run[pos:pos+m]``, node for node (``path[i]`` is ``run[pos]``).

    Both are stretches of one path down the tree (each node the parent of the next: a walk's path is
    verified so, a run is one by construction), and a node has one parent: where the two hold the
    same node, they hold the same nodes above it. So the count is where identity stops, found by
    bisection on single nodes, never by a copy of either list (that would touch every node of a
    long conversation on each insert).
    """
    if path[i + m - 1] is run[pos + m - 1]:
        return m  # the usual case: the path goes through the whole run
    lo, hi = 1, m - 1  # path[i + lo - 1] is run[pos + lo - 1]; path[i + hi] is not run[pos + hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if path[i + mid - 1] is run[pos + mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _newest(node: _Node) -> None:
    """``node`` was just seen: its parent's fans name it their newest child where it is."""
    parent = node.parent
    assert parent is not None and parent.kids is not None  # held nodes have a parent
    kids = parent.kids
    if isinstance(kids, _Node):
        return  # the one child is its parent's newest
    if kids.split is None:
        newest = kids.newest
        if newest is None or node.last_seen >= newest.last_seen:
            kids.newest = node
    else:
        _bump_newest(node)
