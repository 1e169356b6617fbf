"""Model and parameters: the request-wide reasons (model-changed, params-changed, images).

These are not tied to one area's text. The cache is per model, so a model or provider change
loses everything. A parameter change (tool_choice, thinking, reasoning effort, ...) is costed from
the start of the prompt, except on Anthropic, where it keeps the tools cache and drops what follows;
and on Anthropic adding or removing an image anywhere drops the message cache (one params-changed
finding, merged with a parameter change by ``attribution``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import and_, attrgetter, eq

from cachewarden.proxy.engine.basis_memo import BasisMemo
from cachewarden.proxy.engine.prompt import Prompt, Segment

from .formats import family
from .structure import Finding, Pair
from .values import short


def _images_in(segments: Sequence[Segment]) -> int:
    # Images inside tool results have no segment of their own: their fixed tokens mark them. Counted
    # with C-level maps, no Python loop over the segments.
    kinds = list(map(_KIND, segments))
    images = kinds.count("image")
    if "tool_result" not in kinds:
        return images
    results = map(eq, kinds, repeat("tool_result"))
    with_images: int = sum(map(and_, results, map(bool, map(_FIXED, segments))))
    return images + with_images


def _grown(before: int, old: Sequence[Segment], segs: Sequence[Segment], shared: int) -> int:
    return before - _images_in(old[shared:]) + _images_in(segs[shared:])


# Taken from the basis prompt's count (``basis_memo``): a long conversation counts its new segments.
_IMAGES: BasisMemo[int] = BasisMemo(_images_in, _grown)


def _image_count(prompt: Prompt) -> int:
    return _IMAGES.of(prompt)


_KIND = attrgetter("kind")
_FIXED = attrgetter("fixed_tokens")


def image_finding(pair: Pair) -> Finding | None:
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
    return Finding(
        "params-changed",
        path,
        0,
        pair.area_start("messages", 0),
        f"{what}{' at ' + path if path else ''}: Anthropic drops the message cache when images change",
    )


# -- model and parameters ----------------------------------------------------------------------------


def model_and_param_findings(pair: Pair) -> list[Finding]:
    """model-changed and params-changed (with every parameter that differs), in that order."""
    found: list[Finding] = []
    # The request format aside (Chat or Responses): one provider's cache is per model (``formats``).
    if pair.prev.model.lower() != pair.cur.model.lower() or family(pair.prev) != family(pair.cur):
        found.append(
            Finding(
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
                changes.append(f"{key} {short(x or '(unset)', 40)} → {short(y or '(unset)', 40)}")
        position, segment = 0, None
        if pair.cur.provider == "anthropic":
            # tool_choice, thinking and the rest keep the tools cache and drop everything after it.
            position = pair.area_start("schema", 0)
            rest = [i for a in ("system", "messages") for i in pair.n_area[a]]
            segment = pair.cur.segments[rest[0]].path if rest else None
        found.append(Finding("params-changed", segment, 0 if segment else None, position, "; ".join(changes)))
    return found
