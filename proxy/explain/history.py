"""History: the messages area, compared message by message (history-edited / history-truncated).

A conversation that only grew loses nothing. Otherwise the messages are keyed by role and segment
digests, and three shapes are told apart before any text is compared: the oldest messages dropped
(a sliding window that may keep the opening turns, or a compaction that puts summary messages in
their place), the same messages in another order, and a history compacted into fewer messages.
Anything else is an edit: the first message that differs is compared segment by segment, in place
through ``structure.in_place`` (so a timestamp in an old turn is still reported as a timestamp).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from operator import is_

from cachewarden.proxy.engine.prompt import Prompt, Segment

from .structure import Finding, Pair, in_place, next_index, next_index_str

# Summary messages a compaction may put before the kept turns.
MAX_SUMMARY_MESSAGES = 2
# How a compaction's summary message usually opens (Claude Code, LangChain, the Agents SDK...).
_SUMMARY = re.compile(
    r"\b(summary|summari[sz]ed?|compact(ed|ion)|(conversation|discussion|chat) so far|"
    r"(earlier|previous|prior) (conversation|messages|turns))\b",
    re.IGNORECASE,
)


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


def _extends(pair: Pair, pi: Sequence[int], ni: Sequence[int]) -> bool:
    """Whether the shorter messages area is the longer one's start, object for object (C speed)."""
    if type(pi) is not range or type(ni) is not range:
        return False
    k = min(len(pi), len(ni))
    before = pair.prev.segments[pi.start : pi.start + k]
    after = pair.cur.segments[ni.start : ni.start + k]
    return all(map(is_, before, after))


def history_findings(pair: Pair, images_explained: bool) -> list[Finding]:
    """The messages area's findings (see the module doc); ``images_explained``: an image change is
    already reported as params-changed (``model_params.image_finding``), so it is not an edit here."""
    pi, ni = pair.p_area["messages"], pair.n_area["messages"]
    if _extends(pair, pi, ni):
        return []  # an appended turn: the shared messages are the same objects (engine.reading)
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
        return [Finding("history-truncated", seg_n, 0, position, f"{detail}: {len(pm)} → {len(nm)} messages")]
    if len(pm) <= len(nm) and pm != nm[: len(pm)] and Counter(pm) == Counter(nm[: len(pm)]):
        return [Finding("history-edited", seg_n, 0, position, f"messages reordered (first at {seg_n})")]
    if first_msg == 0 and len(nm) < len(pm) and not any(m in pm for m in nm[:1]) and len(nd) < len(pd):
        if not _compacted(pm, nm, N):
            # No earlier message kept and nothing reads like a summary: a new conversation on the
            # same tools and system prompt. Its messages are new, not lost: the cache served all
            # that the two requests share.
            return []
        return [
            Finding(
                "history-truncated", seg_n, 0, position, f"history compacted: {len(pm)} → {len(nm)} messages"
            )
        ]

    found: list[Finding] = []
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
                    Finding("history-edited", b.path, 0, pair.area_start("messages", t), _structural(P, N, t))
                )
            break
        edits = in_place(pair, pi[t], ni[t], "history-edited", f"{b.path} edited")
        if image and images_explained:
            edits = [e for e in edits if e.code != "content-changed"]
        found.extend(edits)
        if any(e.code in ("history-edited", "content-changed") for e in edits):
            break
        t += 1
    if not found and len(P) > len(N) and t >= len(N):
        return []
    return found


def _compacted(pm: Sequence[tuple[str, ...]], nm: Sequence[tuple[str, ...]], N: Sequence[Segment]) -> bool:
    """A shorter history that replaced the old one: it keeps an earlier message (the latest turn
    usually survives a compaction), or its first message reads like a summary of the old one."""
    if set(nm) & set(pm):
        return True
    head = N[0].text[:400] if N else ""
    return _SUMMARY.search(head) is not None


def _structural(P: Sequence[Segment], N: Sequence[Segment], t: int) -> str:
    if t + 1 < len(N) and N[t + 1].digest == P[t].digest:
        return f"a block was inserted at {N[t].path}"
    if t + 1 < len(P) and P[t + 1].digest == N[t].digest:
        return f"{P[t].path} was removed"
    return f"{P[t].path} was replaced by a {N[t].kind} block ({N[t].role})"
