"""A Prompt's token stream with the provider's framing, memoised per segment; the count the provider reports.

The stream is what the prefix index matches on: per segment, framing tokens (message start / role /
separators, small negative pseudo-tokens) followed by the segment's content tokens. Content tokens are
the expensive part and are memoised by (tokenizer, rendering, segment digest) in a bounded LRU, so a
request that repeats most of an earlier one only tokenizes its new segments.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .models import ModelTable
from .prompt import Prompt, Segment
from .tokenizers import Tokenizer, get_tokenizer

# Pseudo-tokens for framing. Negative so they never equal a real token id; images use values below
# _IMAGE_BASE so that a framing marker never equals an image token either.
START, SEP, END, PAD = -1, -2, -3, -4
_IMAGE_BASE = 1 << 20


@dataclass(frozen=True, slots=True)
class Framing:
    """Tokens a provider adds around the content, in tokenizer tokens (before ``ratio``)."""

    per_message: int  # per message / input item: start + separator + end (role tokens come on top)
    reply: int  # reply priming at the end of the prompt (<|im_start|>assistant<|im_sep|>)
    assistant_extra: int = 0  # extra per assistant message (harmony channel marker of gpt-5)
    tools_once: int = 0  # once when any tool is present (tools header / system message it lives in)
    per_tool: int = 0  # per tool definition, beyond its rendered text
    per_tool_call: int = 0  # per tool call in an assistant turn, beyond its name + arguments
    per_tool_result: int = 0  # per tool result, beyond its content
    per_name: int = 1  # a chat message's author ``name`` (cookbook: tokens_per_name = 1)
    schema_once: int = 0  # once for a structured-output schema, beyond its rendered text
    system_once: int = 0  # once when there is top-level system text (Anthropic)
    typescript_tools: bool = True  # OpenAI renders functions as a TypeScript namespace; Anthropic as JSON
    role_tokens: bool = True  # the role name is encoded in each message header (ChatML)


# Framing constants. Where each comes from:
# - openai-chat base: the classic formula of the openai-cookbook "How to count tokens with tiktoken"
#   (3 per message + role, +3 reply priming); recorded/README.md and our bench: exact for most
#   plain-text chat requests.
# - gpt-5*, o3, o4, gpt-4o-2024-11-20: report one token less (reply priming 2), recorded data;
#   gpt-5* also counts 2 more per assistant message and ~83 more when tools are present (harmony
#   system preamble), fitted on recorded data (bench/bench_counting.py).
# - tools: rendered as the TypeScript `namespace functions` the models were trained on (as in the
#   community reconstructions of the tool prompt); tools_once / per_tool_call / per_tool_result are
#   residuals fitted on recorded chat requests with tools.
# - anthropic: fitted on recorded Messages requests (self-contained, not suspect), o200k stream.
# Rules are (provider, model prefix); the longest matching prefix wins, "" is the provider default.
_CHAT = Framing(per_message=3, reply=3, tools_once=2, per_tool_call=7, per_tool_result=0, schema_once=8)
FRAMING: dict[tuple[str, str], Framing] = {
    ("openai-chat", ""): _CHAT,
    ("openai-chat", "gpt-5"): replace(_CHAT, reply=2, assistant_extra=2, tools_once=83),
    ("openai-chat", "o3"): replace(_CHAT, reply=2),
    ("openai-chat", "o4"): replace(_CHAT, reply=2),
    ("openai-chat", "gpt-4o-2024-11-20"): replace(_CHAT, reply=2),
    ("openai-responses", ""): _CHAT,
    ("openai-responses", "gpt-5"): replace(_CHAT, reply=2, assistant_extra=2, tools_once=83),
    ("openai-responses", "o3"): replace(_CHAT, reply=2),
    ("openai-responses", "o4"): replace(_CHAT, reply=2),
    # Least squares on 513 Anthropic requests (Claude 3.5 to 4.6, relative-error weighted), provider units
    # divided by the 1.2 ratio: tools_once 383 -> 319 (the documented tool-use system prompt is 346),
    # per tool 29 -> 24, per tool_use / tool_result 25 -> 21, per message 1.6 -> 1, constant 5.9 -> 5.
    ("anthropic", ""): Framing(
        per_message=1, reply=5, tools_once=319, per_tool=24, per_tool_call=21, per_tool_result=21,
        per_name=0, system_once=0, typescript_tools=False, role_tokens=False,
    ),
}  # fmt: skip


def framing_for(provider: str, model: str) -> Framing:
    name = model.lower()
    best: tuple[int, Framing] | None = None
    for (prov, prefix), framing in FRAMING.items():
        if prov == provider and name.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), framing)
    return best[1] if best is not None else _CHAT


@dataclass(frozen=True, slots=True)
class TokenizedPrompt:
    tokens: Sequence[int]  # the stream used for prefix matching (framing included)
    spans: tuple[tuple[int, int], ...]  # per Prompt.segments[i]: [start, end) in tokens
    tokenizer: str
    ratio: float  # provider tokens per stream token (1.0 when exact)
    count: int  # input tokens the provider would report for the whole request


def provider_count(stream_tokens: int, ratio: float) -> int:
    """Provider tokens for a stream length: exact when ratio is 1, else rounded to the nearest token."""
    return stream_tokens if ratio == 1.0 else round(stream_tokens * ratio)


def image_tokens(digest: str, n: int) -> list[int]:
    """``n`` pseudo-tokens for an image: equal images give equal tokens, different ones differ at once."""
    # Re-hash: digests are arbitrary strings, and a plain modulo would map some distinct ones together.
    base = int.from_bytes(hashlib.blake2b(digest.encode(), digest_size=6).digest(), "big")
    return [-(_IMAGE_BASE + (base + i) % (1 << 48)) for i in range(n)]


# ---------------------------------------------------------------------------------------------------
# Tool definitions → TypeScript-like text (OpenAI). Approximate: the exact template is not public.


def _ts_type(schema: Any, indent: int) -> str:
    if not isinstance(schema, Mapping):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(_ts_type(s, indent) for s in schema[key])
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(_ts_type({**schema, "type": k}, indent) for k in kind)
    if kind == "array":
        item = _ts_type(schema.get("items", {}), indent)
        return f"Array<{item}>" if " " in item or "\n" in item else f"{item}[]"
    if kind == "object":
        if not isinstance(schema.get("properties"), Mapping) or not schema["properties"]:
            return "object"
        return "{\n" + _ts_props(schema, indent + 1) + "\n" + "  " * indent + "}"
    if kind in ("integer", "number"):
        return "number"
    if kind in ("string", "boolean", "null"):
        return str(kind)
    return "any"


def _ts_props(schema: Mapping[str, Any], indent: int) -> str:
    required = set(schema.get("required") or [])
    pad = "  " * indent
    lines: list[str] = []
    for key, prop in schema["properties"].items():
        if isinstance(prop, Mapping) and prop.get("description"):
            lines.append(f"{pad}// {prop['description']}")
        default = ""
        if isinstance(prop, Mapping) and "default" in prop:
            default = f" // default: {json.dumps(prop['default'], ensure_ascii=False)}"
        optional = "" if key in required else "?"
        lines.append(f"{pad}{key}{optional}: {_ts_type(prop, indent)},{default}")
    return "\n".join(lines)


def render_function(fn: Mapping[str, Any]) -> str:
    """One function definition as OpenAI renders it into the system prompt (approximation)."""
    lines = [f"// {fn['description']}"] if fn.get("description") else []
    params = fn.get("parameters")
    name = fn.get("name", "")
    if isinstance(params, Mapping) and isinstance(params.get("properties"), Mapping) and params["properties"]:
        lines.append(f"type {name} = (_: {{\n{_ts_props(params, 0)}\n}}) => any;")
    else:
        lines.append(f"type {name} = () => any;")
    if isinstance(params, Mapping) and isinstance(params.get("$defs"), Mapping):
        lines.extend(f"type {k} = {_ts_type(v, 0)};" for k, v in params["$defs"].items())
    return "\n".join(lines)


def _function_of(text: str) -> Mapping[str, Any] | None:
    """The function definition in a tool segment's JSON (chat nests it under "function"), if any."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, Mapping) and isinstance(value.get("function"), Mapping):
        value = value["function"]
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        return value
    return None


_TOOLS_HEAD = "# Tools\n\n## functions\n\nnamespace functions {\n\n"
_TOOLS_TAIL = "} // namespace functions"


# ---------------------------------------------------------------------------------------------------


class _LRU:
    """A bounded, thread-safe map from segment key to its content tokens."""

    def __init__(self, entries: int) -> None:
        self._max = max(0, entries)
        self._data: OrderedDict[tuple[str, str, str], tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> tuple[int, ...] | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            return hit

    def put(self, key: tuple[str, str, str], value: tuple[int, ...]) -> None:
        if self._max == 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class PromptCounter:
    """Tokenizes Prompts with provider framing; memoises content tokens per segment."""

    def __init__(self, table: ModelTable, *, memo_entries: int = 50_000) -> None:
        self.table = table
        self.memo = _LRU(memo_entries)
        self._ratios: dict[str, float] = {}

    def set_ratio(self, model_family_or_model: str, ratio: float) -> None:
        """Override the provider-units ratio for a model or a model-name prefix (online calibration)."""
        if not ratio > 0:
            raise ValueError(f"ratio must be positive, got {ratio!r}")
        self._ratios[model_family_or_model.lower()] = float(ratio)

    def ratio_for(self, model: str, default: float) -> float:
        name = model.lower()
        keys = [k for k in self._ratios if name.startswith(k)]
        return self._ratios[max(keys, key=len)] if keys else default

    def _content(self, tok: Tokenizer, mode: str, seg: Segment, text: str) -> tuple[int, ...]:
        key = (tok.name, mode, seg.digest)
        hit = self.memo.get(key)
        if hit is None:
            hit = tuple(tok.encode(text))
            self.memo.put(key, hit)
        return hit

    def _role(self, tok: Tokenizer, role: str) -> tuple[int, ...]:
        return self._content_raw(tok, f"role\x00{role}", role)

    def _content_raw(self, tok: Tokenizer, key: str, text: str) -> tuple[int, ...]:
        full = (tok.name, "raw", key)
        hit = self.memo.get(full)
        if hit is None:
            hit = tuple(tok.encode(text))
            self.memo.put(full, hit)
        return hit

    def _segment_content(self, tok: Tokenizer, framing: Framing, seg: Segment) -> tuple[int, ...]:
        if seg.kind in ("image", "document") and seg.fixed_tokens and not seg.text:
            return tuple(image_tokens(seg.digest, seg.fixed_tokens))
        if seg.kind == "tool" and framing.typescript_tools:
            fn = _function_of(seg.text)
            if fn is not None:
                return self._content(tok, "ts", seg, render_function(fn) + "\n\n")
        content = self._content(tok, "text", seg, seg.text)
        if seg.fixed_tokens:
            return content + tuple(image_tokens(seg.digest, seg.fixed_tokens))
        return content

    def tokenize(self, prompt: Prompt) -> TokenizedPrompt:
        info = self.table.lookup(prompt.model, prompt.provider)
        tok = get_tokenizer(info.tokenizer)
        framing = framing_for(prompt.provider, prompt.model)
        ratio = self.ratio_for(prompt.model, info.ratio)
        segs = prompt.segments
        tokens: list[int] = []
        spans: list[tuple[int, int]] = []
        tool_idx = [i for i, s in enumerate(segs) if s.kind == "tool"]
        first_tool, last_tool = (tool_idx[0], tool_idx[-1]) if tool_idx else (-1, -1)
        seen_system = False
        for i, seg in enumerate(segs):
            start = len(tokens)
            group = seg.message_index
            opens = group is None or i == 0 or segs[i - 1].message_index != group
            closes = group is None or i == len(segs) - 1 or segs[i + 1].message_index != group
            if seg.kind == "tool":
                if i == first_tool:
                    tokens.extend([PAD] * framing.tools_once)
                    if framing.typescript_tools:
                        tokens.extend(self._content_raw(tok, "tools-head", _TOOLS_HEAD))
                tokens.extend([PAD] * framing.per_tool)
                tokens.extend(self._segment_content(tok, framing, seg))
                if i == last_tool and framing.typescript_tools:
                    tokens.extend(self._content_raw(tok, "tools-tail", _TOOLS_TAIL))
            elif seg.kind == "schema":
                tokens.extend([PAD] * framing.schema_once)
                tokens.extend(self._segment_content(tok, framing, seg))
            elif group is None:
                # Top-level system text (Anthropic system, Responses instructions): one message of its own
                # for OpenAI; for Anthropic a one-off overhead for the whole system prompt.
                if framing.typescript_tools:
                    tokens.extend((START, *self._role(tok, seg.role or "system"), SEP))
                elif not seen_system:
                    tokens.extend([PAD] * framing.system_once)
                seen_system = True
                tokens.extend(self._segment_content(tok, framing, seg))
                if framing.typescript_tools:
                    tokens.append(END)
            else:
                if opens:
                    role = seg.role or ("tool" if seg.kind == "tool_result" else "assistant")
                    tokens.append(START)
                    if framing.role_tokens:
                        tokens.extend(self._role(tok, role))
                    tokens.extend([SEP] * (framing.per_message - 2))
                    if role == "assistant":
                        tokens.extend([PAD] * framing.assistant_extra)
                if seg.kind == "tool_use":
                    # The adapter's text is "name\narguments": name and arguments are in the content.
                    tokens.extend([PAD] * framing.per_tool_call)
                elif seg.kind == "other" and seg.path.endswith(".name"):
                    tokens.extend([PAD] * framing.per_name)
                elif seg.kind == "tool_result":
                    tokens.extend([PAD] * framing.per_tool_result)
                tokens.extend(self._segment_content(tok, framing, seg))
                if closes and framing.per_message >= 2:
                    tokens.append(END)
            if i == len(segs) - 1:
                # Reply priming belongs to no segment; put it in the last span so spans cover the stream.
                tokens.extend(_reply(framing.reply))
            spans.append((start, len(tokens)))
        if not segs:
            tokens.extend(_reply(framing.reply))
        return TokenizedPrompt(
            tokens=tokens,
            spans=tuple(spans),
            tokenizer=tok.name,
            ratio=ratio,
            count=provider_count(len(tokens), ratio),
        )


def _reply(n: int) -> Iterable[int]:
    return (START, PAD, SEP)[:n] if n <= 3 else (START, *([PAD] * (n - 2)), SEP)
