"""Template rules (CW1xx volatile values, CW20x ordering / serialisation, CW30x structure, CW40x size)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from jinja2 import nodes

from . import context as limits
from .context import Context
from .findings import Edit, Hit, Severity
from .frequency import message_args, severity
from .sources import find_beside
from .template_scan import OPAQUE_TEMPLATE, Loop, Piece, Scan, dotted, sorted_chain
from .vocab import ISO_DATETIME, RFC_DATETIME, words

# Rules about what a cached prefix holds (a value before static text the cache could serve, its
# length): not for a user turn, whose text comes after the cached prefix.
PREFIX_RULES = frozenset({"CW301", "CW401", "CW402"})
_VOLATILE_CODE = {"timestamp": "CW101", "unique-id": "CW102", "random": "CW103"}
_ITEMS_FIX = {"items": "|dictsort", "keys": "|dictsort|map('first')", "values": "|dictsort|map('last')"}
_CLOCK = re.compile(r"\d:\d\d")
_HISTORY_WORDS = frozenset(
    {"message", "messages", "msg", "history", "turn", "conversation", "calls", "results"}
)
_TOOL_FIELDS = frozenset({"name", "description", "parameters", "function", "input_schema", "schema"})
_MAPPING_ORDER = {"what": "mapping", "order": "insertion order", "remedy": "`|dictsort`"}
_ROLE_LINE = re.compile(
    r"^[ \t]*(?:#+[ \t]*)?<?\|?(system|developer|user|assistant|human|ai)\|?>?[ \t]*:?[ \t]*$", re.I | re.M
)


def system_ranges(text: str, whole: bool, scan: Scan) -> list[tuple[int, int]]:
    """Where system instructions live: the whole file, a `{% block system %}`, or a `system:` role section."""
    if whole:
        return [(0, len(text))]
    ranges = list(scan.system_blocks)
    markers = list(_ROLE_LINE.finditer(text))
    for i, m in enumerate(markers):
        if m.group(1).lower() in ("system", "developer"):
            end = markers[i + 1].start() if i + 1 < len(markers) else len(text)
            ranges.append((m.end(), end))
    return ranges


def check_template(
    ctx: Context,
    text: str,
    scan: Scan,
    system: list[tuple[int, int]],
    volatile_tail: int = limits.VOLATILE_TAIL_TOKENS,
) -> Iterator[Hit]:
    """``volatile_tail``: the static tokens after a volatile value that make it a finding (a few:
    the value is not at the very end; more for a user turn, see ``checks_python``)."""
    pieces = scan.pieces
    # Token counts matter only after a volatile or per-request value: a file without one (most
    # Markdown) is never tokenized.
    counted = any(not p.static and (p.volatile or p.per_request or p.per_user) for p in pieces)
    static_tokens = [
        (_include_tokens(ctx, p.include) if p.include else ctx.tokens(p.text))
        if counted and p.static and not p.conditional and (p.include or p.text.strip())
        else 0
        for p in pieces
    ]
    # after[i]: unconditional static tokens after piece i: what a change at piece i re-prefills.
    after = [0] * (len(pieces) + 1)
    if any(p.branch for p in pieces):
        # Another branch of the same `{% if %}` is never rendered with a piece: not after it.
        for i, piece in enumerate(pieces):
            after[i + 1] = _static_with(pieces, static_tokens, piece, i + 1, len(pieces))
    else:
        for i in range(len(pieces) - 1, -1, -1):
            after[i] = after[i + 1] + static_tokens[i]
    yield from _volatile(pieces, after, system, volatile_tail)
    yield from _literals(text, pieces)
    yield from _serialisation(ctx, scan)
    for loop in scan.loops:
        yield from _loop(loop, scan.literal_mappings)
    yield from _structure(ctx, pieces, after, system, static_tokens)
    yield from _size(ctx, pieces, static_tokens)


def _static_with(pieces: list[Piece], static_tokens: list[int], piece: Piece, lo: int, hi: int) -> int:
    """Static tokens of ``pieces[lo:hi]`` that can be rendered with ``piece`` (``_together``)."""
    return sum(static_tokens[j] for j in range(lo, hi) if _together(pieces[j], piece))


def _together(a: Piece, b: Piece) -> bool:
    """Whether two pieces can be rendered in one prompt: not in two branches of one `if`."""
    if not a.branch or not b.branch:
        return True
    taken = dict(a.branch)
    return all(taken.get(ident, k) == k for ident, k in b.branch)


def _include_tokens(ctx: Context, name: str) -> int:
    """Tokens of an included template, looked up beside this one and in the folders above it; one
    that cannot be found still counts as static text (the least that makes a value before it matter)."""
    if name == OPAQUE_TEMPLATE:
        return limits.VOLATILE_TAIL_TOKENS
    found = find_beside(os.path.dirname(os.path.abspath(ctx.source.path)), name if name != "?" else "")
    return ctx.tokens(found[1]) if found is not None else limits.VOLATILE_TAIL_TOKENS


def _volatile(
    pieces: list[Piece], after: list[int], system: list[tuple[int, int]], volatile_tail: int
) -> Iterator[Hit]:
    # In a user turn, after this request's own input where it belongs (the task, with too little
    # static text after it for CW301 to ask for a move), the text differs on every request anyway:
    # a clock or a count further on costs nothing more. Not in the instructions, where what follows
    # is the conversation's cached prefix; and a clock after another clock is reported: both move.
    varied = False
    for i, piece in enumerate(pieces):
        if piece.static:
            continue
        if piece.volatile is None:
            settled = after[i + 1] < limits.LARGE_STATIC_BLOCK_TOKENS
            turn = not any(a <= piece.start < b for a, b in system)
            varied = varied or (piece.per_request and not piece.per_user and settled and turn)
            continue
        if varied and severity(piece.frequency) is None:
            continue
        if after[i + 1] >= volatile_tail:
            # A field of a template loaded at run time: how much of it follows is not known here.
            opaque = any(p.include == OPAQUE_TEMPLATE for p in pieces[i + 1 :])
            tokens: int | str = "an unknown number of" if opaque else after[i + 1]
            args = {"value": piece.label, **message_args(piece.frequency, tokens)}
            code = _VOLATILE_CODE[piece.volatile]
            yield Hit(code, piece.start, piece.end, args, severity=severity(piece.frequency))


def _literals(text: str, pieces: list[Piece]) -> Iterator[Hit]:
    for piece in pieces:
        if not piece.static or piece.borrowed or not _CLOCK.search(piece.text):  # both have a time of day
            continue
        for pattern in (ISO_DATETIME, RFC_DATETIME):
            for m in pattern.finditer(piece.text):
                yield Hit("CW104", piece.start + m.start(), piece.start + m.end(), {"value": m.group()})


def _serialisation(ctx: Context, scan: Scan) -> Iterator[Hit]:
    for use in scan.json_uses:
        if use.sort_keys is True:
            continue
        # Jinja2's own |tojson sorts keys (policy json.dumps_kwargs = {"sort_keys": True}) unless the
        # application changed the policy; anything else sorts only when asked to.
        if use.name == "tojson" and use.sort_keys is None and ctx.settings.tojson_sort_keys:
            continue
        yield Hit("CW201", use.start, use.end, {"value": use.name})


def _loop(loop: Loop, literal_mappings: set[str]) -> Iterator[Hit]:
    it = loop.node.iter
    if sorted_chain(it):
        return
    start, end = (loop.iter_start, loop.iter_end) if loop.iter_start >= 0 else (loop.start, loop.end)
    base: nodes.Node | None = None
    method = ""
    if isinstance(it, nodes.Call) and isinstance(it.node, nodes.Getattr) and it.node.attr in _ITEMS_FIX:
        base, method = it.node.node, it.node.attr
    elif isinstance(it, nodes.Filter) and it.name == "items" and it.node is not None:
        base, method = it.node, "items"
    if base is not None:
        name = dotted(base) or "mapping"
        if name in literal_mappings:
            return  # `{% set m = {...} %}` in this template: its order is the one written here
        edits: tuple[Edit, ...] = ()
        if loop.iter_start >= 0 and dotted(base) is not None:
            edits = (Edit(start, end, f"{name}{_ITEMS_FIX[method]}"),)
        args = {"value": loop.iter_text or name, "method": method, **_MAPPING_ORDER}
        # Insertion order is stable when the same code builds the mapping: without its origin in
        # sight this is a question, not a verdict.
        yield Hit("CW202", start, end, args, edits, severity="info")
        return
    tools = dotted(it)
    parts = [w for part in (tools or "").split(".") for w in words(part)]
    # `agent.tools`, `functions`; not `message.tool_calls` (the history's calls, in the order made).
    if (
        tools
        and parts[-1] in ("tools", "functions")
        and not set(parts) & _HISTORY_WORDS
        and (parts[-1] == "tools" or _reads_tool_fields(loop.node))
    ):
        edits = (
            (Edit(start, end, f"{loop.iter_text}|sort(attribute='name')"),) if loop.iter_start >= 0 else ()
        )
        yield Hit("CW203", start, end, {"value": tools}, edits)


def _reads_tool_fields(loop: nodes.For) -> bool:
    """`functions` are tools when the loop reads a tool's fields (`f.name`, `f["parameters"]`); a
    loop that prints each item as it is (`{{ func }}`: source code to document) is not over tools."""
    target = loop.target.name if isinstance(loop.target, nodes.Name) else None
    for node in loop.find_all((nodes.Getattr, nodes.Getitem)):
        key: object
        if isinstance(node, nodes.Getattr):
            base, key = node.node, node.attr
        elif isinstance(node, nodes.Getitem):
            base, key = node.node, getattr(node.arg, "value", None)
        else:
            continue
        if isinstance(base, nodes.Name) and base.name == target and key in _TOOL_FIELDS:
            return True
    return target is None


def _structure(
    ctx: Context,
    pieces: list[Piece],
    after: list[int],
    system: list[tuple[int, int]],
    static_tokens: list[int],
) -> Iterator[Hit]:
    for i, piece in enumerate(pieces):
        if not piece.static and piece.per_request and piece.volatile is None and not piece.per_user:
            if after[i + 1] >= limits.LARGE_STATIC_BLOCK_TOKENS:
                # Moved before the value, the static text is cached only if it then reaches the
                # model's minimum: below it the move buys nothing there (a note, not a warning).
                # All the static text it can be rendered with (the value's own piece has none).
                short = _static_with(pieces, static_tokens, piece, 0, len(pieces)) < ctx.info.cache.min_tokens
                args = {"value": piece.label, "tokens": after[i + 1]}
                yield Hit("CW301", piece.start, piece.end, args, severity="info" if short else None)
            break
    for i, piece in enumerate(pieces):
        if piece.per_user and any(a <= piece.start < b for a, b in system):
            # What a per-user value costs is the static text after it, once per user: a name in
            # the last line of the instructions is a note, one before them a warning (as CW301).
            tokens = after[i + 1]
            quiet: Severity | None = "info" if tokens < limits.LARGE_STATIC_BLOCK_TOKENS else None
            yield Hit(
                "CW302",
                piece.start,
                piece.end,
                {"value": piece.per_user, "tokens": f"{tokens:,}"},
                severity=quiet,
            )


def _size(ctx: Context, pieces: list[Piece], static_tokens: list[int]) -> Iterator[Hit]:
    # A date that changes once a day leaves the prefix after it cacheable all day: the cacheable
    # prefix ends at the first value that changes per request.
    first = next(
        (
            i
            for i, p in enumerate(pieces)
            if not p.static
            and ((p.volatile and severity(p.frequency) is None) or (p.per_request and not p.volatile))
        ),
        None,
    )
    if first is None:
        return
    piece = pieces[first]
    prefix = _static_with(pieces, static_tokens, piece, 0, first)
    total = _static_with(pieces, static_tokens, piece, 0, len(pieces))
    minimum = ctx.info.cache.min_tokens
    args = {
        "value": piece.label,
        "prefix": prefix,
        "total": total,
        "minimum": minimum,
        "model": ctx.info.model,
    }
    if total >= minimum > prefix:
        yield Hit("CW401", piece.start, piece.end, args)
    elif total >= limits.SHARE_MIN_STATIC_TOKENS and prefix < limits.LOW_SHARE * total:
        yield Hit("CW402", piece.start, piece.end, {**args, "share": f"{prefix / total:.0%}"})
