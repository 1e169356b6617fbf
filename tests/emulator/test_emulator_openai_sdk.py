"""The emulator through the official openai SDK: Chat Completions and Responses, streamed and not."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

if TYPE_CHECKING:
    from conftest import Emulator

POLICY = " ".join(f"Rule {i}: answer questions about topic {i} using section {i}." for i in range(180))
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}


def chat_messages(question: str = "What is rule 7?", system: str = POLICY) -> list[Any]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def test_chat_completion_parses_with_usage(emulator: Emulator) -> None:
    client = emulator.openai()
    reply = client.chat.completions.create(model="gpt-4.1", messages=chat_messages())
    assert reply.object == "chat.completion"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens > 1024 and usage.prompt_tokens_details.cached_tokens == 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    again = client.chat.completions.create(model="gpt-4.1", messages=chat_messages())
    assert again.choices[0].message.content == reply.choices[0].message.content  # deterministic


def test_chat_cache_hit_on_repeat(emulator: Emulator) -> None:
    client = emulator.openai()
    question = "Please summarise. " + "Long context sentence. " * 520
    first = client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": question}])
    second = client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": question}])
    assert first.usage and first.usage.prompt_tokens >= 2000
    assert second.usage and second.usage.prompt_tokens_details
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    assert cached >= 1024 and cached % 128 == 0
    assert cached <= second.usage.prompt_tokens == first.usage.prompt_tokens


def test_chat_short_prompt_reports_zero_cached(emulator: Emulator) -> None:
    client = emulator.openai()
    for _ in range(2):
        reply = client.chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}])
        assert reply.usage and reply.usage.prompt_tokens_details
        assert reply.usage.prompt_tokens_details.cached_tokens == 0


def test_chat_stream_with_and_without_usage(emulator: Emulator) -> None:
    client = emulator.openai()
    chunks = list(client.chat.completions.create(model="gpt-4.1", messages=chat_messages(), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"
    with_usage = list(
        client.chat.completions.create(
            model="gpt-4.1", messages=chat_messages(), stream=True, stream_options={"include_usage": True}
        )
    )
    last = with_usage[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.prompt_tokens_details and last.usage.prompt_tokens_details.cached_tokens >= 1024
    assert "".join(c.choices[0].delta.content or "" for c in with_usage if c.choices) == text


def test_chat_stream_wire_framing(emulator: Emulator) -> None:
    body = {"model": "gpt-4.1", "messages": chat_messages(), "stream": True}
    with httpx.stream(
        "POST", emulator.base_url + "/v1/chat/completions", json=body, headers={"authorization": "Bearer k"}
    ) as response:
        raw = response.read().decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = raw.split("\n\n")
    assert frames[-2] == "data: [DONE]" and frames[-1] == ""
    assert all(f.startswith("data: ") for f in frames[:-1])


def test_async_client(emulator: Emulator) -> None:
    async def go() -> tuple[str | None, str]:
        client = emulator.async_openai()
        reply = await client.chat.completions.create(model="gpt-4.1", messages=chat_messages())
        stream = await client.chat.completions.create(model="gpt-4.1", messages=chat_messages(), stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
        return reply.choices[0].message.content, text

    full, streamed = asyncio.run(go())
    assert full == streamed


def test_chat_tool_call(emulator: Emulator) -> None:
    client = emulator.openai()
    messages = chat_messages("Call get_weather for Paris please.")
    reply = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=[WEATHER_TOOL])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "example city", "unit": "c"}
    # Streamed: the same call, assembled from deltas.
    chunks = list(
        client.chat.completions.create(model="gpt-4.1", messages=messages, tools=[WEATHER_TOOL], stream=True)
    )
    pieces = [
        d.function.arguments or ""
        for c in chunks
        if c.choices
        for d in c.choices[0].delta.tool_calls or []
        if d.function
    ]
    assert "".join(pieces) == call.function.arguments
    # After the tool result: a text answer.
    follow = [
        *messages,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    final = client.chat.completions.create(model="gpt-4.1", messages=follow, tools=[WEATHER_TOOL])
    assert final.choices[0].finish_reason == "stop" and final.choices[0].message.content


def test_chat_no_tool_call_unless_asked(emulator: Emulator) -> None:
    client = emulator.openai()
    reply = client.chat.completions.create(
        model="gpt-4.1", messages=chat_messages("Hello"), tools=[WEATHER_TOOL]
    )
    assert reply.choices[0].message.tool_calls is None
    forced = client.chat.completions.create(
        model="gpt-4.1", messages=chat_messages("Hello"), tools=[WEATHER_TOOL], tool_choice="required"
    )
    assert forced.choices[0].message.tool_calls


def test_chat_length_limit(emulator: Emulator) -> None:
    client = emulator.openai()
    reply = client.chat.completions.create(model="gpt-4.1", messages=chat_messages(), max_completion_tokens=3)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage and reply.usage.completion_tokens == 3


def test_gpt56_reports_cache_write_tokens(emulator: Emulator) -> None:
    client = emulator.openai()
    first = client.chat.completions.create(model="gpt-5.6", messages=chat_messages())
    assert first.usage and first.usage.prompt_tokens_details
    writes = first.usage.prompt_tokens_details.cache_write_tokens
    assert writes is not None and writes > 1024
    second = client.chat.completions.create(model="gpt-5.6", messages=chat_messages())
    assert second.usage and second.usage.prompt_tokens_details
    assert second.usage.prompt_tokens_details.cached_tokens == writes


# -- Responses --------------------------------------------------------------------------------------


def test_responses_create_and_cache(emulator: Emulator) -> None:
    client = emulator.openai()
    first = client.responses.create(model="gpt-4.1", instructions=POLICY, input="What is rule 3?")
    assert first.status == "completed" and first.output_text
    assert first.usage and first.usage.input_tokens > 1024
    assert first.usage.input_tokens_details.cached_tokens == 0
    second = client.responses.create(model="gpt-4.1", instructions=POLICY, input="What is rule 3?")
    assert second.usage and second.usage.input_tokens_details.cached_tokens >= 1024
    assert second.usage.input_tokens_details.cached_tokens % 128 == 0


def test_responses_stream_events(emulator: Emulator) -> None:
    client = emulator.openai()
    with client.responses.stream(model="gpt-4.1", instructions=POLICY, input="Hi") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text
    assert final.usage and final.usage.input_tokens > 1024


def test_responses_previous_response_id_prepends_conversation(emulator: Emulator) -> None:
    client = emulator.openai()
    first = client.responses.create(model="gpt-4.1", instructions=POLICY, input="What is rule 3?")
    second = client.responses.create(
        model="gpt-4.1", instructions=POLICY, input="And rule 4?", previous_response_id=first.id
    )
    assert first.usage and second.usage
    # The stored input and output come before the new input: the whole first turn is a cached prefix.
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 128
    assert second.previous_response_id == first.id
    assert client.responses.retrieve(first.id).id == first.id
    with pytest.raises(openai.BadRequestError):
        emulator.openai(key="another-org").responses.create(
            model="gpt-4.1", input="x", previous_response_id=first.id
        )


def test_responses_function_call(emulator: Emulator) -> None:
    client = emulator.openai()
    tool: Any = {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
        "strict": False,
    }
    reply = client.responses.create(model="gpt-4.1", input="Please use the tool.", tools=[tool])
    call = reply.output[0]
    assert call.type == "function_call" and call.name == "lookup" and json.loads(call.arguments) == {"id": 1}
    with client.responses.stream(model="gpt-4.1", input="Please use the tool.", tools=[tool]) as stream:
        kinds = [e.type for e in stream]
    assert "response.function_call_arguments.delta" in kinds


def test_responses_input_tokens(emulator: Emulator) -> None:
    response = emulator.post("/v1/responses/input_tokens", {"model": "gpt-4.1", "input": "hello"})
    assert response.status_code == 401  # no key
    response = httpx.post(
        emulator.base_url + "/v1/responses/input_tokens",
        json={"model": "gpt-4.1", "input": "hello"},
        headers={"authorization": "Bearer k"},
    )
    assert response.json()["object"] == "response.input_tokens" and response.json()["input_tokens"] > 0


def test_openai_errors_have_openai_shape(emulator: Emulator) -> None:
    client = emulator.openai()
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="gpt-4.1", messages="nope")  # type: ignore[arg-type]
    assert isinstance(bad.value.body, dict) and "message" in bad.value.body
    response = emulator.post("/v1/chat/completions", {"model": "gpt-4.1", "messages": []})
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    with pytest.raises(openai.NotFoundError):
        client.models.list()
