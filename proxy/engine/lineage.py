"""Earlier requests related by a leading block, for a request that shares no prefix with any of them.

The model-blind index finds the earlier request a miss is compared with by the longest common token
prefix. A change at the very start of a prompt leaves no common prefix at all: a tools block or an
output schema removed from (or added in front of) the system prompt, a system prompt dropped. The
request would then read as ``cold`` although its system prompt and history are an earlier request's.

So each remembered request also registers the first block of each of its leading areas (tools,
output schema, system, first message); a request the index matches with nothing looks its own area
heads up there. Only blocks of at least ``MIN_HEAD_TOKENS`` stream tokens count: a short shared
block ("Hi") is a coincidence, not a lineage. Bounded like the history it points into; an id whose
entry left the history resolves to nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from .prompt import Prompt

MIN_HEAD_TOKENS = 32
_MAX_HEADS = 4


def _group(kind: str) -> str:
    return kind if kind in ("tool", "schema", "system") else "messages"


def area_heads(prompt: Prompt, spans: Sequence[tuple[int, int]]) -> list[str]:
    """Digests of the first block of each leading area, long enough to identify a lineage."""
    heads: list[str] = []
    previous: str | None = None
    for seg, (start, end) in zip(prompt.segments, spans, strict=False):
        group = _group(seg.kind)
        if group != previous:
            if end - start >= MIN_HEAD_TOKENS:
                heads.append(seg.digest)
            previous = group
            if group == "messages" or len(heads) >= _MAX_HEADS:
                break
    return heads


class Lineage:
    """(scope, head digest) → id of the latest request with that head. Thread-safe, bounded."""

    def __init__(self, size: int) -> None:
        self._size = max(1, size)
        self._heads: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def register(self, scope: str, heads: Sequence[str], entry_id: str) -> None:
        with self._lock:
            for digest in heads:
                key = (scope, digest)
                self._heads[key] = entry_id
                self._heads.move_to_end(key)
            while len(self._heads) > self._size:
                self._heads.popitem(last=False)

    def candidates(self, scope: str, heads: Sequence[str]) -> list[str]:
        """Entry ids sharing one of ``heads``, the first head's first."""
        with self._lock:
            found = [self._heads.get((scope, digest)) for digest in heads]
        return [entry for entry in found if entry is not None]
