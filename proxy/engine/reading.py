"""Reading the bodies of a conversation one after the other, each from where it parts from the last.

``parse_request`` reads a body whole. An agent's next request repeats the previous one and appends
a turn, so the proxy and ``replay`` read through a ``ConversationReader`` instead: it keeps, per
tenant and conversation, what reading the previous body's messages (or Responses input) produced
(``ItemRun``), resumes the next body there, and links the new Prompt to the previous one
(``Prompt.basis``) so that tokenizing starts where the two part too. The Prompt is exactly the one
``parse_request`` gives (tests/engine/test_incremental.py); only the work differs.

A conversation is named by its first two items (system prompt and first user turn, typically):
bodies that share them resume from each other, which is always correct and usually the same
conversation. A body that drops its oldest turns starts a conversation of its own. Bounded by
conversations and by the bytes their runs hold; one tenant's runs are never another's basis.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson

from .adapters import ItemRun, Resume, detect_provider, parse_request
from .prompt import Basis, Prompt, Provider

# Items that name a conversation: a system prompt and the first user turn.
_KEY_ITEMS = 2


class ConversationReader:
    """``parse_request`` with memory of each conversation's previous body. Thread-safe."""

    def __init__(self, *, conversations: int = 4096, max_bytes: int = 256 * 1024 * 1024) -> None:
        self._max, self._max_bytes, self._bytes = conversations, max_bytes, 0
        # The latest prompt of each conversation is held: the next one's basis refers to it weakly.
        self._runs: OrderedDict[tuple[str, str, bytes], tuple[ItemRun, Prompt]] = OrderedDict()
        self._lock = threading.Lock()

    def parse(
        self,
        body: Mapping[str, Any],
        provider: Provider | None = None,
        *,
        tenant: str,
        model: str | None = None,
    ) -> Prompt:
        """Read ``body`` (a parsed JSON object) as ``parse_request(body, provider, model=model)`` does."""
        provider = provider if provider is not None else detect_provider(body)
        key = _conversation(body, provider, tenant)
        if key is None:
            return parse_request(body, provider, model=model)
        with self._lock:
            held = self._runs.get(key)
        resume = Resume(previous=held[0] if held is not None else None)
        prompt = parse_request(body, provider, model=model, resume=resume)
        run = resume.run
        if run is None:
            return prompt
        if held is not None and run.reused:
            head = len(prompt.segments) - len(run.segments)
            prompt = replace(prompt, basis=Basis(weakref.ref(held[1]), head + run.reused))
        self._keep(key, run, prompt)
        return prompt

    def _keep(self, key: tuple[str, str, bytes], run: ItemRun, prompt: Prompt) -> None:
        with self._lock:
            old = self._runs.pop(key, None)
            if old is not None:
                self._bytes -= old[0].size
            self._runs[key] = (run, prompt)
            self._bytes += run.size
            while self._runs and (len(self._runs) > self._max or self._bytes > self._max_bytes):
                _, (dropped, _) = self._runs.popitem(last=False)
                self._bytes -= dropped.size


def _conversation(body: Mapping[str, Any], provider: Provider, tenant: str) -> tuple[str, str, bytes] | None:
    items = body.get("input" if provider == "openai-responses" else "messages")
    if not isinstance(items, list) or not items:
        return None
    try:
        head = orjson.dumps(items[:_KEY_ITEMS])
    except TypeError:
        return None
    return tenant, provider, hashlib.blake2b(head, digest_size=16).digest()
