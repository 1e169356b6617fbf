"""Server-sent event streams in each provider's framing.

- OpenAI Chat: ``data: {chunk}`` lines only, a final ``data: [DONE]``; the usage chunk (empty
  ``choices``) only when ``stream_options.include_usage`` is set, and then every other chunk
  carries ``"usage": null``.
- OpenAI Responses: ``event: <type>`` + ``data:`` with a ``sequence_number``; usage on the terminal
  ``response.completed`` (or ``response.incomplete``); no ``[DONE]``.
- Anthropic: ``event: <type>`` + ``data:``; ``message_start`` carries the input and cache usage,
  ``message_delta`` the final usage, cumulative (input and cache fields repeated, not deltas).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .bodies import (
    Turn,
    anthropic_message,
    anthropic_stop_reason,
    anthropic_usage,
    chat_finish_reason,
    chat_usage,
    function_call_id,
    output_text_part,
    response_items,
    response_object,
    response_status,
)
from .completions import Completion


@dataclass(frozen=True, slots=True)
class Event:
    data: Any  # a JSON value, or the literal string "[DONE]"
    name: str | None = None  # the ``event:`` line, if the provider sends one
    tokens: int = 0  # output tokens this event carries (paces the latency model)

    def encode(self) -> bytes:
        data = self.data if isinstance(self.data, str) else json.dumps(self.data, separators=(",", ":"))
        head = f"event: {self.name}\n" if self.name else ""
        return f"{head}data: {data}\n\n".encode()


# -- OpenAI Chat Completions ----------------------------------------------------------------------


def chat_events(turn: Turn, include_usage: bool) -> list[Event]:
    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": turn.response_id,
            "object": "chat.completion.chunk",
            "created": turn.created,
            "model": turn.model,
            "service_tier": "default",
            "system_fingerprint": "fp_emulator",
            "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            out["usage"] = None
        return out

    events: list[Event] = []
    # With ``n`` > 1 the choices follow one another, each chunk naming its choice's index.
    for index, completion in enumerate(turn.all_choices):
        first = None if completion.tool_calls else ""
        events.append(Event(chunk(index, {"role": "assistant", "content": first, "refusal": None})))
        for k, tool in enumerate(completion.tool_calls):
            head = {
                "index": k,
                "id": f"call_{tool.call_id}",
                "type": "function",
                "function": {"name": tool.name, "arguments": ""},
            }
            events.append(Event(chunk(index, {"tool_calls": [head]}), tokens=1))
            for piece in tool.pieces():
                delta = {"tool_calls": [{"index": k, "function": {"arguments": piece}}]}
                events.append(Event(chunk(index, delta), tokens=1))
        if not completion.tool_calls:
            events += [Event(chunk(index, {"content": piece}), tokens=1) for piece in completion.pieces]
        events.append(Event(chunk(index, {}, chat_finish_reason(completion))))
    if include_usage:
        final = chunk(0, {})
        final["choices"] = []
        final["usage"] = chat_usage(turn)
        events.append(Event(final))
    events.append(Event("[DONE]"))
    return events


# -- OpenAI Responses -------------------------------------------------------------------------------


def responses_events(turn: Turn) -> list[Event]:
    raw: list[tuple[str, dict[str, Any], int]] = []

    def add(kind: str, payload: dict[str, Any], tokens: int = 0) -> None:
        raw.append((kind, payload, tokens))

    add("response.created", {"response": response_object(turn, final=False)})
    add("response.in_progress", {"response": response_object(turn, final=False)})
    status = response_status(turn)
    announced = response_items(turn, "in_progress", empty=True)
    done_items = response_items(turn, status)
    calls = turn.completion.tool_calls
    for index, (item, done) in enumerate(zip(announced, done_items, strict=True)):
        add("response.output_item.added", {"output_index": index, "item": item})
        if calls:
            tool = calls[index]
            item_id = function_call_id(tool)
            for piece in tool.pieces():
                delta = {"item_id": item_id, "output_index": index, "delta": piece}
                add("response.function_call_arguments.delta", delta, 1)
            finished = {
                "item_id": item_id,
                "output_index": index,
                "name": tool.name,
                "arguments": tool.arguments,
            }
            add("response.function_call_arguments.done", finished)
        else:
            where = {"item_id": turn.item_id, "output_index": index, "content_index": 0}
            add("response.content_part.added", {**where, "part": output_text_part("")})
            for piece in turn.completion.pieces:
                add("response.output_text.delta", {**where, "delta": piece, "logprobs": []}, 1)
            text = turn.completion.text
            add("response.output_text.done", {**where, "text": text, "logprobs": []})
            add("response.content_part.done", {**where, "part": output_text_part(text)})
        add("response.output_item.done", {"output_index": index, "item": done})
    add(f"response.{status}", {"response": response_object(turn, final=True)})
    return [
        Event({"type": kind, "sequence_number": n, **payload}, kind, tokens)
        for n, (kind, payload, tokens) in enumerate(raw)
    ]


# -- Anthropic Messages -----------------------------------------------------------------------------


def _anthropic_blocks(completion: Completion) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(content_block_start block, its deltas) per block, in content order."""
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if completion.thinking:
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in completion.thinking]
        deltas.append({"type": "signature_delta", "signature": completion.signature})
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
    if completion.pieces:
        text = [{"type": "text_delta", "text": piece} for piece in completion.pieces]
        blocks.append(({"type": "text", "text": ""}, text))
    for tool in completion.tool_calls:
        block = {"type": "tool_use", "id": f"toolu_{tool.call_id}", "name": tool.name, "input": {}}
        blocks.append((block, [{"type": "input_json_delta", "partial_json": p} for p in tool.pieces()]))
    return blocks


def anthropic_events(turn: Turn) -> list[Event]:
    events = [
        Event({"type": "message_start", "message": anthropic_message(turn, final=False)}, "message_start")
    ]
    completion = turn.completion
    for index, (block, deltas) in enumerate(_anthropic_blocks(completion)):
        events.append(
            Event(
                {"type": "content_block_start", "index": index, "content_block": block}, "content_block_start"
            )
        )
        if index == 0:
            events.append(Event({"type": "ping"}, "ping"))
        events += [
            Event(
                {"type": "content_block_delta", "index": index, "delta": d},
                "content_block_delta",
                0 if d["type"] == "signature_delta" else 1,
            )
            for d in deltas
        ]
        events.append(Event({"type": "content_block_stop", "index": index}, "content_block_stop"))
    usage = anthropic_usage(turn)
    cumulative = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    delta_usage = {k: usage[k] for k in cumulative}
    events.append(
        Event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": anthropic_stop_reason(completion), "stop_sequence": None},
                "usage": delta_usage,
            },
            "message_delta",
        )
    )
    events.append(Event({"type": "message_stop"}, "message_stop"))
    return events
