"""Structure: the area-by-area comparison of two prompts, and the tools and system-block reasons.

Prompts are split into areas in cache order — tools, output schema, system, messages — and each
area is compared on its own, so several independent changes are all reported (tools reordered
*and* a timestamp in the system prompt). ``Pair`` holds both prompts with their per-area segment
indexes and maps a segment, or a character inside one, to its position in the previous prompt's
token stream: where, because of a change, the cache stops matching.

Inside an area, structural changes are recognised on the segment digests (tools added / removed /
reordered, system or schema blocks swapped, added or removed); a segment changed in place is
handed to ``values.text_regions``, which classifies the raw text of both sides region by region.
The messages area (``history``) and the request-wide reasons (``model_params``) build on the same
``Pair`` and ``Finding``.

The module is long because the areas of a prompt (scanned, or grown from its basis) and the
findings of the tools, schema and system areas all work on the one area model ``Pair`` holds.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter, is_

from cachewarden.proxy.engine.cache_model import TokenStream
from cachewarden.proxy.engine.prompt import Prompt, Segment

from .values import Region, json_same, short, text_regions

SYSTEM_ROLES = frozenset({"system", "developer"})
AREAS = ("tools", "schema", "system", "messages")


@dataclass(frozen=True, slots=True)
class Finding:
    """A reason before costing: its code, where it is, and where in the previous stream it stops the cache."""

    code: str
    segment: str | None
    offset: int | None
    position: int  # previous-stream position where the cache stops because of it
    detail: str


def _area_labels(segments: Sequence[Segment]) -> list[str]:
    """Per segment: tools, schema, system or messages (leading system / developer messages are system)."""
    labels: list[str] = []
    leading = True
    for seg in segments:
        if seg.kind == "tool":
            labels.append("tools")
        elif seg.kind == "schema":
            labels.append("schema")
        elif seg.message_index is None or (leading and seg.role in SYSTEM_ROLES):
            labels.append("system")
        else:
            leading = False
            labels.append("messages")
    return labels


_KIND = attrgetter("kind")
_MESSAGE_INDEX = attrgetter("message_index")


# The areas of the latest prompts, by their segments (held, so that the id stays theirs): a request's
# previous prompt was the next one of the pair before, so each prompt is scanned once.
_AREAS_HELD = 64
_areas_memo: OrderedDict[int, tuple[tuple[Segment, ...], dict[str, Sequence[int]]]] = OrderedDict()
_areas_lock = threading.Lock()


# Prompts read from an earlier one (``Prompt.basis``), by their segments: (segments, the earlier
# prompt's, how many leading ones are the earlier prompt's own), for ``next_index`` to skip.
_bases: OrderedDict[int, tuple[tuple[Segment, ...], tuple[Segment, ...], int]] = OrderedDict()


def _areas(prompt: Prompt) -> dict[str, Sequence[int]]:
    """Segment indexes per area (memoised per prompt: see ``_areas_memo``)."""
    segs = prompt.segments
    basis = prompt.basis
    earlier = basis.prompt() if basis is not None else None
    with _areas_lock:
        held = _areas_memo.get(id(segs))
        if basis is not None and earlier is not None:
            _bases[id(segs)] = (segs, earlier.segments, min(basis.shared, len(segs), len(earlier.segments)))
            _bases.move_to_end(id(segs))
            while len(_bases) > _AREAS_HELD:
                _bases.popitem(last=False)
    if held is not None and held[0] is segs:
        return held[1]
    areas = _grown_areas(prompt) or _scan_areas(segs)
    with _areas_lock:
        _areas_memo[id(segs)] = (segs, areas)
        while len(_areas_memo) > _AREAS_HELD:
            _areas_memo.popitem(last=False)
    return areas


def _grown_areas(prompt: Prompt) -> dict[str, Sequence[int]] | None:
    """The areas of a prompt read from an earlier one (``Prompt.basis``) whose areas are known and
    end in messages, when all it adds after what they share are messages: the earlier areas with a
    longer messages range (only the new segments are looked at)."""
    basis = prompt.basis
    earlier = basis.prompt() if basis is not None else None
    if basis is None or earlier is None:
        return None
    with _areas_lock:
        held = _areas_memo.get(id(earlier.segments))
    if held is None or held[0] is not earlier.segments:
        return None
    messages = held[1]["messages"]
    if not isinstance(messages, range) or messages.stop != len(earlier.segments):
        return None
    shared = min(basis.shared, len(earlier.segments), len(prompt.segments))
    # A basis names segments that are the earlier prompt's (``engine.reading`` proves it), so they
    # are not compared again. A message past the leading system ones must be among them: every
    # later message is then in the messages area.
    if messages.start >= shared:
        return None
    rest = prompt.segments[shared:]
    kinds = list(map(_KIND, rest))
    if "tool" in kinds or "schema" in kinds or None in map(_MESSAGE_INDEX, rest):
        return None
    return {**held[1], "messages": range(messages.start, len(prompt.segments))}


def _scan_areas(segs: tuple[Segment, ...]) -> dict[str, Sequence[int]]:
    """Segment indexes per area. The messages area is a range when nothing but messages follows the
    first one (what every adapter produces), found with C-speed scans: a long history costs no
    Python loop over its segments."""
    first = next((i for i, seg in enumerate(segs) if _area_labels([seg]) == ["messages"]), len(segs))
    head = _area_labels(segs[:first])
    rest = segs[first:]
    kinds = list(map(_KIND, rest))
    if "tool" in kinds or "schema" in kinds or None in map(_MESSAGE_INDEX, rest):
        labels = _area_labels(segs)  # an unusual order: label every segment
        return {a: [i for i, x in enumerate(labels) if x == a] for a in AREAS}
    areas: dict[str, Sequence[int]] = {a: [i for i, x in enumerate(head) if x == a] for a in AREAS}
    areas["messages"] = range(first, len(segs))
    return areas


class Pair:
    """Both prompts, their token streams and the per-area segment indexes."""

    def __init__(
        self, previous: Prompt, previous_tp: TokenStream, next: Prompt, next_tp: TokenStream
    ) -> None:
        self.prev, self.cur = previous, next
        self.ptp, self.ntp = previous_tp, next_tp
        self.n_prev = len(previous_tp.tokens)
        self.p_area, self.n_area = _areas(previous), _areas(next)

    def start(self, i: int) -> int:
        """Previous-stream position of segment ``i`` (the stream's end past the last one)."""
        spans = self.ptp.spans
        return spans[i][0] if i < len(spans) else self.n_prev

    def at_char(self, i: int, offset: int) -> int:
        """Previous-stream position of character ``offset`` of segment ``i`` (proportional estimate)."""
        if i >= len(self.ptp.spans):
            return self.n_prev
        s, e = self.ptp.spans[i]
        n = len(self.prev.segments[i].text)
        return s if n == 0 else s + (e - s) * min(offset, n) // n

    def area_start(self, area: str, k: int) -> int:
        """Position of the k-th previous segment of ``area``, or of the area's end when k is past it."""
        idx = self.p_area[area]
        if k < len(idx):
            return self.start(idx[k])
        if idx:
            return self.ptp.spans[idx[-1]][1] if idx[-1] < len(self.ptp.spans) else self.n_prev
        # An empty area starts where the next non-empty area starts.
        later = [self.p_area[a][0] for a in AREAS[AREAS.index(area) + 1 :] if self.p_area[a]]
        return self.start(later[0]) if later else self.n_prev


def in_place(pair: Pair, i: int, j: int, fallback: str, what: str) -> list[Finding]:
    """Findings for previous segment ``i`` changed in place into next segment ``j``."""
    a, b = pair.prev.segments[i], pair.cur.segments[j]
    if a.kind != b.kind or a.role != b.role:
        return [
            Finding(fallback, b.path, 0, pair.start(i), f"{what}: {a.kind} ({a.role}) → {b.kind} ({b.role})")
        ]
    if a.text == b.text:
        # Same text, other content: an image, a file, an opaque reasoning item.
        code = "content-changed" if a.kind in ("image", "document", "other") else fallback
        return [Finding(code, b.path, 0, pair.start(i), f"{what}: the {a.kind} was replaced")]
    found: list[Finding] = []
    for region in text_regions(a.text, b.text):
        pos = pair.at_char(i, region.offset_previous)
        if region.code:
            found.append(Finding(region.code, b.path, region.offset_next, pos, f"{region.detail} ({what})"))
        else:
            found.append(
                Finding(
                    fallback,
                    b.path,
                    region.offset_next,
                    pos,
                    f"{what}: {_edit_detail(a.text, b.text, region)}",
                )
            )
    return found


def _edit_detail(a: str, b: str, region: Region) -> str:
    pa, pb = region.offset_previous, region.offset_next
    return f"text changed at offset {pb}: {short(a[pa : pa + 40])} → {short(b[pb : pb + 40])}"


def next_index(prev: Sequence[Segment], cur: Sequence[Segment]) -> int:
    """Index of the first segment whose digest differs (``min(len)`` when none does).

    Segments a conversation's next prompt took over from the previous one are the same objects
    (``engine.reading``): the ones its basis names are not looked at (``_bases``, filled by
    ``_areas``), the others skipped at C speed where identical, digests compared where they are not.
    """
    n = min(len(prev), len(cur))
    start = 0
    with _areas_lock:
        known = _bases.get(id(cur))
    if known is not None and known[0] is cur and known[1] is prev:
        start = min(known[2], n)
        if start == n:
            return n
    same = list(map(is_, prev[start:n], cur[start:n]))
    i = 0
    while True:
        try:
            i = same.index(False, i)
        except ValueError:
            return n
        if prev[start + i].digest != cur[start + i].digest:
            return start + i
        i += 1


def next_index_str(a: Sequence[str], b: Sequence[str]) -> int:
    """``next_index`` for keys (tool names, message keys) instead of segments."""
    for t, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return t
    return min(len(a), len(b))


# -- tools ------------------------------------------------------------------------------------------


def _keyed(segs: Sequence[Segment]) -> list[str]:
    """Tool keys: the name, with an occurrence number so that duplicate names stay distinct."""
    seen: Counter[str] = Counter()
    keys = []
    for s in segs:
        name = s.name or s.path
        seen[name] += 1
        keys.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return keys


def _names(keys: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return f"[{shown}{', …' if len(keys) > limit else ''}]"


def tool_findings(pair: Pair) -> list[Finding]:
    """Tools matched by name: reordered, added, removed, or a definition edited in place."""
    pi, ni = pair.p_area["tools"], pair.n_area["tools"]
    P = [pair.prev.segments[i] for i in pi]
    N = [pair.cur.segments[i] for i in ni]
    if [s.digest for s in P] == [s.digest for s in N]:
        return []
    pk, nk = _keyed(P), _keyed(N)
    pset, nset = set(pk), set(nk)
    p_pos = {k: t for t, k in enumerate(pk)}
    n_pos = {k: t for t, k in enumerate(nk)}
    found: list[Finding] = []
    pc = [k for k in pk if k in nset]
    nc = [k for k in nk if k in pset]
    if pc != nc:
        first = next_index_str(pc, nc)
        moved = nc[first]
        found.append(
            Finding(
                "tools-reordered",
                N[n_pos[moved]].path,
                0,
                pair.area_start("tools", p_pos[pc[first]]),
                f"the same tools in another order: {_names(pk)} → {_names(nk)}",
            )
        )
    for t, k in enumerate(nk):
        if k not in pset:
            found.append(
                Finding(
                    "tools-changed",
                    N[t].path,
                    0,
                    pair.area_start("tools", t),
                    f"tool {k!r} added at {N[t].path} ({len(pk)} → {len(nk)} tools)",
                )
            )
    for t, k in enumerate(pk):
        if k not in nset:
            found.append(
                Finding(
                    "tools-changed",
                    P[t].path,
                    0,
                    pair.area_start("tools", t),
                    f"tool {k!r} removed (was {P[t].path})",
                )
            )
    for k in pc:
        a, b = P[p_pos[k]], N[n_pos[k]]
        if a.digest != b.digest:
            edits = in_place(pair, pi[p_pos[k]], ni[n_pos[k]], "tools-changed", f"tool {k!r}")
            found.extend(_describe_tool_edit(e, a.text, b.text) for e in edits)
    return found


def _describe_tool_edit(finding: Finding, a: str, b: str) -> Finding:
    """Name the fields of a tool definition that changed (description, parameters, ...)."""
    if finding.code != "tools-changed":
        return finding
    try:
        x, y = json.loads(a), json.loads(b)
    except (ValueError, RecursionError):
        return finding
    for holder in ("function", "custom"):
        if (
            isinstance(x, dict)
            and isinstance(y, dict)
            and isinstance(x.get(holder), dict)
            and isinstance(y.get(holder), dict)
        ):
            x, y = x[holder], y[holder]
    if not (isinstance(x, dict) and isinstance(y, dict)):
        return finding
    fields = [k for k in dict.fromkeys([*x, *y]) if not json_same(x.get(k), y.get(k))]
    if not fields:
        return finding
    name = finding.detail.split(":", 1)[0]
    return Finding(
        finding.code,
        finding.segment,
        finding.offset,
        finding.position,
        f"{name} edited ({', '.join(fields)} changed)",
    )


# -- schema and system --------------------------------------------------------------------------------


def block_findings(pair: Pair, area: str, fallback: str, noun: str) -> list[Finding]:
    """Schema or system blocks: reordered, added / removed, or changed in place (pairwise)."""
    pi, ni = pair.p_area[area], pair.n_area[area]
    P = [pair.prev.segments[i] for i in pi]
    N = [pair.cur.segments[i] for i in ni]
    if [s.digest for s in P] == [s.digest for s in N]:
        return []
    first = next_index([*P], [*N])
    if len(P) == len(N) and sorted(s.digest for s in P) == sorted(s.digest for s in N):
        return [
            Finding(
                fallback,
                N[first].path,
                0,
                pair.area_start(area, first),
                f"{noun} blocks reordered ({N[first].path} moved)",
            )
        ]
    found: list[Finding] = []
    for t in range(first, max(len(P), len(N))):
        if t >= len(P):
            found.append(
                Finding(fallback, N[t].path, 0, pair.area_start(area, t), f"{noun} block added: {N[t].path}")
            )
            break
        if t >= len(N):
            found.append(
                Finding(
                    fallback, P[t].path, 0, pair.area_start(area, t), f"{noun} block removed: {P[t].path}"
                )
            )
            break
        if P[t].digest == N[t].digest:
            continue
        if t + 1 < len(N) and N[t + 1].digest == P[t].digest:
            found.append(
                Finding(
                    fallback, N[t].path, 0, pair.area_start(area, t), f"{noun} block inserted at {N[t].path}"
                )
            )
            break
        if t + 1 < len(P) and P[t + 1].digest == N[t].digest:
            found.append(
                Finding(
                    fallback, P[t].path, 0, pair.area_start(area, t), f"{noun} block removed: {P[t].path}"
                )
            )
            break
        edits = in_place(pair, pi[t], ni[t], fallback, N[t].path)
        found.extend(edits)
        if any(e.code == fallback for e in edits):
            break  # past a real edit, the blocks that follow are not compared pairwise
    return found
