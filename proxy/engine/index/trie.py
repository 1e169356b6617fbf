"""The blocks of the in-memory prefix index (``_Node``) and the burst tries that hold their children.

A node is one distinct block of a held prompt (its tokens packed by ``_pack``); its children are the
blocks that follow it in some held prompt. A node with one child (most of them: a conversation's
path is a chain) holds it directly; from the second on they sit in a small burst trie (``_Fan``) keyed
by the token at each depth, so a node with many children (many tails diverging mid-block after a
shared system prompt) still costs a few dict probes, not a scan. Each fan knows its most recently
seen child (``newest``): ``_extend``, the exact token-by-token extension of a lookup into the block
after its deepest matched node, reads held and live lengths off it without visiting the others.

The names keep their underscore: they are internals of ``MemoryIndex`` (``memory``, ``lru``,
``query``), not part of the index's API.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

# A fan (group of children sharing their first ``depth`` tokens) splits by the next token once it
# holds more children than this: short lists scan faster than dicts, long ones must not be scanned.
_FAN_OUT = 8


class _Entry:
    """Metadata of one stored prompt (one per distinct token sequence unless ids say otherwise)."""

    __slots__ = ("id", "last_used", "leaf", "tokens")

    def __init__(self, entry_id: str, tokens: int, leaf: _Node, now: float) -> None:
        self.id = entry_id
        self.tokens = tokens
        self.leaf = leaf
        self.last_used = now


class _Stamp:
    """When a run of nodes was last seen, and the latest prompt that went through it.

    A run is a stretch of one path, top down (``nodes[start:end]``), refreshed together: an insert
    that goes through a whole run updates its stamp once instead of every node (a conversation's
    next prompt goes through its previous one's run: the cost of a refresh does not grow with the
    conversation). An insert that goes through only the top of a run splits it; the smaller side
    moves to a stamp of its own. ``seq`` orders stamps touched at the same time for eviction.
    """

    __slots__ = ("end", "entry", "nodes", "seq", "start", "t")

    def __init__(self, t: float, entry: _Entry | None, nodes: list[_Node]) -> None:
        self.t = t
        self.entry = entry
        self.nodes = nodes
        self.start = 0
        self.end = len(nodes)
        self.seq = 0

    def adopt(self, first: int = 0) -> None:
        """Make ``nodes`` (from ``first`` on) point to this stamp, at their positions."""
        for i in range(first, len(self.nodes)):
            node = self.nodes[i]
            node.stamp, node.pos = self, i


class _Node:
    """One distinct block. ``entry`` is the most recent prompt that went through it (for Match),
    ``ends`` the prompt that ends exactly here (so identical prompts reuse one entry). Its time and
    entry are its run's (``_Stamp``), at ``pos`` in the run."""

    __slots__ = ("ends", "key", "kids", "marks", "parent", "pos", "stamp", "tokens")

    def __init__(self, key: int, parent: _Node | None, tokens: array[int], stamp: _Stamp) -> None:
        self.key = key
        self.parent = parent
        self.tokens = tokens
        self.stamp = stamp
        self.pos = 0
        # Its children: none, the one child itself (most nodes: a conversation's path is a chain,
        # and a fan of one is two more objects to allocate and for the collector to traverse), or
        # a fan once a second child comes.
        self.kids: _Fan | _Node | None = None
        self.ends: _Entry | None = None
        self.marks: dict[tuple[int, ...], float] | None = None

    @property
    def last_seen(self) -> float:
        return self.stamp.t

    @property
    def entry(self) -> _Entry | None:
        return self.stamp.entry


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
    if isinstance(fan, _Node):  # one child: what a fan of one would answer
        n = _lcp(fan.tokens, q, 0)
        return n, n if fan.last_seen >= t else 0, fan
    assert fan is None or isinstance(fan, _Fan)
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


def _add_kid(parent: _Node, node: _Node) -> None:
    """Hang ``node`` below ``parent``: as its one child, or in its fan (made at the second child)."""
    kids = parent.kids
    if kids is None:
        parent.kids = node
        return
    if isinstance(kids, _Node):
        fan = _Fan(0)
        _fan_add(fan, kids)
        parent.kids = kids = fan
    assert isinstance(kids, _Fan)
    _fan_add(kids, node)


def _kid_nodes(kids: _Fan | _Node | None) -> list[_Node]:
    """Every child, whatever holds them."""
    if kids is None:
        return []
    if isinstance(kids, _Node):
        return [kids]
    assert isinstance(kids, _Fan)
    return _fan_nodes(kids)


def _newest_kid(kids: _Fan | _Node) -> _Node | None:
    """The most recently seen child."""
    return kids if isinstance(kids, _Node) else kids.newest


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
    assert not isinstance(fan, _Node)  # a fan's path (one child alone has none)
    path: list[_Fan] = []
    while fan is not None:
        path.append(fan)
        if fan.split is None or len(node.tokens) == fan.depth:
            break
        fan = fan.split.get(node.tokens[fan.depth])
    return path


def _bump_newest(node: _Node) -> None:
    assert node.parent is not None
    if node.parent.kids is node:
        return  # the one child is its own parent's newest
    for fan in _fan_path(node.parent, node):
        newest = fan.newest
        if newest is None or node.last_seen >= newest.last_seen:
            fan.newest = node


def _fan_remove(parent: _Node, node: _Node) -> None:
    if parent.kids is node:
        parent.kids = None
        return
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
