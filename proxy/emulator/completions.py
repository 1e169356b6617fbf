"""Deterministic completions: the same prompt always gets the same answer.

The text is a run of words drawn from a hash of the prompt; one word (with its leading space) is one
output token. A tool call is made when tools are offered and either ``tool_choice`` forces one or
the last message is a user message asking for it ("use the tool", "call <name>", "use <name>").
A tool result as the last message always gets a text answer, so agent loops end.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.prompt import Provider

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
    tool_call: ToolCall | None
    truncated: bool  # stopped by the output-token limit

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def output_tokens(self) -> int:
        if self.tool_call is not None:
            # The name plus the argument deltas.
            return len(self.pieces) + 1 + len(self.tool_call.pieces())
        return len(self.pieces)


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


def _asked_tool(text: str, names: list[str]) -> str | None:
    lowered = text.lower()
    for name in sorted(names, key=len, reverse=True):
        if re.search(rf"\b(call|use|run|invoke)\s+(the\s+)?`?{re.escape(name.lower())}\b", lowered):
            return name
    if re.search(r"\buse\s+(the|a)\s+tools?\b", lowered):
        return names[0]
    return None


def example_value(schema: Any, name: str, depth: int = 0) -> Any:
    """A small value that fits a JSON schema (enum / const first, then by type)."""
    if not isinstance(schema, Mapping) or depth > 8:
        return name
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return example_value(options[0], name, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or isinstance(schema.get("properties"), Mapping):
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        return {k: example_value(v, k, depth + 1) for k, v in props.items()}
    if kind == "array":
        return [example_value(schema.get("items"), name, depth + 1)]
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return f"example {name}"


def complete(provider: Provider, body: Mapping[str, Any], seed: str) -> Completion:
    """The answer to a request: ``seed`` identifies the prompt (equal prompts, equal answers)."""
    limit = output_limit(provider, body)
    if limit is not None and limit <= 0:
        # Anthropic max_tokens 0: pre-warm the cache, generate nothing.
        return Completion((), None, True)
    tools = offered_tools(provider, body)
    ask = last_user_text(provider, body)
    choice = body.get("tool_choice")
    chosen: str | None = None
    if tools and choice != "none" and not (isinstance(choice, Mapping) and choice.get("type") == "none"):
        required, forced = _forced_tool(provider, choice)
        names = [n for n, _ in tools]
        asked = _asked_tool(ask, names) if ask is not None else None
        if forced in names:
            chosen = forced
        elif asked is not None:
            chosen = asked
        elif required:
            chosen = names[0]
    if chosen is not None:
        schema = dict(tools)[chosen]
        arguments = json.dumps(example_value(schema, chosen), separators=(",", ":"))
        call_id = hashlib.blake2b(f"{seed}\x00{chosen}".encode(), digest_size=12).hexdigest()
        return Completion((), ToolCall(call_id, chosen, arguments), False)
    pieces, truncated = words_for(seed, limit)
    return Completion(pieces, None, truncated)
