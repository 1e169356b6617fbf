"""Reading the bodies of a conversation one after the other, each from where it parts from the last.

``parse_request`` reads a body whole. An agent's next request repeats the previous one and appends
a turn, so the proxy and ``replay`` read through a ``ConversationReader`` instead: it keeps, per
tenant and conversation, what reading the previous body's messages (or Responses input) produced
(``ItemRun``), resumes the next body there, and links the new Prompt to the previous one
(``Prompt.basis``) so that tokenizing starts where the two part too. The Prompt is exactly the one
``parse_request`` gives (tests/engine/test_incremental.py); only the work differs.

A body ``load`` grew from the very body the conversation's run was read from resumes that run
without a dump or a compare of its items: they are that body's objects. So bodies that ``load``
returns and ``parse`` reads are read-only (the proxy and ``replay`` never change them), as the
splice already requires. The basis a prompt gets names only segments that are the earlier
prompt's: the items' segments taken over as objects, and the head (tools, system) taken over too
when its fields are the earlier body's objects (``earlier_head``: a grown body's are), else
re-read and found equal; the counter and attribution take it without walking the history again.

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
from dataclasses import dataclass, replace
from typing import Any

import orjson

from .adapters import ItemRun, Resume, detect_provider, load_body, parse_request
from .adapters._items import first_difference
from .adapters._splice import closes_items, closing_candidate, extend, find_closing, items_key, splice_point
from .prompt import Basis, Prompt, Provider

# Items that name a conversation: a system prompt and the first user turn.
_KEY_ITEMS = 2
# Raw bodies kept per tenant for the next one to extend (``load``): one API key often serves many
# conversations at once. Bodies not yet extended are probed (a memcmp of what they share) only for
# the newest few; the others are told apart by the last bytes of their last item.
_TAILS_PER_TENANT = 64
_PROBES = 4
_GLANCE = 64
# Bodies up to this size have their items' end found as they are parsed (about one more parse of
# them); larger ones only when a later body looks like it extends them.
_PROVE_AT_ONCE = 64 * 1024
# Bodies ``load`` grew from an earlier one, remembered until they are parsed (each analysis parses
# the body it loaded at once: only a few are ever in flight).
_GROWN = 16


@dataclass(slots=True, eq=False)
class _Tail:
    """A body as received, its parse, and where a later body's items would be inserted: just after
    its last item (``splice_point``; None: not looked for yet; -1: looked for, the end of its items
    not provable, so this body is never extended)."""

    raw: bytes
    body: dict[str, Any]
    key: str
    at: int | None = None


class ConversationReader:
    """``parse_request`` with memory of each conversation's previous body. Thread-safe."""

    def __init__(self, *, conversations: int = 4096, max_bytes: int = 256 * 1024 * 1024) -> None:
        self._max, self._max_bytes, self._bytes = conversations, max_bytes, 0
        # The latest prompt of each conversation is held: the next one's basis refers to it weakly.
        # And the body the run was read from: a body ``load`` grew from it (``_grown``) resumes its
        # run without comparing the items it took over.
        self._runs: OrderedDict[tuple[str, str, bytes], tuple[ItemRun, Prompt, Mapping[str, Any]]] = (
            OrderedDict()
        )
        # Bodies ``load`` made by appending items to an earlier body's (id -> the body, the earlier
        # body, how many items it took over as they were): the items are that body's own objects.
        self._grown: OrderedDict[int, tuple[Mapping[str, Any], Mapping[str, Any], int]] = OrderedDict()
        self._lock = threading.Lock()
        # The key of each body in ``_runs`` (by id; the entry holds the body): a body grown from it
        # is named from there (``_name``).
        self._body_keys: dict[int, tuple[str, str, bytes]] = {}
        # Per tenant, its latest bodies (newest last), for ``load``; bounded by tenants and bytes.
        self._tails: OrderedDict[str, list[_Tail]] = OrderedDict()
        self._tail_bytes = 0
        # A parsed body takes ~5-8x its JSON in memory (the bodies of one conversation share their
        # items): raw bytes held are bounded to an eighth of the runs' bound.
        self._max_tail_bytes = max_bytes // 8

    def load(self, raw: bytes, *, tenant: str) -> dict[str, Any]:
        """``load_body(raw)``, parsing only what ``raw`` appends to a recent body of the tenant
        (adapters/_splice.py) when it does no more than that: the same dict either way."""
        if type(raw) is not bytes:
            return load_body(raw)
        with self._lock:
            tails = list(self._tails.get(tenant, ()))
        probes = _PROBES
        for tail in reversed(tails):
            if tail.at is None:
                # A body that may follow this one: where this one's items close, proved once (for
                # the newest few such bodies only: each look costs a memcmp of the shared bytes).
                if not probes:
                    continue
                probes -= 1
                bracket = closing_candidate(tail.raw, first_difference(raw, tail.raw))
                if bracket is None:
                    continue  # not this one's extension (another conversation, an edit)
                proved = closes_items(tail.raw, tail.body, tail.key, bracket)
                tail.at = splice_point(tail.raw, bracket) if proved else -1
            if tail.at < 0:
                continue
            # Where this body's last item ends, and a few bytes before: most tails of the tenant
            # are other conversations, told apart here for the cost of a short memcmp.
            near = max(0, tail.at - _GLANCE)
            if not raw.startswith(memoryview(tail.raw)[near : tail.at], near):
                continue
            spliced = extend(raw, tail.raw, tail.body, tail.key, tail.at)
            if spliced is not None:
                moved = _Tail(raw, spliced, tail.key, tail.at + len(raw) - len(tail.raw))
                self._keep_tail(tenant, moved, replaces=tail)
                self._keep_grown(spliced, tail.body, len(tail.body[tail.key]))
                return spliced
        body = load_body(raw)
        key = items_key(body)
        if key is not None:
            tail = _Tail(raw, body, key)
            if len(raw) <= _PROVE_AT_ONCE:
                # Cheap while a conversation is short, and its next bodies inherit the offset: even
                # among many conversations at once, each finds its own tail by a glance.
                found = find_closing(raw, body, key)  # proved there
                tail.at = -1 if found is None else splice_point(raw, found)
            self._keep_tail(tenant, tail)
        return body

    def _keep_grown(self, body: Mapping[str, Any], earlier: Mapping[str, Any], items: int) -> None:
        with self._lock:
            self._grown[id(body)] = (body, earlier, items)
            while len(self._grown) > _GROWN:
                self._grown.popitem(last=False)

    def _keep_tail(self, tenant: str, tail: _Tail, replaces: _Tail | None = None) -> None:
        with self._lock:
            tails = self._tails.pop(tenant, [])
            if replaces is not None and replaces in tails:
                tails.remove(replaces)
                self._tail_bytes -= len(replaces.raw)
            tails.append(tail)
            self._tail_bytes += len(tail.raw)
            while len(tails) > _TAILS_PER_TENANT:
                self._tail_bytes -= len(tails.pop(0).raw)
            self._tails[tenant] = tails
            while self._tails and (len(self._tails) > self._max or self._tail_bytes > self._max_tail_bytes):
                _, dropped = self._tails.popitem(last=False)
                self._tail_bytes -= sum(len(t.raw) for t in dropped)

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
        with self._lock:
            grown = self._grown.pop(id(body), None)
            key = self._name(body, provider, tenant, grown)
        if key is None:
            return parse_request(body, provider, model=model)
        with self._lock:
            held = self._runs.get(key)
        previous = held[0] if held is not None else None
        # ``body`` is ``load``'s, grown from the very body this run was read from: its first items
        # are that body's objects (load_body would have parsed the same values from the same
        # bytes), so they are resumed as they are (no dump of the whole list to compare).
        if (
            previous is not None
            and held is not None
            and grown is not None
            and grown[0] is body
            and grown[1] is held[2]
            and grown[2] == len(previous.item_ends)
        ):
            previous = replace(previous, same=grown[2])
        resume = Resume(previous=previous)
        if held is not None:
            # The earlier body's head, taken over as objects where this body's head fields are
            # that body's own (``earlier_head``): then ``_shared_head`` below finds them by identity.
            earlier = held[1].segments
            resume.head = (held[2], earlier[: len(earlier) - len(held[0].segments)])
        prompt = parse_request(body, provider, model=model, resume=resume)
        run = resume.run
        if run is None:
            return prompt
        if held is not None and run.reused:
            shared = _shared_head(held[1], len(held[0].segments), prompt, len(run.segments))
            if shared is not None:
                prompt = replace(prompt, basis=Basis(weakref.ref(held[1]), shared + run.reused))
        self._keep(key, run, prompt, body)
        return prompt

    def _name(
        self,
        body: Mapping[str, Any],
        provider: Provider,
        tenant: str,
        grown: tuple[Mapping[str, Any], Mapping[str, Any], int] | None,
    ) -> tuple[str, str, bytes] | None:
        """``_conversation``'s key; for a body ``load`` grew from one whose run is held, that one's
        key when the naming items are its very objects (then equal: no dump and hash of a long
        system prompt again, ~40 µs a turn). Under the lock."""
        if grown is not None and grown[0] is body:
            known = self._body_keys.get(id(grown[1]))
            held = self._runs.get(known) if known is not None and known[:2] == (tenant, provider) else None
            if held is not None and held[2] is grown[1]:
                field = "input" if provider == "openai-responses" else "messages"
                items, earlier = body.get(field), grown[1].get(field)
                if (
                    isinstance(items, list)
                    and isinstance(earlier, list)
                    and len(earlier) >= _KEY_ITEMS
                    and all(a is b for a, b in zip(items[:_KEY_ITEMS], earlier, strict=False))
                ):
                    return known
        return _conversation(body, provider, tenant)

    def _keep(
        self, key: tuple[str, str, bytes], run: ItemRun, prompt: Prompt, body: Mapping[str, Any]
    ) -> None:
        with self._lock:
            old = self._runs.pop(key, None)
            if old is not None:
                self._bytes -= old[0].size
                self._body_keys.pop(id(old[2]), None)
            self._runs[key] = (run, prompt, body)
            self._body_keys[id(body)] = key
            self._bytes += run.size
            while self._runs and (len(self._runs) > self._max or self._bytes > self._max_bytes):
                _, (dropped, _, gone) = self._runs.popitem(last=False)
                self._bytes -= dropped.size
                self._body_keys.pop(id(gone), None)


def _shared_head(earlier: Prompt, earlier_items: int, prompt: Prompt, items: int) -> int | None:
    """The length of the head (tools, schema, top-level system: what precedes the items' segments)
    when the two prompts' heads are equal, segment for segment and digest for digest; else None.

    Then a basis of ``head + reused`` segments names segments that are the earlier prompt's, every
    one: the head compared here, the items' segments taken over as the very objects. Its users (the
    counter, attribution) rely on that without walking a long history again.
    """
    head = len(prompt.segments) - items
    if len(earlier.segments) - earlier_items != head:
        return None
    for a, b in zip(earlier.segments[:head], prompt.segments[:head], strict=True):
        if a is not b and (a != b or a.digest != b.digest):
            return None
    return head


def _conversation(body: Mapping[str, Any], provider: Provider, tenant: str) -> tuple[str, str, bytes] | None:
    items = body.get("input" if provider == "openai-responses" else "messages")
    if not isinstance(items, list) or not items:
        return None
    try:
        head = orjson.dumps(items[:_KEY_ITEMS])
    except TypeError:
        return None
    return tenant, provider, hashlib.blake2b(head, digest_size=16).digest()
