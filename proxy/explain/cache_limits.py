"""Cache limits: the reasons that lie in the cache model, not in a change between two prompts.

``cold``: nothing earlier in the scope to reuse. ``expired``: the index held a longer prefix than it
still serves, because the rest is older than the TTL; it costs that held prefix. The model's own
limits (``below-minimum``, ``no-breakpoint``, ``breakpoint-too-far``, from the engine's
``Prediction.limits``) cost the reusable tokens that were not cached. ``unexplained`` is not decided
here: it is what the callers report when the provider's bill and the prediction disagree.

A limit that only exists because of a change is folded into the change (``folds_into_change``):
when the common prefix is below the minimum, or reaches past the last entry the earlier request
wrote, because the prompts diverge early, the reason at the divergence carries those tokens.

This module decides which limits apply and how they read; ``attribution`` turns them into costed
``Reason`` values, so the stream-to-provider conversion and the pricing stay in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cachewarden.proxy.engine.cache_model import breakpoint_positions
from cachewarden.proxy.engine.counting import provider_count
from cachewarden.proxy.engine.prompt import Prompt

if TYPE_CHECKING:
    from cachewarden.proxy.engine.engine import Analysis

COLD_DETAIL = "no earlier request in this scope to reuse"
# The limits an early divergence can cause: a prefix too short, or one that no earlier write covers.
_FOLDABLE = (["below-minimum"], ["no-breakpoint"])


def is_cold(analysis: Analysis) -> bool:
    """No earlier request of the scope to compare with, and no prefix held in the index either."""
    return analysis.previous is None and analysis.match.held_prefix_tokens == 0


def expired_prefix(analysis: Analysis) -> tuple[int, str] | None:
    """The held prefix past the one still served (stream tokens) and its detail; None if none expired."""
    match = analysis.match
    if match.held_prefix_tokens <= match.common_prefix_tokens:
        return None
    ttl = f", TTL {analysis.info.cache.ttl_seconds:.0f} s"
    age = "" if match.age_seconds is None else f" ({match.age_seconds:.0f} s old{ttl})"
    return match.held_prefix_tokens - match.common_prefix_tokens, f"the matching prefix{age} has expired"


def model_limits(analysis: Analysis) -> tuple[int, list[str]]:
    """The reusable provider tokens that were not cached, and the limit codes that explain them.

    ``expired`` is left out: ``expired_prefix`` reports it from the index, with its own cost.
    """
    prediction = analysis.prediction
    missed = max(0, prediction.reusable_tokens - prediction.cached_tokens)
    return missed, [code for code in prediction.limits if code != "expired"]


def folds_into_change(
    analysis: Analysis, limits: Sequence[str], previous: Prompt, divergence_index: int, lost: int
) -> bool:
    """Whether the first limit exists only because the prompts diverge early (see the module doc).

    ``previous`` is the earlier prompt the change was found against, ``divergence_index`` its first
    differing segment and ``lost`` the provider tokens the change reasons already cost.
    """
    if list(limits[:1]) not in _FOLDABLE:
        return False
    if limits[0] == "below-minimum":
        # Without the change the reusable prefix would have been this long.
        return analysis.prediction.reusable_tokens + lost >= analysis.info.cache.min_tokens
    return _had_breakpoint_past(previous, divergence_index, analysis)


def _had_breakpoint_past(prompt: Prompt, index: int, analysis: Analysis) -> bool:
    """Whether the earlier request wrote (or could write) a cache entry at or past segment ``index``."""
    if prompt.auto_cache is not None or analysis.info.cache.implicit_breakpoint:
        return True
    return any(i >= index for i in prompt.breakpoints)


def limit_detail(code: str, analysis: Analysis) -> str:
    """The report line of one model limit, with the numbers that make it apply."""
    rules = analysis.info.cache
    p = analysis.prediction
    if code == "below-minimum":
        return f"the reusable prefix ({p.reusable_tokens} tokens) is below the minimum of {rules.min_tokens}"
    if code == "no-breakpoint":
        tp = analysis.tokenized
        bps = breakpoint_positions(analysis.prompt, tp, rules)
        last = provider_count(bps[-1][0], tp.ratio) if bps else 0
        if 0 < last < p.reusable_tokens:
            # The breakpoint sits before the reusable prefix ends (e.g. moved from the system prompt
            # to the tools): the earlier entry past it is covered by no breakpoint of this request.
            return (
                f"no breakpoint covers the reusable prefix past token {last} "
                f"(of {p.reusable_tokens}): the earlier cache entry lies after the last breakpoint"
            )
        return f"no earlier cache write covers the reusable prefix ({p.reusable_tokens} tokens)"
    if code == "breakpoint-too-far":
        return (
            f"the earlier cache entry lies outside the {rules.lookback}-{rules.lookback_unit} lookback window"
        )
    return code
