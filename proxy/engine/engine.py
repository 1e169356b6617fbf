"""The engine: one request in, a prediction out — adapters, tokenizer, prefix index, cache model, pricing.

Every surface (proxy, replay, diff) goes through ``Engine.analyse``. It is synchronous and holds
no I/O; the proxy runs it in a worker thread beside the forwarding.

Scopes. The provider caches per organisation and per model, so the index scope is
(tenant, provider, model). Cache-affecting parameters (Anthropic ``tool_choice`` / ``thinking``,
OpenAI reasoning effort) are not part of the scope: they *salt* the first token after the part of
the prompt they invalidate (Anthropic: ``tool_choice`` and ``thinking`` the messages, ``speed``,
web search and citations the system prompt too; OpenAI: the whole prompt), the way vLLM
injects its cache salt into the first block. Prompts with other parameters then diverge exactly
where the provider's cache would, and the tools cache survives a ``tool_choice`` change. Where the
salt would fall on the very first token (OpenAI), it names a scope of its own instead: the same
matches, and the index walks the counter's stream as it is (``scoped_stream``).
A second, model-blind index over the unsalted tokens (scope = tenant, provider family) finds the
earlier request a miss should be compared with, so attribution can say ``model-changed`` or
``params-changed`` instead of ``cold``.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cachewarden.proxy.engine.index.base import (
    Insert,
    Lookup,
    Marks,
    Match,
    PrefixIndex,
    lookup_many,
    marks_many,
)
from cachewarden.proxy.engine.index.memory import MemoryIndex
from cachewarden.proxy.engine.index.query import derived, origin_of
from cachewarden.proxy.engine.index.rope import is_frozen

from .cache_model import Prediction, breakpoint_positions, predict
from .counting import PromptCounter, TokenizedPrompt
from .lineage import Lineage, area_heads
from .models import ModelInfo, ModelTable, load_model_table
from .pricing import Cost, PriceTable
from .prompt import Prompt

_SALT_MASK = (1 << 62) - 1
# Entry ids unique across processes (replicas share an index) without a uuid4 per request.
_ID_PREFIX = secrets.token_hex(6) + "-"
_ID_COUNTER = itertools.count(1)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """An earlier request the engine can compare a new one with (kept in memory, bounded)."""

    entry_id: str
    tenant: str
    prompt: Prompt
    tokenized: TokenizedPrompt
    at: float


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the engine concluded about one request."""

    prompt: Prompt
    info: ModelInfo
    tokenized: TokenizedPrompt
    tenant: str
    scope: str
    entry_id: str
    match: Match
    prediction: Prediction
    cost: Cost | None
    # The earlier request of the tenant (any model or parameters) sharing the longest prefix.
    previous: HistoryEntry | None
    previous_common_tokens: int
    now: float


# Anthropic's invalidation table (provider-caching.md §2.4): these parameters invalidate the system
# cache too; every other cache-affecting parameter (tool_choice, thinking, ...) only the messages.
_SYSTEM_LEVEL_PARAMS = frozenset({"speed", "web_search", "citations"})
# OpenAI parameters that choose the cache policy rather than change the rendered prompt.
_POLICY_PARAMS = frozenset({"prompt_cache_retention", "prompt_cache_options"})
# ``prompt_cache_retention: "24h"`` keeps prefixes up to a day (OpenAI extended retention).
_EXTENDED_RETENTION_SECONDS = 86_400.0


def _salt_points(prompt: Prompt, tp: TokenizedPrompt) -> list[tuple[int, tuple[tuple[str, str], ...]]]:
    """(stream position, parameters) pairs: where each group of parameters starts to matter."""
    if prompt.provider != "anthropic":
        return [(0, tuple(p for p in prompt.params if p[0] not in _POLICY_PARAMS))]
    # Tools, then top-level system text, then the messages (the adapter's cache order; only a
    # body's own tools are "tool" segments): read up to the first message, not a long history.
    after_tools, first_message = 0, len(tp.tokens)
    for seg, (start, end) in zip(prompt.segments, tp.spans, strict=False):
        if seg.message_index is not None:
            first_message = start
            break
        if seg.kind == "tool":
            after_tools = max(after_tools, end)
    system_level = tuple(p for p in prompt.params if p[0] in _SYSTEM_LEVEL_PARAMS)
    message_level = tuple(p for p in prompt.params if p[0] not in _SYSTEM_LEVEL_PARAMS)
    return [(after_tools, system_level), (first_message, message_level)]


def _salt(token: int, params: tuple[tuple[str, str], ...]) -> int:
    # Negative and large: cannot collide with a real token id. blake2b, not hash(): Python salts
    # string hashes per process, and replicas sharing an index must salt alike.
    digest = hashlib.blake2b(repr((token, params)).encode(), digest_size=8).digest()
    return -(int.from_bytes(digest, "big") & _SALT_MASK) - (1 << 40)


def _salted(
    tokens: Sequence[int], points: Sequence[tuple[int, tuple[tuple[str, str], ...]]]
) -> Sequence[int]:
    salted: list[int] | None = None
    for at, params in points:
        if not params or at >= len(tokens):
            continue
        salted = salted if salted is not None else list(tokens)
        salted[at] = _salt(salted[at], params)
    return salted if salted is not None else tokens


def salted_tokens(prompt: Prompt, tp: TokenizedPrompt) -> Sequence[int]:
    """The token stream the scoped index sees: parameters folded into tokens (see module doc)."""
    if not prompt.params or not tp.tokens:
        return tp.tokens
    return _salted(tp.tokens, _salt_points(prompt, tp))


def scoped_stream(scope: str, prompt: Prompt, tp: TokenizedPrompt) -> tuple[str, Sequence[int]]:
    """The scope and stream the scoped index is asked with: ``scope`` and ``salted_tokens``, except
    where the parameters salt the very first token (OpenAI: the whole prompt). A stream salted there
    shares a prefix with exactly the streams of the same parameters (and first token), which are
    the streams of a scope named after the parameters: the salt goes into the scope, and the index
    walks the counter's own stream (no copy of it, and the index resumes it from the previous one
    of the conversation instead of comparing a long history again). The same matches either way."""
    if prompt.params and tp.tokens and prompt.provider != "anthropic":
        ((_, params),) = _salt_points(prompt, tp)
        if params:
            flat = hashlib.blake2b(repr(params).encode(), digest_size=8).hexdigest()
            return f"{scope}\x1fsalt:{flat}", tp.tokens
    return scope, salted_tokens(prompt, tp)


class Engine:
    """Analyses requests against the recent history of their scope. Thread-safe."""

    def __init__(
        self,
        *,
        table: ModelTable | None = None,
        prices: PriceTable | None = None,
        index: PrefixIndex | None = None,
        wide_index: PrefixIndex | None = None,
        counter: PromptCounter | None = None,
        history_size: int = 4096,
        history_tokens: int = 2_000_000,
    ) -> None:
        self.table = table or load_model_table()
        self.prices = prices or PriceTable.load()
        # 5 M tokens held is about 150 MiB (bench/bench_index.py: ~31 MiB per million tokens).
        self.index = index or MemoryIndex(max_tokens=5_000_000)
        self.wide_index = wide_index or MemoryIndex(max_tokens=5_000_000)
        self.counter = counter or PromptCounter(self.table)
        self._history: OrderedDict[str, HistoryEntry] = OrderedDict()
        # Earlier prompts are kept whole (text and tokens) for attribution: bounded by count and by
        # tokens held (~20 bytes a token with text and token tuple), ~40 MiB at the default.
        self._history_size = history_size
        self._history_tokens = history_tokens
        self._held_tokens = 0
        self._lock = threading.Lock()
        self._lineage = Lineage(4 * history_size)
        self._salted_streams = _SaltedStreams()

    # -- scopes ---------------------------------------------------------------------------------
    @staticmethod
    def scope(tenant: str, prompt: Prompt) -> str:
        """The provider caches per organisation and model; OpenAI also routes on ``prompt_cache_key``."""
        family = "anthropic" if prompt.provider == "anthropic" else "openai"
        key = prompt.prompt_cache_key or "" if family == "openai" else ""
        return f"{tenant}\x1f{family}\x1f{prompt.model}\x1f{key}"

    @staticmethod
    def wide_scope(tenant: str, prompt: Prompt) -> str:
        family = "anthropic" if prompt.provider == "anthropic" else "openai"
        return f"{tenant}\x1f{family}"

    # -- history --------------------------------------------------------------------------------
    def history(self, entry_id: str | None, tenant: str) -> HistoryEntry | None:
        """An earlier request by id, only ever for the tenant that sent it."""
        if entry_id is None:
            return None
        with self._lock:
            entry = self._history.get(entry_id)
        return entry if entry is not None and entry.tenant == tenant else None

    def _remember(self, entry: HistoryEntry) -> None:
        with self._lock:
            old = self._history.pop(entry.entry_id, None)
            if old is not None:
                self._held_tokens -= len(old.tokenized.tokens)
            self._history[entry.entry_id] = entry
            self._held_tokens += len(entry.tokenized.tokens)
            while self._history and (
                len(self._history) > self._history_size or self._held_tokens > self._history_tokens
            ):
                _, dropped = self._history.popitem(last=False)
                self._held_tokens -= len(dropped.tokenized.tokens)

    # -- analysis -------------------------------------------------------------------------------
    def analyse(self, prompt: Prompt, *, tenant: str = "default", now: float | None = None) -> Analysis:
        now = time.time() if now is None else now
        info = self.table.lookup(prompt.model, prompt.provider)
        rules = info.cache
        if prompt.param("prompt_cache_retention") == "24h" and rules.mode == "prefix":
            rules = replace(rules, ttl_seconds=_EXTENDED_RETENTION_SECONDS)
        tp = self.counter.tokenize(prompt)
        scope = self.scope(tenant, prompt)
        # Tuples: a MemoryIndex shares its walk of an immutable sequence between the calls below.
        tokens = _frozen(tp.tokens)
        index_scope, salted = scoped_stream(scope, prompt, tp)
        stream = tokens
        if salted is not tp.tokens:
            stream = self._salted_streams.freeze(tokens, salted, _salt_points(prompt, tp))

        wide = self.wide_scope(tenant, prompt)
        entry_id = f"{_ID_PREFIX}{next(_ID_COUNTER):x}"
        # Only breakpoint predictions read marks, and they read them before this request is
        # inserted: there the inserts follow the prediction. Elsewhere each index inserts the
        # prompt as soon as its lookup is answered, and a shared index with a local mirror makes
        # the local inserts while Redis still works on the lookups.
        inserts_first = rules.mode != "breakpoints"
        scoped_insert = Insert(now, entry_id, rules.ttl_seconds) if inserts_first else None
        wide_insert = Insert(now, entry_id, rules.max_ttl_seconds) if inserts_first else None
        # Both lookups at once: two shared indexes on one Redis answer in one round trip.
        match, wide_match = lookup_many(
            [
                Lookup(self.index, index_scope, stream, rules.ttl_seconds, scoped_insert),
                Lookup(self.wide_index, wide, tokens, 0, wide_insert),
            ],
            now=now,
        )
        marks = _MarkBook(self.index, index_scope, stream, now, rules.ttl_seconds, rules.max_ttl_seconds)
        prediction = predict(prompt, tp, rules, match, marks.lookup, now=now)

        previous = self.history(wide_match.entry_id, tenant)
        heads = area_heads(prompt, tp.spans)
        if previous is None:
            # No common prefix with anything: a change at the very start (``lineage``).
            previous = next(
                filter(None, (self.history(e, tenant) for e in self._lineage.candidates(wide, heads))), None
            )

        if not inserts_first:
            self.index.insert(index_scope, stream, now=now, entry_id=entry_id, ttl=rules.ttl_seconds)
            self.wide_index.insert(wide, tokens, now=now, entry_id=entry_id, ttl=rules.max_ttl_seconds)
            # Only breakpoint predictions read marks (cache_model.predict): in the prefix modes a
            # mark of the read position would be a write (a Redis call) nothing ever reads.
            marks.record(prediction)
        self._remember(HistoryEntry(entry_id, tenant, prompt, tp, now))
        self._lineage.register(wide, heads, entry_id)

        cost = self.prices.cost(
            prompt.model,
            prompt.provider,
            cached=prediction.cached_tokens,
            write_5m=prediction.cache_write_tokens - prediction.cache_write_1h_tokens,
            write_1h=prediction.cache_write_1h_tokens,
            uncached=prediction.uncached_tokens,
        )
        return Analysis(
            prompt=prompt,
            info=info,
            tokenized=tp,
            tenant=tenant,
            scope=scope,
            entry_id=entry_id,
            match=match,
            prediction=prediction,
            cost=cost,
            previous=previous,
            previous_common_tokens=wide_match.held_prefix_tokens,
            now=now,
        )

    def breakpoints(self, prompt: Prompt) -> list[tuple[int, str]]:
        """Effective breakpoints of a prompt (stream positions, ttl) — for reports and the linter."""
        info = self.table.lookup(prompt.model, prompt.provider)
        return breakpoint_positions(prompt, self.counter.tokenize(prompt), info.cache)


def _frozen(tokens: Sequence[int]) -> Sequence[int]:
    """``tokens`` as an immutable sequence (the counter's own are: a tuple or a rope)."""
    return tokens if is_frozen(tokens) else tuple(tokens)


_Point = tuple[int, tuple[tuple[str, str], ...]]
_Points = Sequence[_Point]
_Salted = tuple[Sequence[int], tuple[_Point, ...], Sequence[int]]


class _SaltedStreams:
    """The latest salted streams (Anthropic parameters salt the stream inside), by their unsalted
    stream, so that a salted stream made from the next prompt of the conversation is known to start
    as the earlier one does: the counter said how far the unsalted ones agree (``query.derived``),
    and equal salt points salt equal tokens alike. The index then compares only what follows, not a
    long history. Bounded by entries and tokens; thread-safe."""

    def __init__(self, entries: int = 64, max_tokens: int = 1 << 21) -> None:
        self._max, self._max_tokens, self._tokens = entries, max_tokens, 0
        # unsalted stream, its salt points (a tuple: compared by value), salted stream
        self._data: OrderedDict[int, _Salted] = OrderedDict()
        self._lock = threading.Lock()

    def freeze(self, tokens: Sequence[int], salted: Sequence[int], points: _Points) -> Sequence[int]:
        """``salted`` (``tokens`` salted at ``points``) as a tuple the index can resume."""
        stream = _frozen(salted)
        at = tuple(points)
        origin = origin_of(tokens)
        with self._lock:
            earlier = self._data.get(id(origin[0])) if origin is not None else None
            if origin is not None and earlier is not None and earlier[0] is origin[0] and earlier[1] == at:
                # tokens[:n] == earlier[:n], and each salt point below n salts the same token.
                derived(stream, earlier[2], origin[1])
            old = self._data.pop(id(tokens), None)
            self._tokens -= len(old[0]) if old is not None else 0
            self._data[id(tokens)] = (tokens, at, stream)
            self._tokens += len(tokens)
            while len(self._data) > self._max or (self._tokens > self._max_tokens and len(self._data) > 1):
                _, dropped = self._data.popitem(last=False)
                self._tokens -= len(dropped[0])
        return stream


class _MarkBook:
    """Cache writes at exact prefixes (breakpoint providers), kept per TTL class in the index.

    A 5-minute and a 1-hour entry for the same prefix live and expire independently. 5-minute marks
    sit in the request's own scope; 1-hour writes are rarer, so their prompt is inserted into a
    sub-scope of its own only when one happens (marks hang on the index's blocks).
    """

    def __init__(
        self, index: PrefixIndex, scope: str, stream: Sequence[int], now: float, ttl: float, ttl_1h: float
    ) -> None:
        self.index, self.stream, self.now = index, stream, now
        self.classes = {"5m": (scope, ttl), "1h": (f"{scope}\x1f1h", ttl_1h or 3600.0)}
        self.found: dict[int, str] = {}

    def lookup(self, positions: Sequence[int]) -> Mapping[int, float]:
        ages: dict[int, float] = {}
        # Both classes at once: on a shared index one round trip, not one each.
        queries = [
            Marks(self.index, scope, self.stream, positions, ttl) for scope, ttl in self.classes.values()
        ]
        for ttl_class, found in zip(self.classes, marks_many(queries, now=self.now), strict=True):
            for pos, age in found.items():
                if pos not in ages or age < ages[pos]:
                    ages[pos] = age
                    self.found[pos] = ttl_class
        return ages

    def record(self, prediction: Prediction) -> None:
        """Mark what this request wrote and refresh what it read. Call after the prompt is inserted."""
        by_class: dict[str, set[int]] = {"5m": set(), "1h": set()}
        for pos, ttl_class in prediction.write_positions:
            by_class[ttl_class].add(pos)
        if prediction.read_position:
            # A hit refreshes the entry it read, in its own TTL class.
            by_class[self.found.get(prediction.read_position, "5m")].add(prediction.read_position)
        for pos, ttl_class in prediction.refresh_positions:
            # A breakpoint inside the read prefix refreshes its entry at its own TTL, and one found
            # in the other class too: the provider holds one entry per prefix, at the longer TTL.
            by_class[ttl_class].add(pos)
            if pos in self.found:
                by_class[self.found[pos]].add(pos)
        for ttl_class, positions in by_class.items():
            if not positions:
                continue
            scope, ttl = self.classes[ttl_class]
            if ttl_class == "1h":
                self.index.insert(scope, self.stream, now=self.now, ttl=ttl)
            self.index.mark(scope, self.stream, sorted(positions), now=self.now, ttl=ttl)
