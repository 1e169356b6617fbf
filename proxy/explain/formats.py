"""Request formats of one provider: prompts from two OpenAI endpoints compared on what they say.

Chat Completions and Responses bodies of one conversation read into different segments (a system
message and ``instructions``, a string message and an ``input_text`` block, tools wrapped in
``function`` or not), so their raw-JSON digests never agree although they say the same thing, and
the engine's scope (tenant, provider family, model) holds them together: the reference
(provider-caching §1) names no separate cache per endpoint; the cache matches the rendered prefix.

So a cross-endpoint pair is compared in two steps:

- ``comparable``: each segment's digest becomes a format-neutral one (the tool definition without
  its wrapper, a system message and ``instructions`` alike, a string message and a text block
  alike), so only a real difference in content is reported as a change (a tool edited, a turn
  rewritten);
- ``rendering_divergence``: where the two token streams part although the content is the same. The
  counting model renders some parts per endpoint (the tools section and tool calls are framed
  differently, measured against reported counts), and a cache that matches rendered tokens stops
  there: that one difference is the reason (``content-changed``), and nothing else is.

Same-format pairs are left untouched (their raw digests also see serialisation changes that render
alike, such as key order, which the reasons must keep reporting).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass, replace

from cachewarden.proxy.engine.cache_model import TokenStream
from cachewarden.proxy.engine.prompt import Prompt, Segment, digest_text

from .textdiff import common_prefix

_ENDPOINT = {"openai-chat": "Chat Completions", "openai-responses": "Responses"}


def family(prompt: Prompt) -> str:
    """The provider whose cache serves the prompt (the request format aside)."""
    return "anthropic" if prompt.provider == "anthropic" else "openai"


def cross_format(previous: Prompt, next: Prompt) -> bool:
    """Two request formats of one provider family (OpenAI Chat and Responses)."""
    return previous.provider != next.provider and family(previous) == family(next)


def _tool_text(text: str) -> str:
    """A tool definition without the Chat wrapper (``{"type": "function", "function": {...}}``)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        value = value["function"]
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "type"}
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _neutral(seg: Segment) -> Segment:
    kind = "text" if seg.kind == "message" else seg.kind
    role = "system" if seg.kind == "system" else seg.role
    text = _tool_text(seg.text) if seg.kind == "tool" else seg.text
    digest = digest_text(f"{kind}\x00{role}\x00{text}\x00{seg.fixed_tokens}")
    return replace(seg, digest=digest)


def comparable(
    previous: Prompt, previous_tp: TokenStream, next: Prompt, next_tp: TokenStream
) -> tuple[Prompt, Prompt]:
    """Both prompts as attribution compares them: format-neutral digests across two request formats
    of one provider family, the prompts themselves otherwise."""
    if not cross_format(previous, next):
        return previous, next

    def neutral(prompt: Prompt) -> Prompt:
        return replace(prompt, segments=tuple(_neutral(s) for s in prompt.segments))

    return neutral(previous), neutral(next)


@dataclass(frozen=True, slots=True)
class RenderingDivergence:
    position: int  # previous-stream position where the two streams part
    index: int  # the previous prompt's segment holding it
    detail: str


def rendering_divergence(
    previous: Prompt, previous_tp: TokenStream, next: Prompt, next_tp: TokenStream
) -> RenderingDivergence | None:
    """Where two endpoints' renderings of one conversation part (None: same format, or no parting
    before the shorter prompt's last segment ends)."""
    if not cross_format(previous, next) or not previous_tp.spans or not next_tp.spans:
        return None
    # The reply priming after the last segment is not prompt content: compare up to it.
    limit = min(previous_tp.spans[-1][1], next_tp.spans[-1][1])
    a, b = previous_tp.tokens, next_tp.tokens
    at = common_prefix(a[:limit], b[:limit])
    if at >= limit:
        return None
    starts = [s for s, _ in previous_tp.spans]
    index = max(0, bisect_right(starts, at) - 1)
    where = previous.segments[index].path if index < len(previous.segments) else "the end"
    detail = (
        f"{_ENDPOINT.get(previous.provider, previous.provider)} and "
        f"{_ENDPOINT.get(next.provider, next.provider)} render the same content differently from "
        f"{where} on ({previous.segments[index].kind} framing): the cache matches rendered tokens, so "
        "switching endpoints mid-conversation re-reads everything after it"
    )
    return RenderingDivergence(at, index, detail)
