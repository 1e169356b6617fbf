"""The official ``openai`` and ``anthropic`` SDKs: a tool call, its result, and a streamed follow-up."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
from support import (
    CITY_QUESTION,
    CLAUDE_MODEL,
    FOLLOW_UP,
    OPENAI_MODEL,
    POLICY,
    Endpoint,
    Rig,
    run_both,
    weather,
)

CHAT_TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
RESPONSES_TOOLS: Any = [{"type": "function", **CHAT_TOOLS[0]["function"]}]
CLAUDE_TOOLS: Any = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": CHAT_TOOLS[0]["function"]["parameters"],
    }
]


def openai_chat(at: Endpoint) -> list[Any]:
    client = openai.OpenAI(api_key=at.openai_key, base_url=at.openai_base_url, max_retries=0)
    messages: list[Any] = [{"role": "system", "content": POLICY}, {"role": "user", "content": CITY_QUESTION}]
    reply = client.chat.completions.create(model=OPENAI_MODEL, messages=messages, tools=CHAT_TOOLS)
    call = (reply.choices[0].message.tool_calls or [])[0]
    messages.append(reply.choices[0].message.model_dump(exclude_none=True))
    messages.append(
        {"role": "tool", "tool_call_id": call.id, "content": weather(**json.loads(call.function.arguments))}
    )
    answer = client.chat.completions.create(model=OPENAI_MODEL, messages=messages, tools=CHAT_TOOLS)
    messages += [{"role": "assistant", "content": answer.choices[0].message.content}]
    messages += [{"role": "user", "content": FOLLOW_UP}]
    stream = client.chat.completions.create(
        model=OPENAI_MODEL,
        messages=messages,
        tools=CHAT_TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    # Without include_usage: no usage asked for, none expected.
    plain = client.chat.completions.create(model=OPENAI_MODEL, messages=messages, stream=True)
    unasked = "".join(c.choices[0].delta.content or "" for c in plain if c.choices)
    client.close()
    return [call.function.name, call.function.arguments, answer.choices[0].message.content, streamed, unasked]


def openai_responses(at: Endpoint) -> list[Any]:
    client = openai.OpenAI(api_key=at.openai_key, base_url=at.openai_base_url, max_retries=0)
    first = client.responses.create(
        model=OPENAI_MODEL, instructions=POLICY, input=CITY_QUESTION, tools=RESPONSES_TOOLS
    )
    call = next(item for item in first.output if item.type == "function_call")
    result: Any = [{"type": "function_call_output", "call_id": call.call_id, "output": weather("Paris")}]
    second = client.responses.create(
        model=OPENAI_MODEL,
        instructions=POLICY,
        previous_response_id=first.id,
        input=result,
        tools=RESPONSES_TOOLS,
    )
    with client.responses.stream(
        model=OPENAI_MODEL,
        instructions=POLICY,
        previous_response_id=second.id,
        input=FOLLOW_UP,
        tools=RESPONSES_TOOLS,
    ) as stream:
        third = stream.get_final_response()
    client.close()
    return [call.name, call.arguments, second.output_text, third.output_text]


def anthropic_messages(at: Endpoint) -> list[Any]:
    client = anthropic.Anthropic(api_key=at.anthropic_key, base_url=at.anthropic_base_url, max_retries=0)
    system: Any = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
    messages: list[Any] = [{"role": "user", "content": CITY_QUESTION}]
    first = client.messages.create(
        model=CLAUDE_MODEL, max_tokens=400, system=system, messages=messages, tools=CLAUDE_TOOLS
    )
    use = next(b for b in first.content if b.type == "tool_use")
    messages.append({"role": "assistant", "content": first.content})
    result = {"type": "tool_result", "tool_use_id": use.id, "content": weather(**use.input)}  # type: ignore[arg-type]
    messages.append({"role": "user", "content": [result]})
    second = client.messages.create(
        model=CLAUDE_MODEL, max_tokens=400, system=system, messages=messages, tools=CLAUDE_TOOLS
    )
    messages.append({"role": "assistant", "content": second.content})
    messages.append(
        {
            "role": "user",
            "content": [{"type": "text", "text": FOLLOW_UP, "cache_control": {"type": "ephemeral"}}],
        }
    )
    with client.messages.stream(
        model=CLAUDE_MODEL, max_tokens=400, system=system, messages=messages, tools=CLAUDE_TOOLS
    ) as stream:
        third = stream.get_final_message()
    client.close()
    texts = [b.text for m in (second, third) for b in m.content if b.type == "text"]
    return [use.name, use.input, *texts]


def test_openai_sdk_chat_completions(live: Rig) -> None:
    name, *_ = run_both(live, "openai-chat", openai_chat)
    assert name == "get_weather"


def test_openai_sdk_responses(live: Rig) -> None:
    name, *_ = run_both(live, "openai-responses", openai_responses)
    assert name == "get_weather"


def test_anthropic_sdk_messages(live: Rig) -> None:
    name, *_ = run_both(live, "anthropic", anthropic_messages)
    assert name == "get_weather"
