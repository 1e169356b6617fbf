"""Self-calibration of token counts from the usage each response reports.

Every response states the exact input tokens of its request. What the counter gets wrong is nearly
always in the request's fixed parts (a tool rendering, an output schema, an injected system prompt),
and those repeat: the next request with the same parts is off by the same amount. So the difference
reported - counted is kept per tenant, model + cache-affecting parameters (the prompt's fingerprint)
and digest of the fixed parts, and added to the next count with the same key: after one response per
tool set the prediction is exact.

Estimated tokenizers (Claude: o200k times a per-family ratio) are one case of the same mechanism:
their error grows with the request, so for them the ratio is learned first (per model, moved
towards reported / stream at a small weight), and the per-digest offset takes what the ratio leaves.

Bounded: an LRU of ``max_entries`` keys (each a few dozen bytes); no prompt text is kept, only digests.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter

from .counting import PromptCounter, TokenizedPrompt, provider_count
from .prompt import Prompt, Segment

# The parts that do not change between the turns of one conversation (and where the rendering
# errors live); messages are left out so that a growing conversation keeps its key.
FIXED_KINDS = frozenset({"tool", "schema"})
_CANDIDATE_KINDS = FIXED_KINDS | {"system"}
# Ratio learning (estimated tokenizers): weight of each observation, smallest stream worth learning
# from (framing dominates tiny requests), plausible bounds of a provider-tokens-per-o200k-token ratio.
RATIO_WEIGHT = 0.1
RATIO_MIN_TOKENS = 200
RATIO_BOUNDS = (0.7, 2.5)
# An offset larger than this share of the request is not a rendering error but a request the
# counter cannot see (server tools, files by id, a previous_response_id chain): not learned.
MAX_OFFSET_SHARE = 0.25


_KIND = attrgetter("kind")


def fixed_digest(prompt: Prompt) -> str:
    """Digest of the request's fixed parts: tools, output schema and top-level / first system text."""
    return _fixed(prompt.fingerprint, prompt.segments)[0]


def _counts(seg: Segment, first_index: int | None) -> bool:
    """Whether ``seg`` is one of the fixed parts, the first message being ``first_index``."""
    if seg.kind in FIXED_KINDS:
        return True
    top_system = seg.message_index is None or (
        seg.message_index == first_index and seg.role in ("system", "developer")
    )
    return seg.kind == "system" and top_system


def _fixed(fingerprint: str, segments: Sequence[Segment]) -> tuple[str, int, int]:
    """(digest, where the first segment that is not a tool or schema is (-1: none), one past the
    last fixed part) of ``segments``."""
    h = hashlib.blake2b(digest_size=8)
    h.update(fingerprint.encode())
    first = next((i for i, s in enumerate(segments) if s.kind not in FIXED_KINDS), -1)
    first_index = segments[first].message_index if first >= 0 else None
    # Only tools, schemas and system text can count: picked out at C speed (a long history of
    # messages costs no Python loop), then judged one by one.
    end = 0
    for i in compress(range(len(segments)), map(_CANDIDATE_KINDS.__contains__, map(_KIND, segments))):
        seg = segments[i]
        if _counts(seg, first_index):
            h.update(seg.digest.encode())
            end = i + 1
    return h.hexdigest(), first, end


@dataclass(frozen=True, slots=True)
class _Known:
    segments: tuple[Segment, ...]  # held: the key is its id
    fingerprint: str
    digest: str
    first: int  # the first segment that is not a tool or schema (-1: none)
    end: int  # one past the last fixed part


class FixedDigests:
    """``fixed_digest`` of the latest prompts, each next one of a conversation taken from its basis'.

    A prompt read from an earlier one (``Prompt.basis``) shares its first ``shared`` segments with
    it (``reading`` proves it). When those hold every fixed part of the earlier prompt and its first
    message, the new prompt's fixed parts are the earlier one's plus any among its new segments:
    only those are looked at (a conversation's next turn costs its new segments, not its history:
    ~0.1 ms at 1,000 messages from scratch, ~15 µs so). Bounded by entries; thread-safe.
    """

    def __init__(self, entries: int = 1024) -> None:
        self._max = max(1, entries)
        self._data: OrderedDict[int, _Known] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, prompt: Prompt) -> str:
        segments = prompt.segments
        with self._lock:
            known = self._data.get(id(segments))
        if known is not None and known.segments is segments and known.fingerprint == prompt.fingerprint:
            return known.digest
        found = self._from_basis(prompt)
        if found is None:
            digest, first, end = _fixed(prompt.fingerprint, segments)
        else:
            digest, first, end = found
        with self._lock:
            self._data[id(segments)] = _Known(segments, prompt.fingerprint, digest, first, end)
            self._data.move_to_end(id(segments))
            while len(self._data) > self._max:
                self._data.popitem(last=False)
        return digest

    def _from_basis(self, prompt: Prompt) -> tuple[str, int, int] | None:
        basis = prompt.basis
        earlier = basis.prompt() if basis is not None else None
        if basis is None or earlier is None:
            return None
        with self._lock:
            known = self._data.get(id(earlier.segments))
        if known is None or known.segments is not earlier.segments or known.fingerprint != prompt.fingerprint:
            return None
        shared = min(basis.shared, len(earlier.segments), len(prompt.segments))
        # The first message and every fixed part inside the shared segments: then both prompts
        # judge their segments against the same first message, and the earlier one's digest
        # covers every fixed part up to ``shared``.
        if not 0 <= known.first < shared or known.end > shared:
            return None
        segments = prompt.segments
        first_index = segments[known.first].message_index
        # A slice, not islice: islice would step over the shared segments one by one.
        kinds = map(_CANDIDATE_KINDS.__contains__, map(_KIND, segments[shared:]))
        if any(_counts(segments[i], first_index) for i in compress(range(shared, len(segments)), kinds)):
            return None  # a fixed part among the new segments: digested whole (rare)
        return known.digest, known.first, known.end


@dataclass(frozen=True, slots=True)
class Calibrated:
    """A count before and after calibration (``offset`` = calibrated - raw)."""

    raw: int
    count: int
    key: str
    learned: bool  # an earlier response with the same key contributed

    @property
    def offset(self) -> int:
        return self.count - self.raw


class CountCalibration:
    """Per-key offsets (and per-model ratios for estimated tokenizers), learned from reported usage."""

    def __init__(self, counter: PromptCounter, *, max_entries: int = 10_000) -> None:
        self.counter = counter
        self.max_entries = max(0, max_entries)
        self._offsets: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._ratios: dict[str, float] = {}
        self._lock = threading.Lock()
        self._digests = FixedDigests()

    def __len__(self) -> int:
        return len(self._offsets)

    def apply(self, tenant: str, prompt: Prompt, tokenized: TokenizedPrompt) -> Calibrated:
        key = self._digests.of(prompt)
        with self._lock:
            offset = self._offsets.get((tenant, key))
            if offset is not None:
                self._offsets.move_to_end((tenant, key))
        raw = tokenized.count
        return Calibrated(raw, max(0, raw + (offset or 0)), key, offset is not None)

    def observe(
        self, tenant: str, prompt: Prompt, tokenized: TokenizedPrompt, reported: int, exact: bool
    ) -> None:
        """Learn from the input tokens the provider reported for a request counted as ``tokenized``."""
        if reported <= 0:
            return
        stream = len(tokenized.tokens) + tokenized.hidden
        count = tokenized.count
        if not exact:
            count = provider_count(stream, self._learn_ratio(prompt.model, tokenized, stream, reported))
        offset = reported - count
        if abs(offset) > MAX_OFFSET_SHARE * reported or self.max_entries == 0:
            return
        key = (tenant, self._digests.of(prompt))
        with self._lock:
            self._offsets[key] = offset
            self._offsets.move_to_end(key)
            while len(self._offsets) > self.max_entries:
                self._offsets.popitem(last=False)

    def _learn_ratio(self, model: str, tokenized: TokenizedPrompt, stream: int, reported: int) -> float:
        """The model's ratio after this observation (installed in the counter for later requests)."""
        with self._lock:
            ratio = self._ratios.get(model, tokenized.ratio)
            observed = reported / stream if stream else ratio
            if (
                stream < RATIO_MIN_TOKENS
                or not RATIO_BOUNDS[0] <= observed <= RATIO_BOUNDS[1]
                or provider_count(stream, ratio) == reported
            ):
                # Too small to learn from, implausible, or already explained to the token (moving
                # towards a rounded observation would only drift).
                return ratio
            ratio += RATIO_WEIGHT * (observed - ratio)
            self._ratios[model] = ratio
        self.counter.set_ratio(model, ratio)
        return ratio
