"""Response bodies and usage objects in each provider's wire shape (non-streamed; the stream reuses them).

Usage quirks, as the providers report them:
- OpenAI counts cached tokens INSIDE the prompt count: ``prompt_tokens`` / ``input_tokens`` is the
  whole prompt, ``*_tokens_details.cached_tokens`` the part read from cache. GPT-5.6+ models
  (breakpoint caching) also report ``cache_write_tokens`` there.
- Anthropic splits the prompt: ``input_tokens`` is only what was neither read nor written,
  ``cache_read_input_tokens`` + ``cache_creation_input_tokens`` the rest, with the writes split by TTL
  in ``cache_creation``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.prompt import Provider

from .cache import ReferenceUsage
from .completions import Completion, ToolCall

JSON = dict[str, Any]


def new_id(prefix: str, length: int = 24) -> str:
    return prefix + uuid.uuid4().hex[:length]


@dataclass(frozen=True, slots=True)
class Turn:
    """Everything one response (streamed or not) is built from."""

    provider: Provider
    model: str
    response_id: str
    created: int
    completion: Completion
    usage: ReferenceUsage
    report_writes: bool  # OpenAI breakpoint-caching models report cache_write_tokens
    body: Mapping[str, Any]  # the request, for the fields a Responses object echoes
    item_id: str = ""  # the Responses message item (function calls carry ids of their own)
    # Chat Completions ``n``: every choice, the first being ``completion``; empty means just it.
    choices: tuple[Completion, ...] = ()
    # Anthropic cache diagnostics: empty when not requested, else the one value to report (None: null).
    diagnostics: tuple[Any, ...] = ()

    @property
    def call_id(self) -> str:
        tool = self.completion.tool_call
        return "" if tool is None else tool.call_id

    @property
    def all_choices(self) -> tuple[Completion, ...]:
        return self.choices or (self.completion,)

    @property
    def output_tokens(self) -> int:
        """All choices' output (OpenAI bills every choice)."""
        return sum(c.output_tokens for c in self.all_choices)


# -- OpenAI Chat Completions ----------------------------------------------------------------------


def chat_usage(turn: Turn) -> JSON:
    u, out = turn.usage, turn.output_tokens
    details: JSON = {"cached_tokens": u.cached, "audio_tokens": 0}
    if turn.report_writes:
        details["cache_write_tokens"] = u.writes
    return {
        "prompt_tokens": u.total,
        "completion_tokens": out,
        "total_tokens": u.total + out,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_finish_reason(completion: Completion) -> str:
    if completion.tool_calls:
        return "tool_calls"
    return "length" if completion.truncated else "stop"


def chat_tool_calls(completion: Completion) -> list[JSON]:
    return [
        {
            "id": f"call_{tool.call_id}",
            "type": "function",
            "function": {"name": tool.name, "arguments": tool.arguments},
        }
        for tool in completion.tool_calls
    ]


def _chat_choice(index: int, completion: Completion) -> JSON:
    calls = chat_tool_calls(completion)
    message: JSON = {
        "role": "assistant",
        "content": None if calls else completion.text,
        "refusal": None,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "index": index,
        "message": message,
        "logprobs": None,
        "finish_reason": chat_finish_reason(completion),
    }


def chat_completion(turn: Turn) -> JSON:
    return {
        "id": turn.response_id,
        "object": "chat.completion",
        "created": turn.created,
        "model": turn.model,
        "choices": [_chat_choice(k, c) for k, c in enumerate(turn.all_choices)],
        "usage": chat_usage(turn),
        "service_tier": "default",
        "system_fingerprint": "fp_emulator",
    }


# -- OpenAI Responses -------------------------------------------------------------------------------


def responses_usage(turn: Turn) -> JSON:
    u, out = turn.usage, turn.completion.output_tokens
    details: JSON = {"cached_tokens": u.cached}
    if turn.report_writes:
        details["cache_write_tokens"] = u.writes
    return {
        "input_tokens": u.total,
        "input_tokens_details": details,
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total + out,
    }


def output_text_part(text: str) -> JSON:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_call_id(tool: ToolCall) -> str:
    return f"fc_{tool.call_id}"


def response_items(turn: Turn, status: str = "completed", *, empty: bool = False) -> list[JSON]:
    """The output items: one function call per tool call, or an assistant message (``empty``: as
    first announced, before the deltas)."""
    calls = turn.completion.tool_calls
    if calls:
        return [
            {
                "type": "function_call",
                "id": function_call_id(tool),
                "call_id": f"call_{tool.call_id}",
                "name": tool.name,
                "arguments": "" if empty else tool.arguments,
                "status": status,
            }
            for tool in calls
        ]
    content = [] if empty else [output_text_part(turn.completion.text)]
    return [
        {"type": "message", "id": turn.item_id, "status": status, "role": "assistant", "content": content}
    ]


def response_status(turn: Turn) -> str:
    return "incomplete" if turn.completion.truncated else "completed"


def response_object(turn: Turn, *, final: bool = True) -> JSON:
    """A Responses ``response`` object: final (output + usage) or as announced by response.created."""
    body = turn.body
    status = response_status(turn) if final else "in_progress"
    text_config = body.get("text") if isinstance(body.get("text"), Mapping) else {"format": {"type": "text"}}
    return {
        "id": turn.response_id,
        "object": "response",
        "created_at": turn.created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if final and status == "incomplete" else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": turn.model,
        "output": response_items(turn, response_status(turn)) if final else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": text_config,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": responses_usage(turn) if final else None,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


# -- Anthropic Messages -----------------------------------------------------------------------------


def anthropic_usage(turn: Turn, output_tokens: int | None = None) -> JSON:
    u = turn.usage
    return {
        "input_tokens": u.uncached,
        "cache_creation_input_tokens": u.writes,
        "cache_read_input_tokens": u.cached,
        "cache_creation": {"ephemeral_5m_input_tokens": u.write_5m, "ephemeral_1h_input_tokens": u.write_1h},
        "output_tokens": turn.completion.output_tokens if output_tokens is None else output_tokens,
        "service_tier": "standard",
    }


def anthropic_stop_reason(completion: Completion) -> str:
    if completion.tool_calls:
        return "tool_use"
    return "max_tokens" if completion.truncated else "end_turn"


def anthropic_blocks(turn: Turn) -> list[JSON]:
    """Content blocks: thinking (when asked for), then the text or one tool_use per call."""
    completion = turn.completion
    blocks: list[JSON] = []
    if completion.thinking:
        blocks.append(
            {"type": "thinking", "thinking": completion.thinking_text, "signature": completion.signature}
        )
    if completion.pieces:
        blocks.append({"type": "text", "text": completion.text})
    blocks += [
        {
            "type": "tool_use",
            "id": f"toolu_{tool.call_id}",
            "name": tool.name,
            "input": json.loads(tool.arguments),
        }
        for tool in completion.tool_calls
    ]
    return blocks


def anthropic_message(turn: Turn, *, final: bool = True) -> JSON:
    """A Messages response, or (``final=False``) the skeleton that message_start carries."""
    return {
        "id": turn.response_id,
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": anthropic_blocks(turn) if final else [],
        "stop_reason": anthropic_stop_reason(turn.completion) if final else None,
        "stop_sequence": None,
        "usage": anthropic_usage(turn, None if final else min(1, turn.completion.output_tokens)),
        # Diagnostics ride on the message (so also on message_start when streamed), when asked for.
        **({"diagnostics": turn.diagnostics[0]} if turn.diagnostics else {}),
    }
