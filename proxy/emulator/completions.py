"""Deterministic completions: the same prompt always gets the same answer.

The text is a run of words drawn from a hash of the prompt; one word (with its leading space) is one
output token. Tool calls are made when tools are offered and either ``tool_choice`` forces one or
the last message is a user message asking for them ("use the tool", "call <name>", "use <name>",
"call <a> and <b>": one call per tool named, in the order named, unless parallel calls are turned
off). A tool result as the last message always gets a text answer, so agent loops end.

A request for structured output (``structured``) gets a JSON value of its schema as the text, in
pieces of a few characters (one output token each). Anthropic ``thinking`` (enabled or adaptive)
adds a thinking block before the answer, with a signature.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.prompt import Provider

from .structured import answer_schema, example_value

_WORDS = [
    "the",
    "cache",
    "keeps",
    "every",
    "prefix",
    "it",
    "has",
    "seen",
    "warm",
    "for",
    "a",
    "while",
    "so",
    "the",
    "next",
    "request",
    "that",
    "starts",
    "the",
    "same",
    "way",
    "pays",
    "less",
    "and",
    "answers",
    "sooner",
    "while",
    "a",
    "changed",
    "byte",
    "early",
    "on",
    "makes",
    "all",
    "that",
    "follows",
    "new",
    "work",
    "for",
    "the",
    "model",
    "and",
    "the",
    "bill",
    "grows",
    "quietly",
    "until",
    "someone",
    "looks",
    "at",
    "the",
    "numbers",
    "and",
    "asks",
    "why",
]
_ARGUMENT_PIECE = 8  # characters of tool-call arguments per streamed delta (one output token each)


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str  # toolu_… / call_… suffix, deterministic
    name: str
    arguments: str  # JSON text

    def pieces(self) -> list[str]:
        """The arguments cut into stream deltas."""
        text = self.arguments
        return [text[i : i + _ARGUMENT_PIECE] for i in range(0, len(text), _ARGUMENT_PIECE)] or [""]


@dataclass(frozen=True, slots=True)
class Completion:
    pieces: tuple[str, ...]  # text deltas, one output token each
    tool_calls: tuple[ToolCall, ...]
    truncated: bool  # stopped by the output-token limit
    thinking: tuple[str, ...] = ()  # thinking deltas (Anthropic), one output token each
    signature: str = ""  # of the thinking block

    @property
    def tool_call(self) -> ToolCall | None:
        """The first tool call (most answers make at most one)."""
        return self.tool_calls[0] if self.tool_calls else None

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def thinking_text(self) -> str:
        return "".join(self.thinking)

    @property
    def output_tokens(self) -> int:
        # Each call: its name plus the argument deltas.
        calls = sum(1 + len(call.pieces()) for call in self.tool_calls)
        return len(self.thinking) + len(self.pieces) + calls


def _hash_stream(seed: str) -> Iterator[int]:
    counter = 0
    while True:
        yield from hashlib.blake2b(f"{seed}\x00{counter}".encode(), digest_size=64).digest()
        counter += 1


def words_for(seed: str, limit: int | None) -> tuple[tuple[str, ...], bool]:
    """8-32 words chosen by the seed, cut at ``limit``; returns (pieces, truncated)."""
    stream = _hash_stream(seed)
    n = 8 + next(stream) % 25
    words = [_WORDS[(next(stream) << 8 | next(stream)) % len(_WORDS)] for _ in range(n)]
    pieces = [words[0].capitalize()] + [f" {w}" for w in words[1:]]
    pieces[-1] += "."
    if limit is not None and limit < len(pieces):
        return tuple(pieces[: max(limit, 0)]), True
    return tuple(pieces), False


def output_limit(provider: Provider, body: Mapping[str, Any]) -> int | None:
    keys = {
        "openai-chat": ("max_completion_tokens", "max_tokens"),
        "openai-responses": ("max_output_tokens",),
        "anthropic": ("max_tokens",),
    }[provider]
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def offered_tools(provider: Provider, body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, JSON schema of the arguments) of each client-side function tool."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, Mapping):
            continue
        if provider == "openai-chat":
            fn = tool.get("function")
            spec, key = (fn, "parameters") if isinstance(fn, Mapping) else (None, "")
        elif provider == "openai-responses":
            spec, key = (tool, "parameters") if tool.get("type") == "function" else (None, "")
        else:
            spec, key = (tool, "input_schema") if "input_schema" in tool else (None, "")
        if spec is not None and isinstance(spec.get("name"), str):
            schema = spec.get(key)
            out.append((spec["name"], schema if isinstance(schema, Mapping) else {}))
    return out


def _texts(content: Any, kinds: tuple[str, ...]) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = [b for b in content if isinstance(b, Mapping)]
    if any(str(b.get("type", "")).endswith("tool_result") for b in parts):
        return None
    return "\n".join(str(b.get("text", "")) for b in parts if b.get("type") in kinds)


def last_user_text(provider: Provider, body: Mapping[str, Any]) -> str | None:
    """Text of the final message when it is a user message (None after a tool result)."""
    if provider == "openai-responses":
        items = body.get("input")
        if isinstance(items, str):
            return items
        last = items[-1] if isinstance(items, list) and items else None
        if (
            not isinstance(last, Mapping)
            or last.get("type", "message") != "message"
            or last.get("role") != "user"
        ):
            return None
        return _texts(last.get("content"), ("input_text", "text"))
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return None
    return _texts(last.get("content"), ("text",))


def _forced_tool(provider: Provider, choice: Any) -> tuple[bool, str | None]:
    """(a call is required, the tool it must be) from ``tool_choice``."""
    if choice in ("required", "any"):
        return True, None
    if not isinstance(choice, Mapping):
        return False, None
    kind = choice.get("type")
    if kind == "any":
        return True, None
    if kind == "tool" or (kind == "function" and provider == "openai-responses"):
        name = choice.get("name")
        return True, name if isinstance(name, str) else None
    if kind == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        return True, name if isinstance(name, str) else None
    return False, None


_VERB = r"\b(?:call|use|run|invoke)\s+(?:the\s+)?"
# Between two names of one request: "a and b", "a, b", "a, then b", "a and then the b".
_JOIN = (
    r"`?\s*(?:,\s*(?:and\s+)?(?:then\s+)?|\s+and\s+(?:then\s+)?|\s+then\s+)(?:the\s+)?(?:call\s+|use\s+)?`?"
)


def _asked_tools(text: str, names: list[str]) -> list[str]:
    """The tools a user message asks for, in the order it names them (each once)."""
    lowered = text.lower()
    alternatives = "|".join(re.escape(n.lower()) for n in sorted(names, key=len, reverse=True))
    by_lower = {n.lower(): n for n in names}
    name = rf"`?({alternatives})\b"
    asked: list[str] = []
    for match in re.finditer(rf"{_VERB}{name}((?:{_JOIN}(?:{alternatives})\b)*)", lowered):
        for found in re.findall(rf"(?<![\w])({alternatives})\b", match.group(0)):
            if by_lower[found] not in asked:
                asked.append(by_lower[found])
    if not asked and re.search(r"\buse\s+(the|a)\s+tools?\b", lowered):
        return names[:1]
    return asked


def _parallel(provider: Provider, body: Mapping[str, Any]) -> bool:
    """Whether the request allows several tool calls in one answer (the default everywhere)."""
    if provider == "anthropic":
        choice = body.get("tool_choice")
        return not (isinstance(choice, Mapping) and choice.get("disable_parallel_tool_use") is True)
    return body.get("parallel_tool_calls") is not False


def _thinking(provider: Provider, body: Mapping[str, Any]) -> bool:
    thinking = body.get("thinking")
    return (
        provider == "anthropic"
        and isinstance(thinking, Mapping)
        and thinking.get("type") in ("enabled", "adaptive")
    )


def _json_pieces(value: Any) -> tuple[str, ...]:
    text = json.dumps(value, ensure_ascii=False)
    return tuple(text[i : i + _ARGUMENT_PIECE] for i in range(0, len(text), _ARGUMENT_PIECE)) or ("",)


def _chosen_tools(provider: Provider, body: Mapping[str, Any], tools: list[str]) -> list[str]:
    choice = body.get("tool_choice")
    if not tools or choice == "none" or (isinstance(choice, Mapping) and choice.get("type") == "none"):
        return []
    required, forced = _forced_tool(provider, choice)
    ask = last_user_text(provider, body)
    asked = _asked_tools(ask, tools) if ask is not None else []
    if forced in tools:
        chosen = [forced]
    elif asked:
        chosen = asked
    elif required:
        chosen = tools[:1]
    else:
        chosen = []
    return chosen if _parallel(provider, body) else chosen[:1]


def complete(provider: Provider, body: Mapping[str, Any], seed: str) -> Completion:
    """The answer to a request: ``seed`` identifies the prompt (equal prompts, equal answers)."""
    limit = output_limit(provider, body)
    if limit is not None and limit <= 0:
        # Anthropic max_tokens 0: pre-warm the cache, generate nothing.
        return Completion((), (), True)
    thinking: tuple[str, ...] = ()
    signature = ""
    if _thinking(provider, body):
        thinking, _ = words_for(f"{seed}\x00thinking", None)
        signature = base64.b64encode(
            hashlib.blake2b(f"{seed}\x00sig".encode(), digest_size=48).digest()
        ).decode()
    tools = offered_tools(provider, body)
    chosen = _chosen_tools(provider, body, [n for n, _ in tools])
    if chosen:
        schemas = dict(tools)
        calls = []
        for k, name in enumerate(chosen):
            arguments = json.dumps(example_value(schemas[name], name), separators=(",", ":"))
            call_id = hashlib.blake2b(f"{seed}\x00{name}\x00{k}".encode(), digest_size=12).hexdigest()
            calls.append(ToolCall(call_id, name, arguments))
        return Completion((), tuple(calls), False, thinking, signature)
    schema = answer_schema(provider, body)
    if schema is not None:
        # Structured output is never cut short here: a truncated JSON value fails every parser.
        return Completion(_json_pieces(example_value(schema, "value")), (), False, thinking, signature)
    pieces, truncated = words_for(seed, limit)
    return Completion(pieces, (), truncated, thinking, signature)
