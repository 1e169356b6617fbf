"""What the emulator answers beyond prose, through the official SDKs: parallel tool calls, structured
outputs that validate against their schema, Anthropic thinking blocks, ``n`` choices, and bodies
compressed with the coding the client accepts (gzip, br, zstd), streamed and not."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anthropic
import brotli
import httpx
import jsonschema
import pytest
import zstandard
from cachewarden.proxy.emulator.structured import example_value, schema_in_prompt
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from conftest import Emulator

POLICY = " ".join(f"Rule {i}: answer questions about topic {i} using section {i}." for i in range(180))
CLAUDE = "claude-sonnet-5"


def _fn(name: str, props: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": props, "required": list(props)}
    return {"type": "function", "function": {"name": name, "description": name, "parameters": schema}}


WEATHER = _fn("get_weather", {"city": {"type": "string"}})
TIME = _fn("get_time", {"zone": {"type": "string", "enum": ["UTC", "CET"]}})
TOOLS = [WEATHER, TIME]
ASK_BOTH = "Call get_weather and get_time for Paris, please."


class Address(BaseModel):
    street: str
    city: str = Field(min_length=2)


class Person(BaseModel):
    name: str
    age: int = Field(ge=18, le=130)
    email: str | None = None
    tags: list[str] = Field(min_length=2)
    home: Address
    former: list[Address] = []


SCHEMA = Person.model_json_schema()


def chat(question: str) -> list[Any]:
    return [{"role": "system", "content": POLICY}, {"role": "user", "content": question}]


# -- parallel tool calls ---------------------------------------------------------------------------


def test_chat_parallel_tool_calls_plain_and_streamed(emulator: Emulator) -> None:
    client = emulator.openai()
    reply = client.chat.completions.create(model="gpt-4.1", messages=chat(ASK_BOTH), tools=TOOLS)
    calls = reply.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert len({c.id for c in calls}) == 2
    assert json.loads(calls[1].function.arguments) == {"zone": "UTC"}
    # Streamed, the SDK's accumulator rebuilds both calls from their indexed deltas.
    with client.chat.completions.stream(model="gpt-4.1", messages=chat(ASK_BOTH), tools=TOOLS) as stream:
        final = stream.get_final_completion()
    streamed = final.choices[0].message.tool_calls or []
    assert [(c.id, c.function.arguments) for c in streamed] == [(c.id, c.function.arguments) for c in calls]


def test_parallel_calls_can_be_turned_off(emulator: Emulator) -> None:
    client = emulator.openai()
    reply = client.chat.completions.create(
        model="gpt-4.1", messages=chat(ASK_BOTH), tools=TOOLS, parallel_tool_calls=False
    )
    assert [c.function.name for c in reply.choices[0].message.tool_calls or []] == ["get_weather"]


def test_responses_parallel_function_calls(emulator: Emulator) -> None:
    client = emulator.openai()
    tools: Any = [{"type": "function", **t["function"]} for t in TOOLS]
    reply = client.responses.create(model="gpt-4.1", instructions=POLICY, input=ASK_BOTH, tools=tools)
    calls = [item for item in reply.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    with client.responses.stream(model="gpt-4.1", instructions=POLICY, input=ASK_BOTH, tools=tools) as stream:
        streamed = stream.get_final_response()
    assert [(i.call_id, i.arguments) for i in streamed.output if i.type == "function_call"] == [
        (c.call_id, c.arguments) for c in calls
    ]
    # Both results go back (chained by previous_response_id): a text answer.
    results: Any = [{"type": "function_call_output", "call_id": c.call_id, "output": "ok"} for c in calls]
    done = client.responses.create(model="gpt-4.1", previous_response_id=reply.id, input=results, tools=tools)
    assert done.output_text


def test_anthropic_parallel_tool_use_and_opt_out(emulator: Emulator) -> None:
    client = emulator.anthropic()
    tools: Any = [
        {"name": t["function"]["name"], "description": "d", "input_schema": t["function"]["parameters"]}
        for t in TOOLS
    ]
    messages: Any = [{"role": "user", "content": ASK_BOTH}]
    reply = client.messages.create(
        model=CLAUDE, max_tokens=300, system=POLICY, messages=messages, tools=tools
    )
    assert reply.stop_reason == "tool_use"
    assert [b.name for b in reply.content if b.type == "tool_use"] == ["get_weather", "get_time"]
    with client.messages.stream(
        model=CLAUDE, max_tokens=300, system=POLICY, messages=messages, tools=tools
    ) as stream:
        streamed = stream.get_final_message()
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in reply.content]
    one = client.messages.create(
        model=CLAUDE,
        max_tokens=300,
        system=POLICY,
        messages=messages,
        tools=tools,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    assert [b.name for b in one.content if b.type == "tool_use"] == ["get_weather"]


# -- structured outputs ------------------------------------------------------------------------------


def test_chat_json_schema_answer_validates(emulator: Emulator) -> None:
    client = emulator.openai()
    parsed = client.chat.completions.parse(model="gpt-4.1", messages=chat("Who?"), response_format=Person)
    person = parsed.choices[0].message.parsed
    assert isinstance(person, Person) and person.age >= 18 and len(person.tags) >= 2
    stream_text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model="gpt-4.1",
            messages=chat("Who?"),
            stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
        )
        if c.choices
    )
    jsonschema.validate(json.loads(stream_text), SCHEMA)


def test_json_mode_answers_the_schema_written_in_the_prompt(emulator: Emulator) -> None:
    client = emulator.openai()
    prompt = f"Answer as JSON matching this schema:\n{json.dumps(SCHEMA, indent=2)}\nNo prose."
    reply = client.chat.completions.create(
        model="gpt-4.1", messages=chat(prompt), response_format={"type": "json_object"}
    )
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), SCHEMA)
    bare = client.chat.completions.create(
        model="gpt-4.1", messages=chat("Any JSON."), response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(bare.choices[0].message.content or ""), dict)


def test_responses_text_format_answer_validates(emulator: Emulator) -> None:
    client = emulator.openai()
    parsed = client.responses.parse(model="gpt-4.1", instructions=POLICY, input="Who?", text_format=Person)
    assert isinstance(parsed.output_parsed, Person)


@pytest.mark.parametrize("where", ["output_config", "output_format"])
def test_anthropic_output_format_answer_validates(emulator: Emulator, where: str) -> None:
    fmt = {"type": "json_schema", "schema": SCHEMA}
    body: Any = {"output_config": {"format": fmt}} if where == "output_config" else {"output_format": fmt}
    client = emulator.anthropic()
    reply = client.messages.create(
        model=CLAUDE, max_tokens=300, messages=[{"role": "user", "content": "Who?"}], extra_body=body
    )
    text = "".join(b.text for b in reply.content if b.type == "text")
    jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.parametrize(
    "schema",
    [
        SCHEMA,
        {"type": "array", "items": {"type": "integer", "exclusiveMinimum": 5}, "minItems": 3},
        {"anyOf": [{"type": "null"}, {"type": "string", "format": "date-time"}]},
        {
            "type": "object",
            "properties": {"n": {"type": "number", "maximum": 0.5}},
            "required": ["n", "extra"],
        },
        {"type": "string", "maxLength": 3},
    ],
)
def test_example_values_validate(schema: dict[str, Any]) -> None:
    jsonschema.validate(example_value(schema), schema)


def test_schema_in_prompt_takes_the_largest_schema_object() -> None:
    text = 'Small {"properties": {}} then ' + json.dumps(SCHEMA) + " and {not json"
    assert schema_in_prompt({"messages": [{"role": "user", "content": text}]}) == SCHEMA


# -- thinking and n ------------------------------------------------------------------------------------


def test_anthropic_thinking_blocks_plain_and_streamed(emulator: Emulator) -> None:
    client = emulator.anthropic()
    params: Any = {
        "model": CLAUDE,
        "max_tokens": 2000,
        "system": POLICY,
        "messages": [{"role": "user", "content": "Think, then answer."}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    reply = client.messages.create(**params)
    kinds = [b.type for b in reply.content]
    assert kinds == ["thinking", "text"]
    thinking = reply.content[0]
    assert thinking.type == "thinking" and thinking.thinking and thinking.signature
    with client.messages.stream(**params) as stream:
        streamed = stream.get_final_message()
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in reply.content]
    assert streamed.usage.output_tokens == reply.usage.output_tokens > len(reply.content[1].text.split())
    # The thinking block goes back in the next turn, as the SDK returns it.
    follow = [
        *params["messages"],
        {"role": "assistant", "content": reply.content},
        {"role": "user", "content": "And?"},
    ]
    assert client.messages.create(**{**params, "messages": follow}).content[0].type == "thinking"


def test_chat_n_choices_plain_and_streamed(emulator: Emulator) -> None:
    client = emulator.openai()
    reply = client.chat.completions.create(model="gpt-4.1", messages=chat("Two answers."), n=3)
    texts = [c.message.content for c in reply.choices]
    assert [c.index for c in reply.choices] == [0, 1, 2] and len(set(texts)) == 3
    assert reply.usage is not None
    assert reply.usage.completion_tokens == sum(len((t or "").split()) for t in texts)
    streamed: dict[int, str] = {}
    for chunk in client.chat.completions.create(
        model="gpt-4.1", messages=chat("Two answers."), n=3, stream=True
    ):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + (choice.delta.content or "")
    assert [streamed[k] for k in range(3)] == texts


# -- compression ---------------------------------------------------------------------------------------


def _decode(coding: str, data: bytes) -> bytes:
    if coding == "gzip":
        import gzip

        return gzip.decompress(data)
    if coding == "br":
        return bytes(brotli.decompress(data))
    return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
@pytest.mark.parametrize("stream", [False, True])
def test_bodies_are_compressed_with_the_coding_the_client_accepts(
    emulator: Emulator, coding: str, stream: bool
) -> None:
    body = {"model": "gpt-4.1", "messages": chat("Hi"), "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    headers = {"authorization": "Bearer sk-test", "accept-encoding": f"identity;q=0.5, {coding}"}
    with httpx.stream(
        "POST", emulator.base_url + "/v1/chat/completions", json=body, headers=headers
    ) as response:
        raw = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == coding
    text = _decode(coding, raw)
    if stream:
        assert text.endswith(b"data: [DONE]\n\n") and b'"usage":{"prompt_tokens"' in text
    else:
        assert json.loads(text)["usage"]["prompt_tokens"] > 0


def test_no_compression_unless_accepted(emulator: Emulator) -> None:
    headers = {"x-api-key": "k", "accept-encoding": "identity"}
    body = {"model": CLAUDE, "max_tokens": 20, "messages": [{"role": "user", "content": "Hi"}]}
    response = httpx.post(emulator.base_url + "/v1/messages", json=body, headers=headers)
    assert "content-encoding" not in response.headers and response.json()["type"] == "message"


def test_sdks_read_compressed_answers(emulator: Emulator) -> None:
    # The SDKs' httpx accepts gzip and br (zstd too in newer httpx) when the packages are installed.
    client = emulator.anthropic()
    raw = client.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=20, messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers["content-encoding"] in ("br", "zstd")
    assert isinstance(raw.parse(), anthropic.types.Message)


def test_a_prompt_that_asks_for_json_of_a_schema_gets_it(emulator: Emulator) -> None:
    # No output format: the schema and the word JSON are in the system prompt (instructor's
    # ANTHROPIC_JSON mode, pydantic-ai's prompted output). Without the word, prose comes back.
    client = emulator.anthropic()
    system = f"Reply in JSON that matches this schema:\n{json.dumps(SCHEMA)}"
    reply = client.messages.create(
        model=CLAUDE, max_tokens=300, system=system, messages=[{"role": "user", "content": "Who?"}]
    )
    jsonschema.validate(json.loads(reply.content[0].text), SCHEMA)  # type: ignore[union-attr]
    prose = client.messages.create(
        model=CLAUDE,
        max_tokens=300,
        system=json.dumps(SCHEMA),
        messages=[{"role": "user", "content": "Who?"}],
    )
    with pytest.raises(ValueError):
        json.loads(prose.content[0].text)  # type: ignore[union-attr]


@pytest.mark.parametrize(("flags", "coding"), [([], "gzip"), (["--no-compress"], None)])
def test_emulate_command_compresses_unless_told_not_to(flags: list[str], coding: str | None) -> None:
    from cachewarden.proxy.testing import command, free_port

    port = free_port()
    with command(["emulate", "--port", str(port), *flags], port) as (url, _):
        response = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "gpt-4.1", "messages": chat("Hi")},
            headers={"authorization": "Bearer k", "accept-encoding": "gzip"},
        )
    assert response.headers.get("content-encoding") == coding
    assert response.json()["object"] == "chat.completion"
