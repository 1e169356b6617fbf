"""Request formats of one provider: prompts from two OpenAI endpoints compared on what they render.

Chat Completions and Responses bodies of one conversation read into different segments (a system
message and ``instructions``, a string message and an ``input_text`` block, tools wrapped in
``function`` or not), so their raw-JSON digests never agree, although the provider renders the same
prompt from both and the engine's scope (tenant, provider family, model) holds them together. The
reference (provider-caching §1) names no separate cache per endpoint: the cache matches the
rendered token prefix. So a cross-endpoint pair is compared on rendered content: each segment's
digest becomes the hash of the tokens it renders to, and only a real difference in those tokens is
reported. Same-format pairs are left untouched (their raw digests also see serialisation changes
that render alike, such as key order, which the reasons must keep reporting).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from cachewarden.proxy.engine.cache_model import TokenStream
from cachewarden.proxy.engine.prompt import Prompt


def family(prompt: Prompt) -> str:
    """The provider whose cache serves the prompt (the request format aside)."""
    return "anthropic" if prompt.provider == "anthropic" else "openai"


def _rendered(prompt: Prompt, tp: TokenStream) -> Prompt:
    tokens, spans = tp.tokens, tp.spans
    segments = []
    for i, seg in enumerate(prompt.segments):
        if i >= len(spans):
            segments.append(seg)
            continue
        s, e = spans[i]
        raw = ",".join(map(str, tokens[s:e])).encode()
        digest = hashlib.blake2b(raw + b"\x00%d" % seg.fixed_tokens, digest_size=8).hexdigest()
        segments.append(replace(seg, digest=digest))
    return replace(prompt, segments=tuple(segments))


def comparable(
    previous: Prompt, previous_tp: TokenStream, next: Prompt, next_tp: TokenStream
) -> tuple[Prompt, Prompt]:
    """Both prompts as attribution compares them: rendered digests across two request formats of
    one provider family, the prompts themselves otherwise."""
    if previous.provider == next.provider or family(previous) != family(next):
        return previous, next
    return _rendered(previous, previous_tp), _rendered(next, next_tp)
