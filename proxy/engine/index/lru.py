"""What a ``MemoryIndex`` holds, in LRU order, and how it is trimmed to its caps (``_Held``).

Held: the root node of each scope, every block node by key, the entries (stored prompts) and the
marks (cache writes at exact positions), each in least-recently-used order. Caps: tokens held in
distinct blocks, entries, marks, and age (``max_age_seconds``). ``MemoryIndex`` subclasses ``_Held``
and sets the caps; every method here runs under its lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .trie import _Entry, _fan_nodes, _fan_remove, _Node


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
        # key -> node, in LRU order (front = least recently touched). A path is touched leaf-first,
        # so every node sits before its ancestors and the front is always a leaf.
        self._nodes: OrderedDict[int, _Node] = OrderedDict()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._marks: OrderedDict[tuple[_Node, tuple[int, ...]], None] = OrderedDict()
        self._tokens = 0

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
