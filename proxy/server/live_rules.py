"""The linter's request rules applied to live requests (``findings_total{code, reason}``).

Rules about request files look at tools, system prompts and breakpoints, which an agent repeats
on every turn. Linting a 400 KB body costs tens of milliseconds, so findings are memoised by what
the rules read (``_key``): a new turn of a known conversation costs a dictionary lookup.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from itertools import compress, repeat
from operator import attrgetter, is_not

from cachewarden.proxy.engine.prompt import Prompt, Segment

_MEMO_ENTRIES = 4096
# Prompts whose breakpoints are kept for the next prompt of their conversation (``_marks_of``).
_BREAKPOINT_ENTRIES = 1024
# Linted once at start-up: the linter builds its tables on first use (~0.4 s, most of it for a
# Messages body with tools), which would otherwise be the first requests' analysis time.
_WARM_BODIES = (
    '{"model":"gpt-4.1","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]}',
    '{"model":"claude-sonnet-5","max_tokens":8,"system":"s","messages":[{"role":"user","content":"hi"}],'
    '"tools":[{"name":"t","description":"d","input_schema":{"type":"object","properties":{}}}]}',
)
# Linting a body costs ~60 ms per MiB: larger bodies are not linted live (the findings of their
# tools and system prompt come from the smaller requests of the same agent, or from `cachewarden lint`).
MAX_LINT_BYTES = 4 * 2**20


def _marks(segs: Sequence[Segment], start: int = 0) -> list[int]:
    """Positions (from ``start``) of the segments with a breakpoint: C-level maps, no Python loop."""
    return list(
        compress(range(start, len(segs)), map(is_not, map(_CACHE_CONTROL, segs[start:]), repeat(None)))
    )


def _key(prompt: Prompt, marks: list[int] | None = None) -> str:
    """What the request rules read: tools, schemas and system text (top-level and leading system /
    developer messages), whether one turn follows them, and the breakpoints with every segment up
    to the last one (a breakpoint's findings depend on the tokens before it). A turn appended to a
    known conversation without moving a breakpoint has the same key. C-level maps and joins only: a
    long conversation costs no Python loop over its segments. ``marks``: the breakpoints, when
    known (``LiveRules._marks_of`` takes the earlier prompt's for the segments both share)."""
    segs = prompt.segments
    first = next((i for i, seg in enumerate(segs) if not _prefix(seg)), len(segs))
    if marks is None:
        marks = _marks(segs)
    upto = max(first, marks[-1] + 1 if marks else 0)
    head, last = (segs[first].message_index, segs[-1].message_index) if first < len(segs) else (None, None)
    turns = last - head + 1 if head is not None and last is not None else 0
    h = hashlib.blake2b(digest_size=16)
    h.update(
        f"{prompt.provider}\x00{prompt.model}\x00{prompt.auto_cache}\x00{turns == 1}\x00{marks}".encode()
    )
    h.update("\x00".join(map(_DIGEST, segs[:upto])).encode())
    return h.hexdigest()


def _prefix(seg: Segment) -> bool:
    return seg.kind in ("tool", "schema") or seg.message_index is None or seg.role in ("system", "developer")


_DIGEST = attrgetter("digest")
_CACHE_CONTROL = attrgetter("cache_control")


class LiveRules:
    """``findings(prompt, body) -> [(code, reason)]`` with the lint rule set (info findings skipped)."""

    def __init__(self) -> None:
        # Imported here so that a proxy without the linter's data still starts (fail open).
        from cachewarden.linter.engine import lint_source

        self._lint = lint_source
        for body in _WARM_BODIES:
            try:
                lint_source("request.json", body)
            except Exception:  # a broken rule shows on the first request (counted), not at start-up
                break
        self._memo: OrderedDict[str, tuple[tuple[str, str], ...]] = OrderedDict()
        self._lock = threading.Lock()
        # The breakpoints of recent prompts, by their segments' identity (the entry holds them).
        self._breakpoints: OrderedDict[int, tuple[tuple[Segment, ...], list[int]]] = OrderedDict()

    def _marks_of(self, prompt: Prompt) -> list[int]:
        """``_marks(prompt.segments)``: the earlier prompt's for the segments the two share when the
        prompt has a basis (they are that prompt's own segments: ``reading``), only the rest read.
        A conversation's next turn then costs its new segments, not a map over its history
        (~0.1 ms at 1,000 messages)."""
        segs = prompt.segments
        basis = prompt.basis
        earlier = basis.prompt() if basis is not None else None
        with self._lock:
            known = self._breakpoints.get(id(earlier.segments)) if earlier is not None else None
        if basis is not None and earlier is not None and known is not None and known[0] is earlier.segments:
            shared = min(basis.shared, len(segs), len(earlier.segments))
            marks = [m for m in known[1] if m < shared] + _marks(segs, shared)
        else:
            marks = _marks(segs)
        with self._lock:
            self._breakpoints[id(segs)] = (segs, marks)
            while len(self._breakpoints) > _BREAKPOINT_ENTRIES:
                self._breakpoints.popitem(last=False)
        return marks

    def findings(self, prompt: Prompt, body: bytes) -> tuple[tuple[str, str], ...]:
        if len(body) > MAX_LINT_BYTES:
            return ()
        key = _key(prompt, self._marks_of(prompt))
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None:
                self._memo.move_to_end(key)
                return hit
        text = body.decode("utf-8", "replace")
        found = tuple(
            (f.code, f.reason) for f in self._lint("request.json", text) if f.severity in ("error", "warning")
        )
        with self._lock:
            self._memo[key] = found
            while len(self._memo) > _MEMO_ENTRIES:
                self._memo.popitem(last=False)
        return found
