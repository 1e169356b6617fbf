"""Anthropic cache diagnostics, emulated (provider-caching.md §2.7).

A request carrying ``diagnostics: {"previous_message_id": ID}`` gets a ``diagnostics`` object in its
response (and on ``message_start`` when streamed): ``null`` when there is nothing to report (no
previous id, or the request extends the previous one), else ``{"cache_miss_reason": {"type",
"cache_missed_input_tokens"}}`` naming the earliest divergence from the request that produced ID,
in Anthropic's order: model, system, tools, messages, then the other prompt-affecting parameters
(``unavailable``: "model, system, and tools match but another prompt-affecting request parameter
... differs"). An unknown id is ``previous_message_not_found``. The missed tokens are what follows
the divergence (Anthropic derives them from byte lengths: a magnitude, as here).

Each Messages response is remembered by id (bounded LRU, per API key like the provider's scope).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.counting import TokenizedPrompt, provider_count
from cachewarden.proxy.engine.prompt import Prompt


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a later request is compared with: digests per area, never text."""

    owner: str
    model: str
    system: tuple[str, ...]
    tools: tuple[str, ...]
    messages: tuple[str, ...]
    params: tuple[tuple[str, str], ...]


def _shape(owner: str, prompt: Prompt) -> _Shape:
    segs = prompt.segments
    return _Shape(
        owner=owner,
        model=prompt.model.lower(),
        system=tuple(s.digest for s in segs if s.message_index is None and s.kind not in ("tool", "schema")),
        tools=tuple(s.digest for s in segs if s.kind == "tool"),
        messages=tuple(s.digest for s in segs if s.message_index is not None),
        params=prompt.params,
    )


def requested(body: Mapping[str, Any]) -> bool:
    return isinstance(body.get("diagnostics"), Mapping)


class DiagnosisStore:
    """Request shapes by response id, bounded; ``diagnose`` compares a request with one of them."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._max = max_entries
        self._data: OrderedDict[str, _Shape] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, response_id: str, owner: str, prompt: Prompt) -> None:
        with self._lock:
            self._data[response_id] = _shape(owner, prompt)
            while len(self._data) > self._max:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def diagnose(
        self, owner: str, body: Mapping[str, Any], prompt: Prompt, tokenized: TokenizedPrompt
    ) -> dict[str, Any] | None:
        """The response's ``diagnostics`` value for a request that asked for it (see module doc)."""
        spec = body.get("diagnostics")
        previous_id = spec.get("previous_message_id") if isinstance(spec, Mapping) else None
        if not isinstance(previous_id, str):
            return None
        with self._lock:
            before = self._data.get(previous_id)
        if before is None or before.owner != owner:
            return _reason("previous_message_not_found", tokenized.count)
        now = _shape(owner, prompt)
        segs = prompt.segments
        kinds = [s.kind for s in segs]

        def missed_from(index: int) -> int:
            start = tokenized.spans[index][0] if index < len(segs) else len(tokenized.tokens)
            return tokenized.count - provider_count(start, tokenized.ratio)

        first_tool = kinds.index("tool") if "tool" in kinds else 0
        if now.model != before.model:
            return _reason("model_changed", tokenized.count)
        if now.tools != before.tools:
            return _reason("tools_changed", missed_from(first_tool))
        if now.system != before.system:
            first = next((i for i, s in enumerate(segs) if s.message_index is None and s.kind == "system"), 0)
            return _reason("system_changed", missed_from(first))
        # The request must extend the earlier one (its messages, then the reply, then new turns).
        common = 0
        for old, new in zip(before.messages, now.messages, strict=False):
            if old != new:
                break
            common += 1
        if common < len(before.messages):
            message_segs = [i for i, s in enumerate(segs) if s.message_index is not None]
            at = message_segs[common] if common < len(message_segs) else len(segs)
            return _reason("messages_changed", missed_from(at))
        if now.params != before.params:
            return _reason("unavailable", 0)
        return None


def _reason(kind: str, missed: int) -> dict[str, Any]:
    return {"cache_miss_reason": {"type": kind, "cache_missed_input_tokens": max(0, missed)}}
