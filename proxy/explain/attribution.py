"""Miss attribution: why the cache does not reach further into a request than it does, and what it costs.

Two entry points:

- ``attribute(analysis, prices)`` explains one request the Engine analysed: ``cold`` when nothing
  earlier was there, the content / model / parameter changes against the earlier request it best
  matches (``analysis.previous``), ``expired``, and the cache model's own limits
  (``below-minimum``, ``no-breakpoint``, ``breakpoint-too-far``).
- ``attribute_pair(previous, previous_tp, next, next_tp)`` compares two prompts only (the content,
  model and parameter reasons); replay and the proxy can call it on any pair.

How a pair is compared. Prompts are split into areas in cache order — tools, output schema, system,
messages — and each area is compared on its own, so several independent changes are all reported
(tools reordered *and* a timestamp in the system prompt). Inside an area, structural changes are
recognised on the segment digests (tools added / removed / reordered, system blocks swapped, the
oldest messages dropped, messages reordered), and a segment changed in place is classified from
the raw text of both sides, region by region: the texts are compared up to their first
difference, the difference is explained (a timestamp or id value covering it on both sides, an
enclosing JSON value equal as data, a whitespace run), and the comparison resumes after the
explained region. Nothing is normalised before the comparison, so a change can never be hidden;
normalising only ever explains a difference already found.

Tokens lost. Each reason sits at a position of the previous prompt's token stream: where, because
of it, the cache stops matching. The previous prompt's tokens that the next one still contains
("shared": the common prefix, segments that reappear later, the unchanged head and tail of a segment
edited in place) are what a cache could have served. A reason's ``tokens_lost`` is the shared
tokens from its position to the position of the next reason (or to the end): what the next request
would have reused had this change alone not happened. The reasons of one pair therefore add up to
the shared tokens past the first break and never count a token twice, which keeps the
per-reason metrics and replay totals additive. Stream tokens are converted to provider units with
the tokenizer ratio; dollars are the read discount on those tokens (``PriceTable.missed_savings``).
The model's limits (below-minimum, no-breakpoint, breakpoint-too-far) cost the reusable tokens
that were not cached, and ``expired`` the prefix that was held but older than the TTL.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cachewarden.proxy.engine.cache_model import TokenStream
from cachewarden.proxy.engine.prompt import Prompt, Segment

from .textdiff import common_prefix, common_suffix
from .volatile import changed_value

if TYPE_CHECKING:
    from cachewarden.proxy.engine.engine import Analysis
    from cachewarden.proxy.engine.pricing import PriceTable

# One line per reason code: what to do about it (the diff text format, replay and the docs).
FIXES: dict[str, str] = {
    "cold": "nothing to do: the first request of a scope always writes the cache",
    "expired": "keep the prefix warm, or use a longer TTL (1h, extended retention)",
    "model-changed": "keep one model per conversation: the cache is per model",
    "params-changed": "keep tool_choice, thinking, reasoning effort and images stable within a conversation",
    "tools-changed": "keep the tool list fixed; add new tools at the end and change definitions rarely",
    "tools-reordered": "send tools in a fixed order (for example sorted by name)",
    "key-order": "serialise JSON deterministically (sorted keys, fixed separators and escaping)",
    "whitespace": "normalise whitespace and line endings in templates and inputs",
    "timestamp": "move the timestamp after the last cached block or drop its seconds",
    "unique-id": "move per-request ids out of the prompt (into metadata) or after the last cached block",
    "system-changed": "keep the system prompt fixed; put per-request context in the latest message",
    "history-edited": "append to the conversation; never rewrite, reorder or remove earlier turns",
    "history-truncated": "trim or compact rarely and in large steps, so each new prefix is reused many times",
    "below-minimum": "grow the stable prefix above the model's minimum cacheable length",
    "no-breakpoint": "add cache_control on the last stable block (or top-level automatic caching)",
    "breakpoint-too-far": "add a breakpoint within the 20-block lookback (for example on the latest turn)",
    "content-changed": "keep the cached part of the prompt byte-identical between requests",
    "unexplained": "nothing in the request: the provider evicted the entry or routed to another machine",
}

SYSTEM_ROLES = frozenset({"system", "developer"})
# A region classifier gives up on a segment after this many explained differences (pathological inputs).
MAX_REGIONS = 32
# Enclosing JSON values tried around a difference (innermost first).
MAX_JSON_CANDIDATES = 48
# Summary messages a compaction may put before the kept turns.
MAX_SUMMARY_MESSAGES = 2


@dataclass(frozen=True, slots=True)
class Reason:
    """One explained cache miss: a DESIGN.md reason code, where it is, and what it costs."""

    code: str
    segment: str | None  # segment path (the next request's, or the previous one's for a removal)
    offset: int | None  # character offset of the change in that segment's text
    tokens_lost: int  # provider tokens the next request would have reused without this change
    usd_lost: float
    detail: str


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where two prompts first differ: segments before ``index`` are equal in both."""

    index: int
    segment: str  # the next prompt's path at ``index`` (the previous one's when next has none)
    offset: int  # first differing character in that segment's text (0 when added, removed or binary)
    previous_offset: int  # the same position in the previous segment's text (equal to ``offset``)


# ---------------------------------------------------------------------------------------------------
# Divergence


def find_divergence(previous: Prompt, next: Prompt) -> Divergence | None:
    """The first segment (in cache order) whose content or presence differs; None when one prompt's
    segments are a prefix of the other's (an appended turn, a moved breakpoint, an identical request).
    """
    prev, cur = previous.segments, next.segments
    n = min(len(prev), len(cur))
    index = next_index(prev, cur)
    if index >= n:
        return None
    a, b = prev[index], cur[index]
    offset = 0
    if a.kind == b.kind and a.role == b.role:
        offset = common_prefix(a.text, b.text)
    return Divergence(index=index, segment=b.path, offset=offset, previous_offset=offset)


def next_index(prev: Sequence[Segment], cur: Sequence[Segment]) -> int:
    """Index of the first segment whose digest differs (``min(len)`` when none does)."""
    for i, (a, b) in enumerate(zip(prev, cur, strict=False)):
        if a.digest != b.digest:
            return i
    return min(len(prev), len(cur))


# ---------------------------------------------------------------------------------------------------
# Text regions


@dataclass(frozen=True, slots=True)
class _Region:
    code: str  # timestamp | unique-id | key-order | whitespace | "" (unexplained: a real edit)
    offset_previous: int
    offset_next: int
    detail: str
    end_previous: int  # where the texts agree again (for "": the end of the previous text)


def _short(text: str, limit: int = 48) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return json.dumps(text, ensure_ascii=False)


def json_same(x: Any, y: Any) -> bool:
    """Equal as JSON data: objects ignore key order; ``true`` is not ``1``; ``1`` equals ``1.0``."""
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    if isinstance(x, int | float) and isinstance(y, int | float):
        return x == y
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(json_same(v, y[k]) for k, v in x.items())
    if isinstance(x, list):
        return len(x) == len(y) and all(json_same(u, v) for u, v in zip(x, y, strict=True))
    return bool(x == y)


_DECODER = json.JSONDecoder()


def _decode(text: str, start: int) -> tuple[Any, int] | None:
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None


def _json_starts(a: str, b: str, pa: int, pb: int, aligned: tuple[int, int]) -> Iterable[tuple[int, int]]:
    """Starts (in ``a`` and ``b``) of JSON values that may enclose the difference at ``pa`` / ``pb``:
    the whole texts, the parts after equal first lines (tool calls are ``name\\n{arguments}``), then
    every ``{`` / ``[`` before the difference, innermost first. A start inside the current equal
    stretch (which began at ``aligned``) lies at the same distance before the difference in both."""
    yield 0, 0
    na, nb = a.find("\n"), b.find("\n")
    if 0 <= na < pa and na == nb and a[:na] == b[:nb]:
        yield na + 1, nb + 1
    i, _ = aligned
    pos = pa + 1
    for _ in range(MAX_JSON_CANDIDATES):
        pos = max(a.rfind("{", i, pos), a.rfind("[", i, pos))
        if pos < 0:
            return
        yield pos, pos - pa + pb


def _json_difference(
    a: str, b: str, pa: int, pb: int, aligned: tuple[int, int]
) -> tuple[int, int, str] | None:
    """If a JSON value enclosing the difference is equal as data on both sides: its two ends and how
    its text differs."""
    tried: set[int] = set()
    for start_a, start_b in _json_starts(a, b, pa, pb, aligned):
        if start_a in tried:
            continue
        tried.add(start_a)
        if start_a >= len(a) or start_b >= len(b) or a[start_a] not in "{[" or b[start_b] not in "{[":
            continue
        left = _decode(a, start_a)
        if left is None or left[1] <= pa:
            continue
        right = _decode(b, start_b)
        if right is None or right[1] <= pb:
            continue
        if json_same(left[0], right[0]):
            raw_a, raw_b = a[start_a : left[1]], b[start_b : right[1]]
            return left[1], right[1], _json_detail(left[0], right[0], raw_a, raw_b)
    return None


def _keys_in_order(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [(k, _keys_in_order(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_keys_in_order(v) for v in value]
    return []


def _json_detail(x: Any, y: Any, raw_a: str, raw_b: str) -> str:
    if _keys_in_order(x) != _keys_in_order(y):
        return "equal JSON with the keys in another order"
    if ("\\u" in raw_a) != ("\\u" in raw_b) or raw_a.count("\\") != raw_b.count("\\"):
        return "equal JSON with other string escaping (e.g. \\u00e9 vs é)"
    return "equal JSON with other spacing"


def _whitespace_difference(
    a: str, b: str, pa: int, pb: int, floor: tuple[int, int]
) -> tuple[int, int, str] | None:
    """If the difference is inside a whitespace run and the texts agree again right after it."""
    in_a = pa < len(a) and a[pa].isspace()
    in_b = pb < len(b) and b[pb].isspace()
    if not (in_a or in_b):
        return None
    ea, eb = pa, pb
    while ea < len(a) and a[ea].isspace():
        ea += 1
    while eb < len(b) and b[eb].isspace():
        eb += 1
    at_end = ea == len(a) and eb == len(b)
    if not at_end and not (ea < len(a) and eb < len(b) and a[ea] == b[eb]):
        return None
    # Back up to the start of the run (equal on both sides) to show the whole run.
    sa, sb = pa, pb
    while sa > floor[0] and sb > floor[1] and a[sa - 1].isspace() and a[sa - 1] == b[sb - 1]:
        sa, sb = sa - 1, sb - 1
    run_a, run_b = a[sa:ea], b[sb:eb]
    if "\r" in run_a or "\r" in run_b:
        what = "line endings differ (CRLF vs LF)"
    elif at_end or ea == len(a) or eb == len(b):
        what = "trailing whitespace differs"
    else:
        what = "whitespace differs"
    return ea, eb, f"{what}: {json.dumps(run_a)} vs {json.dumps(run_b)}"


def text_regions(a: str, b: str, limit: int = MAX_REGIONS) -> list[_Region]:
    """The successive differences of two texts, each explained or, for the last, not (code "").

    Stops at the first difference it cannot explain: past a real edit, positions in the two texts no
    longer correspond.
    """
    out: list[_Region] = []
    i = j = 0
    while len(out) < limit:
        k = common_prefix(a, b, i, j)
        pa, pb = i + k, j + k
        if pa >= len(a) and pb >= len(b):
            break
        found = changed_value(a, b, pa, pb, ("timestamp", "unique-id"))
        if found is not None:
            kind, sa, sb = found
            what = "date/time" if kind == "timestamp" else "per-request id"
            detail = f"{what} {_short(a[sa[0] : sa[1]])} → {_short(b[sb[0] : sb[1]])}"
            i, j = max(sa[1], pa), max(sb[1], pb)
            out.append(_Region(kind, pa, pb, detail, i))
            if (i, j) == (pa, pb):
                break
            continue
        explained = _json_difference(a, b, pa, pb, (i, j))
        code = "key-order"
        if explained is None:
            explained = _whitespace_difference(a, b, pa, pb, (i, j))
            code = "whitespace"
        if explained is None:
            out.append(_Region("", pa, pb, "", len(a)))
            break
        ea, eb, detail = explained
        out.append(_Region(code, pa, pb, detail, ea))
        if (ea, eb) == (pa, pb):
            break
        i, j = ea, eb
    return out


# ---------------------------------------------------------------------------------------------------
# Findings (reasons before costing)


@dataclass(frozen=True, slots=True)
class _Finding:
    code: str
    segment: str | None
    offset: int | None
    position: int  # previous-stream position where the cache stops because of it
    detail: str


def _area_labels(prompt: Prompt) -> list[str]:
    """Per segment: tools, schema, system or messages (leading system / developer messages are system)."""
    labels: list[str] = []
    leading = True
    for seg in prompt.segments:
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


AREAS = ("tools", "schema", "system", "messages")


class _Pair:
    """Both prompts, their token streams and the per-area segment indexes."""

    def __init__(
        self, previous: Prompt, previous_tp: TokenStream, next: Prompt, next_tp: TokenStream
    ) -> None:
        self.prev, self.cur = previous, next
        self.ptp, self.ntp = previous_tp, next_tp
        self.n_prev = len(previous_tp.tokens)
        pl, nl = _area_labels(previous), _area_labels(next)
        self.p_area = {a: [i for i, x in enumerate(pl) if x == a] for a in AREAS}
        self.n_area = {a: [i for i, x in enumerate(nl) if x == a] for a in AREAS}

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


def _in_place(pair: _Pair, i: int, j: int, fallback: str, what: str) -> list[_Finding]:
    """Findings for previous segment ``i`` changed in place into next segment ``j``."""
    a, b = pair.prev.segments[i], pair.cur.segments[j]
    if a.kind != b.kind or a.role != b.role:
        return [
            _Finding(fallback, b.path, 0, pair.start(i), f"{what}: {a.kind} ({a.role}) → {b.kind} ({b.role})")
        ]
    if a.text == b.text:
        # Same text, other content: an image, a file, an opaque reasoning item.
        code = "content-changed" if a.kind in ("image", "document", "other") else fallback
        return [_Finding(code, b.path, 0, pair.start(i), f"{what}: the {a.kind} was replaced")]
    found: list[_Finding] = []
    for region in text_regions(a.text, b.text):
        pos = pair.at_char(i, region.offset_previous)
        if region.code:
            found.append(_Finding(region.code, b.path, region.offset_next, pos, f"{region.detail} ({what})"))
        else:
            found.append(
                _Finding(
                    fallback,
                    b.path,
                    region.offset_next,
                    pos,
                    f"{what}: {_edit_detail(a.text, b.text, region)}",
                )
            )
    return found


def _edit_detail(a: str, b: str, region: _Region) -> str:
    pa, pb = region.offset_previous, region.offset_next
    return f"text changed at offset {pb}: {_short(a[pa : pa + 40])} → {_short(b[pb : pb + 40])}"


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


def _tools(pair: _Pair) -> list[_Finding]:
    pi, ni = pair.p_area["tools"], pair.n_area["tools"]
    P = [pair.prev.segments[i] for i in pi]
    N = [pair.cur.segments[i] for i in ni]
    if [s.digest for s in P] == [s.digest for s in N]:
        return []
    pk, nk = _keyed(P), _keyed(N)
    pset, nset = set(pk), set(nk)
    p_pos = {k: t for t, k in enumerate(pk)}
    n_pos = {k: t for t, k in enumerate(nk)}
    found: list[_Finding] = []
    pc = [k for k in pk if k in nset]
    nc = [k for k in nk if k in pset]
    if pc != nc:
        first = next_index_str(pc, nc)
        moved = nc[first]
        found.append(
            _Finding(
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
                _Finding(
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
                _Finding(
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
            edits = _in_place(pair, pi[p_pos[k]], ni[n_pos[k]], "tools-changed", f"tool {k!r}")
            found.extend(_describe_tool_edit(e, a.text, b.text) for e in edits)
    return found


def next_index_str(a: Sequence[str], b: Sequence[str]) -> int:
    for t, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return t
    return min(len(a), len(b))


def _describe_tool_edit(finding: _Finding, a: str, b: str) -> _Finding:
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
    return _Finding(
        finding.code,
        finding.segment,
        finding.offset,
        finding.position,
        f"{name} edited ({', '.join(fields)} changed)",
    )


# -- schema and system --------------------------------------------------------------------------------


def _blocks(pair: _Pair, area: str, fallback: str, noun: str) -> list[_Finding]:
    """Schema or system blocks: reordered, added / removed, or changed in place (pairwise)."""
    pi, ni = pair.p_area[area], pair.n_area[area]
    P = [pair.prev.segments[i] for i in pi]
    N = [pair.cur.segments[i] for i in ni]
    if [s.digest for s in P] == [s.digest for s in N]:
        return []
    first = next_index([*P], [*N])
    if len(P) == len(N) and sorted(s.digest for s in P) == sorted(s.digest for s in N):
        return [
            _Finding(
                fallback,
                N[first].path,
                0,
                pair.area_start(area, first),
                f"{noun} blocks reordered ({N[first].path} moved)",
            )
        ]
    found: list[_Finding] = []
    for t in range(first, max(len(P), len(N))):
        if t >= len(P):
            found.append(
                _Finding(fallback, N[t].path, 0, pair.area_start(area, t), f"{noun} block added: {N[t].path}")
            )
            break
        if t >= len(N):
            found.append(
                _Finding(
                    fallback, P[t].path, 0, pair.area_start(area, t), f"{noun} block removed: {P[t].path}"
                )
            )
            break
        if P[t].digest == N[t].digest:
            continue
        if t + 1 < len(N) and N[t + 1].digest == P[t].digest:
            found.append(
                _Finding(
                    fallback, N[t].path, 0, pair.area_start(area, t), f"{noun} block inserted at {N[t].path}"
                )
            )
            break
        if t + 1 < len(P) and P[t + 1].digest == N[t].digest:
            found.append(
                _Finding(
                    fallback, P[t].path, 0, pair.area_start(area, t), f"{noun} block removed: {P[t].path}"
                )
            )
            break
        edits = _in_place(pair, pi[t], ni[t], fallback, N[t].path)
        found.extend(edits)
        if any(e.code == fallback for e in edits):
            break  # past a real edit, the blocks that follow are not compared pairwise
    return found


# -- messages -------------------------------------------------------------------------------------------


def _messages_of(prompt: Prompt, idx: Sequence[int]) -> list[tuple[tuple[str, ...], int]]:
    """(key, position in ``idx`` of its first segment) per message; the key is its role and digests."""
    out: list[tuple[tuple[str, ...], int]] = []
    current: int | None = None
    parts: list[str] = []
    first = 0
    for k, i in enumerate(idx):
        seg = prompt.segments[i]
        if seg.message_index != current or not parts:
            if parts:
                out.append((tuple(parts), first))
            current, parts, first = seg.message_index, [str(seg.role)], k
        parts.append(seg.digest)
    if parts:
        out.append((tuple(parts), first))
    return out


def _truncation(pm: Sequence[tuple[str, ...]], nm: Sequence[tuple[str, ...]]) -> tuple[int, int, bool] | None:
    """(dropped up to, kept from, summarised): the previous messages ``pm[k:]`` reappear in full at
    ``nm[q:]``, and the first ``q`` next messages are either the previous ones kept (a window that
    keeps the opening turns) or new summary messages (compaction)."""
    where: dict[tuple[str, ...], list[int]] = {}
    for k, m in enumerate(pm):
        where.setdefault(m, []).append(k)
    previous = set(pm)
    for q in range(min(len(nm), MAX_SUMMARY_MESSAGES + 1, len(pm))):
        head_kept = nm[:q] == pm[:q]
        summarised = q > 0 and not head_kept and not any(m in previous for m in nm[:q])
        if q > 0 and not (head_kept or summarised):
            continue
        # Only where the next message at q appears in the previous list can the kept tail start.
        for k in where.get(nm[q], []):
            if k > q:  # more messages dropped than summaries put in their place
                tail = len(pm) - k
                if nm[q : q + tail] == pm[k:]:
                    return k, q, summarised
    return None


def _messages(pair: _Pair, images_explained: bool) -> list[_Finding]:
    pi, ni = pair.p_area["messages"], pair.n_area["messages"]
    pd = [pair.prev.segments[i].digest for i in pi]
    nd = [pair.cur.segments[i].digest for i in ni]
    if pd == nd[: len(pd)] or nd == pd[: len(nd)]:
        return []  # an appended turn (or a retry of an earlier state): nothing lost
    P = [pair.prev.segments[i] for i in pi]
    N = [pair.cur.segments[i] for i in ni]
    pmsg, nmsg = _messages_of(pair.prev, pi), _messages_of(pair.cur, ni)
    pm, nm = [m for m, _ in pmsg], [m for m, _ in nmsg]
    first_msg = next_index_str([str(m) for m in pm], [str(m) for m in nm])
    where_p = pmsg[first_msg][1] if first_msg < len(pmsg) else len(P)
    where_n = nmsg[first_msg][1] if first_msg < len(nmsg) else len(N)
    seg_n = N[where_n].path if where_n < len(N) else (P[where_p].path if where_p < len(P) else None)
    position = pair.area_start("messages", where_p)

    cut = _truncation(pm, nm)
    if cut is not None:
        k, q, summarised = cut
        dropped = k - q if not summarised else k
        how = f"replaced by {q} summary message{'s' if q > 1 else ''}" if summarised else "dropped"
        detail = f"the oldest {dropped} message{'s' if dropped > 1 else ''} {how}"
        if q and not summarised:
            detail += f" after the first {q} (sliding window)"
        return [
            _Finding("history-truncated", seg_n, 0, position, f"{detail}: {len(pm)} → {len(nm)} messages")
        ]
    if len(pm) <= len(nm) and pm != nm[: len(pm)] and Counter(pm) == Counter(nm[: len(pm)]):
        return [_Finding("history-edited", seg_n, 0, position, f"messages reordered (first at {seg_n})")]
    if first_msg == 0 and len(nm) < len(pm) and not any(m in pm for m in nm[:1]) and len(nd) < len(pd):
        return [
            _Finding(
                "history-truncated", seg_n, 0, position, f"history compacted: {len(pm)} → {len(nm)} messages"
            )
        ]

    found: list[_Finding] = []
    t = next_index(P, N)
    while t < min(len(P), len(N)):
        a, b = P[t], N[t]
        if a.digest == b.digest:
            t += 1
            continue
        image = "image" in (a.kind, b.kind)
        if a.path != b.path or a.kind != b.kind or a.role != b.role:
            if not (image and images_explained):
                found.append(
                    _Finding(
                        "history-edited", b.path, 0, pair.area_start("messages", t), _structural(P, N, t)
                    )
                )
            break
        edits = _in_place(pair, pi[t], ni[t], "history-edited", f"{b.path} edited")
        if image and images_explained:
            edits = [e for e in edits if e.code != "content-changed"]
        found.extend(edits)
        if any(e.code in ("history-edited", "content-changed") for e in edits):
            break
        t += 1
    if not found and len(P) > len(N) and t >= len(N):
        return []
    return found


def _structural(P: Sequence[Segment], N: Sequence[Segment], t: int) -> str:
    if t + 1 < len(N) and N[t + 1].digest == P[t].digest:
        return f"a block was inserted at {N[t].path}"
    if t + 1 < len(P) and P[t + 1].digest == N[t].digest:
        return f"{P[t].path} was removed"
    return f"{P[t].path} was replaced by a {N[t].kind} block ({N[t].role})"


def _image_count(prompt: Prompt) -> int:
    # Images inside tool results have no segment of their own: their fixed tokens mark them.
    return sum(
        1 for s in prompt.segments if s.kind == "image" or (s.kind == "tool_result" and s.fixed_tokens)
    )


def _anthropic_images(pair: _Pair) -> _Finding | None:
    """Anthropic: adding or removing images anywhere invalidates the message cache (provider-caching §2.4)."""
    if pair.cur.provider != "anthropic":
        return None
    before, after = _image_count(pair.prev), _image_count(pair.cur)
    if before == after:
        return None
    old = {s.digest for s in pair.prev.segments}
    new = {s.digest for s in pair.cur.segments}
    if after > before:
        seg = next(
            (s for s in pair.cur.segments if s.kind in ("image", "tool_result") and s.digest not in old), None
        )
        what = f"images added ({before} → {after})"
    else:
        seg = next(
            (s for s in pair.prev.segments if s.kind in ("image", "tool_result") and s.digest not in new),
            None,
        )
        what = f"images removed ({before} → {after})"
    path = seg.path if seg is not None else None
    return _Finding(
        "params-changed",
        path,
        0,
        pair.area_start("messages", 0),
        f"{what}{' at ' + path if path else ''}: Anthropic drops the message cache when images change",
    )


# -- model and parameters ----------------------------------------------------------------------------


def _model_and_params(pair: _Pair) -> list[_Finding]:
    found: list[_Finding] = []
    if pair.prev.model.lower() != pair.cur.model.lower() or pair.prev.provider != pair.cur.provider:
        found.append(
            _Finding(
                "model-changed",
                None,
                None,
                0,
                f"model {pair.prev.model!r} → {pair.cur.model!r}: the cache is per model",
            )
        )
    if pair.prev.params != pair.cur.params:
        before, after = dict(pair.prev.params), dict(pair.cur.params)
        changes = []
        for key in dict.fromkeys([*before, *after]):
            x, y = before.get(key), after.get(key)
            if x != y:
                changes.append(f"{key} {_short(x or '(unset)', 40)} → {_short(y or '(unset)', 40)}")
        position, segment = 0, None
        if pair.cur.provider == "anthropic":
            # tool_choice, thinking and the rest keep the tools cache and drop everything after it.
            position = pair.area_start("schema", 0)
            rest = [i for a in ("system", "messages") for i in pair.n_area[a]]
            segment = pair.cur.segments[rest[0]].path if rest else None
        found.append(
            _Finding("params-changed", segment, 0 if segment else None, position, "; ".join(changes))
        )
    return found


# ---------------------------------------------------------------------------------------------------
# Costing


def _shared_intervals(pair: _Pair, d: int) -> list[tuple[int, int]]:
    """Previous-stream intervals the next prompt still contains (see the module doc)."""
    prev, cur = pair.prev.segments, pair.cur.segments
    spans = pair.ptp.spans
    out: list[tuple[int, int]] = []
    if d > 0:
        out.append((0, spans[d - 1][1] if d - 1 < len(spans) else pair.n_prev))
    remaining = Counter(s.digest for s in cur[d:])
    by_path = {s.path: s for s in cur[d:]}
    for i in range(d, min(len(prev), len(spans))):
        seg = prev[i]
        s, e = spans[i]
        if remaining[seg.digest] > 0:
            remaining[seg.digest] -= 1
            out.append((s, e))
            continue
        other = by_path.get(seg.path)
        n = len(seg.text)
        if other is None or other.kind != seg.kind or n == 0:
            continue
        out.extend(
            (s + (e - s) * lo // n, s + (e - s) * hi // n) for lo, hi in shared_chars(seg.text, other.text)
        )
    return out


def shared_chars(a: str, b: str) -> list[tuple[int, int]]:
    """Character intervals of ``a`` that ``b`` still holds in place: the stretches between explained
    differences, and after an unexplained edit the common tail."""
    out: list[tuple[int, int]] = []
    at = 0
    regions = text_regions(a, b)
    for region in regions:
        if region.offset_previous > at:
            out.append((at, region.offset_previous))
        at = region.end_previous
    last = regions[-1] if regions else None
    if last is not None and not last.code:
        tail = common_suffix(a, b, last.offset_previous, last.offset_next)
        if tail:
            out.append((len(a) - tail, len(a)))
    elif at < len(a):
        out.append((at, len(a)))
    return out


def _measure(intervals: Sequence[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


def _units(stream_tokens: int, ratio: float) -> int:
    return stream_tokens if ratio == 1.0 else round(stream_tokens * ratio)


def _cost(
    findings: Sequence[_Finding], shared: Sequence[tuple[int, int]], end: int, ratio: float
) -> list[int]:
    """Stream tokens lost per finding: shared tokens from its position to the next finding's."""
    order = sorted(range(len(findings)), key=lambda k: (findings[k].position, k))
    lost = [0] * len(findings)
    positions = sorted({f.position for f in findings})
    bounds = dict(zip(positions, [*positions[1:], end], strict=True))
    charged: set[int] = set()
    for k in order:
        pos = findings[k].position
        if pos in charged:
            continue  # the first finding at a position carries its interval
        charged.add(pos)
        lost[k] = _units(_measure(shared, pos, bounds[pos]), ratio)
    return lost


def _merge(findings: Sequence[_Finding], lost: Sequence[int]) -> list[tuple[_Finding, int]]:
    """One reason per code: the first occurrence, with the tokens of all and a count in the detail."""
    first: dict[str, int] = {}
    total: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for k, f in enumerate(findings):
        first.setdefault(f.code, k)
        total[f.code] += lost[k]
        count[f.code] += 1
    out = []
    for code, k in first.items():
        f = findings[k]
        more = count[code] - 1
        detail = f.detail + (f" (and {more} more like it)" if more else "")
        out.append((_Finding(f.code, f.segment, f.offset, f.position, detail), total[code]))
    return out


def _priced(prices: PriceTable | None, prompt: Prompt, tokens: int) -> float:
    if prices is None or tokens <= 0:
        return 0.0
    return prices.missed_savings(prompt.model, prompt.provider, tokens)


# ---------------------------------------------------------------------------------------------------
# Entry points


def _findings(pair: _Pair) -> list[_Finding]:
    """Every content / model / parameter finding of a pair, the one at the divergence first."""
    images = _anthropic_images(pair)
    content: list[_Finding] = []
    if find_divergence(pair.prev, pair.cur) is not None:
        # One prompt's segments a prefix of the other's: an extension, whatever area it grew in.
        content += _tools(pair)
        content += _blocks(pair, "schema", "content-changed", "output schema")
        content += _blocks(pair, "system", "system-changed", "system")
        content += _messages(pair, images_explained=images is not None)
    others = _model_and_params(pair)
    if images is not None:
        params = next_match(others, lambda f: f.code == "params-changed")
        if params is None:
            others.append(images)
        else:
            merged = _Finding(
                params.code,
                params.segment,
                params.offset,
                min(params.position, images.position),
                f"{params.detail}; {images.detail}",
            )
            others = [merged if f is params else f for f in others]
    everything = content + others
    if not everything:
        return []
    by_position = sorted(everything, key=lambda f: f.position)
    div = find_divergence(pair.prev, pair.cur)
    primary: _Finding | None = None
    if div is not None:
        # The reason at the divergence point: the first one found on the diverging segment.
        at = div.segment
        primary = next_match(everything, lambda f: f.segment == at)
        if primary is None and content:
            primary = content[0]
    if primary is None:
        primary = by_position[0]
    elif div is not None and primary.segment == div.segment and primary.offset == 0 and div.offset:
        # A structural finding (a tool moved in) sits where the texts first differ, like the divergence.
        fixed = _Finding(primary.code, primary.segment, div.offset, primary.position, primary.detail)
        by_position = [fixed if f is primary else f for f in by_position]
        primary = fixed
    return [primary, *(f for f in by_position if f is not primary)]


def next_match(items: Sequence[_Finding], test: Callable[[_Finding], bool]) -> _Finding | None:
    for item in items:
        if test(item):
            return item
    return None


@dataclass(frozen=True, slots=True)
class _PairResult:
    previous: Prompt
    reasons: list[Reason]
    first_position: int  # previous-stream position of the earliest reason
    divergence_index: int


def _explain_pair(
    previous: Prompt, previous_tp: TokenStream, next: Prompt, next_tp: TokenStream, prices: PriceTable | None
) -> _PairResult:
    pair = _Pair(previous, previous_tp, next, next_tp)
    d = next_index(previous.segments, next.segments)
    findings = _findings(pair)
    if not findings:
        return _PairResult(previous, [], pair.n_prev, d)
    shared = _shared_intervals(pair, d)
    lost = _cost(findings, shared, pair.n_prev, previous_tp.ratio)
    reasons = [
        Reason(f.code, f.segment, f.offset, tokens, _priced(prices, next, tokens), f.detail)
        for f, tokens in _merge(findings, lost)
    ]
    return _PairResult(previous, reasons, min(f.position for f in findings), d)


def attribute_pair(
    previous: Prompt,
    previous_tp: TokenStream,
    next: Prompt,
    next_tp: TokenStream,
    *,
    prices: PriceTable | None = None,
) -> list[Reason]:
    """Why ``next`` cannot reuse more of ``previous`` than their common prefix: content, model and
    parameter reasons, the one at the divergence point first (empty when nothing was lost).

    ``previous_tp`` / ``next_tp`` are the prompts' token streams (``counting.TokenizedPrompt``).
    Without ``prices`` the dollar amounts are 0.
    """
    return _explain_pair(previous, previous_tp, next, next_tp, prices).reasons


def _had_breakpoint_past(prompt: Prompt, index: int, analysis: Analysis) -> bool:
    """Whether the earlier request wrote (or could write) a cache entry at or past segment ``index``."""
    if prompt.auto_cache is not None or analysis.info.cache.implicit_breakpoint:
        return True
    return any(i >= index for i in prompt.breakpoints)


def attribute(analysis: Analysis, prices: PriceTable) -> list[Reason]:
    """Every reason the Engine's analysis of one request supports, the one at the divergence first.

    ``cold``: no earlier request of the tenant to compare with. Content / model / parameter reasons
    against ``analysis.previous``. ``expired``: the index held a longer prefix than it still serves.
    Then the cache model's limits, costing the reusable tokens that were not cached.

    A limit that only exists because of a change is folded into the change: when the common prefix
    is below the minimum, or reaches past the last entry the earlier request wrote, because the
    prompts diverge early, the reason at the divergence carries those tokens too (had the change
    not happened, they would have been read).
    """
    prompt, match, prediction = analysis.prompt, analysis.match, analysis.prediction
    ratio = analysis.tokenized.ratio
    reasons: list[Reason] = []
    pair: _PairResult | None = None
    if analysis.previous is None and match.held_prefix_tokens == 0:
        reasons.append(Reason("cold", None, None, 0, 0.0, "no earlier request in this scope to reuse"))
    elif analysis.previous is not None:
        earlier = analysis.previous
        pair = _explain_pair(earlier.prompt, earlier.tokenized, prompt, analysis.tokenized, prices)
        reasons += pair.reasons
    if match.held_prefix_tokens > match.common_prefix_tokens:
        tokens = _units(match.held_prefix_tokens - match.common_prefix_tokens, ratio)
        ttl = f", TTL {analysis.info.cache.ttl_seconds:.0f} s"
        age = "" if match.age_seconds is None else f" ({match.age_seconds:.0f} s old{ttl})"
        detail = f"the matching prefix{age} has expired"
        reasons.append(Reason("expired", None, None, tokens, _priced(prices, prompt, tokens), detail))
    missed = max(0, prediction.reusable_tokens - prediction.cached_tokens)
    limits = [code for code in prediction.limits if code != "expired"]
    if pair is not None and pair.reasons and limits[:1] in (["below-minimum"], ["no-breakpoint"]):
        first = pair.reasons[0]
        if limits[0] == "below-minimum":
            total = prediction.reusable_tokens + sum(r.tokens_lost for r in pair.reasons)
            folds = total >= analysis.info.cache.min_tokens
        else:
            folds = _had_breakpoint_past(pair.previous, pair.divergence_index, analysis)
        # Only the uncached tokens before the first reason: what lies past it is already its cost.
        extra = min(missed, _units(pair.first_position, ratio))
        if folds:
            tokens = first.tokens_lost + extra
            reasons[0] = replace(first, tokens_lost=tokens, usd_lost=_priced(prices, prompt, tokens))
            limits = limits[1:]
            missed = 0
    for n, code in enumerate(limits):
        tokens = missed if n == 0 else 0
        reasons.append(
            Reason(code, None, None, tokens, _priced(prices, prompt, tokens), _limit_detail(code, analysis))
        )
    return reasons


def _limit_detail(code: str, analysis: Analysis) -> str:
    rules = analysis.info.cache
    p = analysis.prediction
    if code == "below-minimum":
        return f"the reusable prefix ({p.reusable_tokens} tokens) is below the minimum of {rules.min_tokens}"
    if code == "no-breakpoint":
        return f"no earlier cache write covers the reusable prefix ({p.reusable_tokens} tokens)"
    if code == "breakpoint-too-far":
        return (
            f"the earlier cache entry lies outside the {rules.lookback}-{rules.lookback_unit} lookback window"
        )
    return code
