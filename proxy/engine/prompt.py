"""The request model every surface works on: a Prompt of ordered segments in the provider's cache order.

A segment is one unit the provider hashes into its prefix: a tool definition, a system block, a
message or a content block. Its ``text`` is what it contributes to the rendered prompt, its
``digest`` the content hash that memoises tokenization and spots changes. Breakpoints
(``cache_control``) are metadata: they never enter ``text`` or ``digest``.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import dataclass, field, replace
from typing import Literal

Provider = Literal["openai-chat", "openai-responses", "anthropic"]
PROVIDERS: tuple[Provider, ...] = ("openai-chat", "openai-responses", "anthropic")

SegmentKind = Literal[
    "tool",  # one tool / function definition
    "schema",  # structured-output schema (OpenAI response_format / text.format)
    "system",  # system or developer instructions (top-level or a system-role message)
    "message",  # a whole message whose content is one string
    "text",  # a text content block / part of a message
    "image",  # an image block; tokens fixed by the adapter (``fixed_tokens``)
    "document",  # a document / file block
    "tool_use",  # a tool call (OpenAI tool_calls[i], Anthropic tool_use)
    "tool_result",  # a tool result (OpenAI role=tool, Anthropic tool_result)
    "thinking",  # an Anthropic thinking / redacted_thinking block, an OpenAI reasoning item
    "other",  # anything else the provider renders into the prompt
]

CacheTTL = Literal["5m", "1h"]


def digest_text(text: str) -> str:
    """Content hash of a segment's text (16 hex chars of blake2b: collisions are not a concern here)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(frozen=True, slots=True)
class CacheControl:
    """An Anthropic cache breakpoint (``{"type": "ephemeral", "ttl": "5m"|"1h"}``)."""

    ttl: CacheTTL = "5m"


@dataclass(frozen=True, slots=True)
class Segment:
    """One unit of the prompt, in cache order.

    ``path`` is stable across requests of one conversation (``tools[2]``, ``system[0]``,
    ``messages[5].content[1]``); ``message_index`` is the index in ``messages`` / ``input`` or
    None for tools, schemas and top-level system text; ``role`` the message role where there is one.
    """

    path: str
    kind: SegmentKind
    text: str
    role: str | None = None
    message_index: int | None = None
    cache_control: CacheControl | None = None
    # Tokens the provider charges that do not come from ``text`` (images, documents by reference).
    fixed_tokens: int = 0
    # The name of a tool or function, for tool segments and tool calls (attribution of tools-changed).
    name: str | None = None
    # A Responses input item's own ``id`` (``fc_…``: an output item sent back as it was returned). It
    # changes what the provider counts for a function call (framing.Framing.call_without_id).
    item_id: str | None = None
    digest: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", digest_text(f"{self.kind}\x00{self.role}\x00{self.text}"))

    @property
    def data(self) -> bytes:
        """The bytes this segment contributes to the rendered prompt."""
        return self.text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class Basis:
    """The earlier prompt of a conversation a prompt was read from, and how many leading segments the
    two share (``parse_request(resume=…)``): tokenizing the new one starts where they part.

    A weak reference: a chain of prompts each holding its predecessor would hold the whole history.
    """

    prompt: weakref.ReferenceType[Prompt]
    shared: int


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Prompt:
    """A request body read into segments, plus what else decides whether the cache matches.

    ``params`` holds the cache-affecting parameters that are not content (Anthropic ``tool_choice``
    and ``thinking``, OpenAI ``reasoning.effort``, ...); ``fingerprint`` hashes them with the model,
    so two prompts can share cache entries only when their fingerprints are equal.
    """

    provider: Provider
    model: str
    segments: tuple[Segment, ...]
    params: tuple[tuple[str, str], ...] = ()
    # Anthropic top-level ``cache_control`` (automatic caching: the breakpoint follows the last block).
    auto_cache: CacheControl | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    stream: bool = False
    # OpenAI: the function a ``tool_choice`` forces. The reply is then primed with a call to it, after
    # the prompt (so it counts, but it neither scopes nor breaks the cache, unlike ``params``).
    forced_function: str | None = None
    # OpenAI Chat Completions ``tool_choice: "none"`` (legacy ``function_call: "none"``): the reply
    # priming is one token longer where a forced call primes it too (after the prompt, like
    # ``forced_function``): hmarr/openai-chat-tokens' API-measured legacy case (32 against 31 with
    # "auto"), and each of the 3 dev requests with tool_choice "none" (ldp: gpt-4o, gpt-4o-2024-11-20,
    # gpt-4o-mini) was one under without it.
    calls_declined: bool = False
    fingerprint: str = field(default="", compare=False)
    basis: Basis | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.fingerprint:
            flat = "\x00".join(f"{k}={v}" for k, v in self.params)
            object.__setattr__(self, "fingerprint", digest_text(f"{self.provider}\x00{self.model}\x00{flat}"))

    @property
    def breakpoints(self) -> tuple[int, ...]:
        """Indexes of segments that carry an explicit ``cache_control``."""
        return tuple(i for i, s in enumerate(self.segments) if s.cache_control is not None)

    def param(self, name: str) -> str | None:
        return dict(self.params).get(name)

    def param_object(self, name: str) -> dict[str, object] | None:
        """A parameter the adapters kept as canonical JSON (e.g. ``prompt_cache_options``), parsed."""
        raw = self.param(name)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def with_model(self, model: str) -> Prompt:
        """The same prompt sent to another model (``--model``, a named upstream); fingerprint recomputed."""
        return replace(self, model=model, fingerprint="")
