"""Anthropic's own cache diagnosis beside cachewarden's: does our first reason name the same area?

Anthropic answers why a request missed when it asks with ``diagnostics: {"previous_message_id"}``
(provider-caching.md §2.7) with one coarse type for the earliest divergence: ``model_changed``,
``system_changed``, ``tools_changed``, ``messages_changed``, ``previous_message_not_found`` or
``unavailable`` (another prompt-affecting parameter differs). cachewarden's reasons are finer
(``tools-reordered``, ``timestamp`` in the system prompt, ``history-truncated``, ...): each maps to the
coarse type of the area it was found in, so the two can be compared request by request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .attribution import Reason

PROVIDER_TYPES = frozenset(
    {
        "model_changed",
        "system_changed",
        "tools_changed",
        "messages_changed",
        "previous_message_not_found",
        "unavailable",
    }
)
# Reasons that name an area by themselves; the others (key-order, whitespace, timestamp, unique-id,
# content-changed) take the area of the segment they were found in.
_BY_CODE = {
    "model-changed": "model_changed",
    "params-changed": "unavailable",
    "tools-changed": "tools_changed",
    "tools-reordered": "tools_changed",
    "system-changed": "system_changed",
    "history-edited": "messages_changed",
    "history-truncated": "messages_changed",
}
# The prompt matched, and the entry was gone (or never written): Anthropic reports no divergence.
_NO_DIVERGENCE = frozenset({"expired", "unexplained", "below-minimum", "no-breakpoint", "breakpoint-too-far"})


@dataclass(frozen=True, slots=True)
class Diagnosis:
    provider: str  # one of PROVIDER_TYPES, "none" (null) or "inconclusive"
    reason: str | None  # cachewarden's first reason code (None: no miss predicted)
    agrees: bool


def provider_type(value: Any) -> str:
    """The bounded type of a response's ``diagnostics`` value."""
    if not isinstance(value, Mapping):
        return "none"
    miss = value.get("cache_miss_reason")
    if not isinstance(miss, Mapping):
        return "inconclusive"  # {"cache_miss_reason": null}: the comparison was still running
    kind = miss.get("type")
    return kind if isinstance(kind, str) and kind in PROVIDER_TYPES else "unavailable"


def coarse(reason: Reason | None) -> str:
    """The Anthropic type cachewarden's reason corresponds to."""
    if reason is None or reason.code in _NO_DIVERGENCE:
        return "none"
    if reason.code == "cold":
        return "previous_message_not_found"
    if reason.code in _BY_CODE:
        return _BY_CODE[reason.code]
    segment = reason.segment or ""
    if segment.startswith("tools"):
        return "tools_changed"
    if segment.startswith("system"):
        return "system_changed"
    return "messages_changed"


def compare(value: Any, reasons: Sequence[Reason]) -> Diagnosis:
    first = reasons[0] if reasons else None
    provider = provider_type(value)
    ours = coarse(first)
    # A scope cachewarden has not seen yet ("cold") agrees with Anthropic finding no divergence too:
    # the previous message may be known to Anthropic only.
    agrees = provider == ours or (ours == "previous_message_not_found" and provider == "none")
    return Diagnosis(provider, first.code if first else None, agrees)
