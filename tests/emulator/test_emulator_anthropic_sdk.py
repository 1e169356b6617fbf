"""The emulator through the official anthropic SDK: Messages (plain and streamed), count_tokens, caching."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anthropic
import httpx
import pytest

if TYPE_CHECKING:
    from conftest import Emulator

MODEL = "claude-sonnet-5"  # minimum cacheable prefix 1024 in the model table
POLICY = " ".join(
    f"Rule {i}: answer questions about topic {i} using section {i} of the handbook." for i in range(150)
)
TOOL: Any = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def cached_system(ttl: str = "5m", text: str = POLICY) -> Any:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral", "ttl": ttl}}]


def ask(
    client: anthropic.Anthropic, question: str = "What is rule 3?", **kwargs: Any
) -> anthropic.types.Message:
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 200,
        "system": cached_system(),
        "messages": [{"role": "user", "content": question}],
        **kwargs,
    }
    return client.messages.create(**params)


def test_message_parses_and_usage_splits_input(emulator: Emulator) -> None:
    client = emulator.anthropic()
    first = ask(client)
    assert first.type == "message" and first.role == "assistant" and first.stop_reason == "end_turn"
    assert first.content[0].type == "text" and first.content[0].text
    u = first.usage
    assert (
        u.cache_read_input_tokens == 0
        and u.cache_creation_input_tokens
        and u.cache_creation_input_tokens > 1024
    )
    assert u.cache_creation is not None
    assert u.cache_creation.ephemeral_5m_input_tokens == u.cache_creation_input_tokens
    assert 0 < u.input_tokens < 50  # only the tokens after the breakpoint
    second = ask(client)
    assert second.usage.cache_read_input_tokens == u.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == u.input_tokens
    count = client.messages.count_tokens(
        model=MODEL, system=cached_system(), messages=[{"role": "user", "content": "What is rule 3?"}]
    )
    assert count.input_tokens == u.input_tokens + u.cache_creation_input_tokens


def test_stream_text_and_usage(emulator: Emulator) -> None:
    client = emulator.anthropic()
    plain = ask(client)
    with client.messages.stream(
        model=MODEL,
        max_tokens=200,
        system=cached_system(),
        messages=[{"role": "user", "content": "What is rule 3?"}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text == plain.content[0].text  # type: ignore[union-attr]
    assert final.usage.cache_read_input_tokens == plain.usage.cache_creation_input_tokens
    assert final.usage.output_tokens == plain.usage.output_tokens


def test_stream_wire_events(emulator: Emulator) -> None:
    body = {"model": MODEL, "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", emulator.base_url + "/v1/messages", json=body, headers=headers) as response:
        raw = response.read().decode()
    names = [line[len("event: ") :] for line in raw.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(names)


def test_below_minimum_reports_zero_zero(emulator: Emulator) -> None:
    client = emulator.anthropic()
    for _ in range(2):
        reply = ask(client, system=cached_system(text="You are brief."))
        assert reply.usage.cache_creation_input_tokens == 0 and reply.usage.cache_read_input_tokens == 0


def test_automatic_caching_top_level_cache_control(emulator: Emulator) -> None:
    client = emulator.anthropic()
    turn1 = [{"role": "user", "content": "Q1 " + POLICY}]
    first = client.messages.create(
        model=MODEL,
        max_tokens=50,
        messages=turn1,  # type: ignore[arg-type]
        cache_control={"type": "ephemeral"},
    )
    assert first.usage.cache_creation_input_tokens and first.usage.cache_creation_input_tokens > 1024
    turn2 = [*turn1, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]
    second = client.messages.create(
        model=MODEL,
        max_tokens=50,
        messages=turn2,  # type: ignore[arg-type]
        cache_control={"type": "ephemeral"},
    )
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert 0 < (second.usage.cache_creation_input_tokens or 0) < 50


def test_lookback_beyond_20_blocks_misses(emulator: Emulator) -> None:
    client = emulator.anthropic()

    def blocks(n: int, mark: int) -> Any:
        out: list[dict[str, Any]] = [{"type": "text", "text": f"note {i}"} for i in range(n)]
        out[mark]["cache_control"] = {"type": "ephemeral"}
        return [{"role": "user", "content": out}]

    system = [{"type": "text", "text": POLICY}]  # no breakpoint here: only the message breakpoint writes
    client.messages.create(model=MODEL, max_tokens=10, system=system, messages=blocks(5, 4))  # type: ignore[arg-type]
    # system = 1 block, notes start at position 1: the entry sits at position 5.
    near = client.messages.create(model=MODEL, max_tokens=10, system=system, messages=blocks(24, 23))  # type: ignore[arg-type]
    assert near.usage.cache_read_input_tokens and near.usage.cache_read_input_tokens > 1024  # 24 - 19 = 5
    emulator.reset()
    client.messages.create(model=MODEL, max_tokens=10, system=system, messages=blocks(5, 4))  # type: ignore[arg-type]
    far = client.messages.create(model=MODEL, max_tokens=10, system=system, messages=blocks(25, 24))  # type: ignore[arg-type]
    assert far.usage.cache_read_input_tokens == 0 and far.usage.cache_creation_input_tokens


def test_ttl_expiry_with_advance(emulator: Emulator) -> None:
    client = emulator.anthropic()
    ask(client)
    emulator.advance(299)
    assert ask(client).usage.cache_read_input_tokens  # hit, and refreshed
    emulator.advance(299)
    assert ask(client).usage.cache_read_input_tokens
    emulator.advance(301)
    expired = ask(client)
    assert expired.usage.cache_read_input_tokens == 0 and expired.usage.cache_creation_input_tokens


def test_one_hour_ttl(emulator: Emulator) -> None:
    client = emulator.anthropic()
    first = ask(client, system=cached_system("1h"))
    assert first.usage.cache_creation and first.usage.cache_creation.ephemeral_1h_input_tokens > 1024
    emulator.advance(1800)
    assert ask(client, system=cached_system("1h")).usage.cache_read_input_tokens
    emulator.advance(3601)
    assert ask(client, system=cached_system("1h")).usage.cache_read_input_tokens == 0


def test_api_keys_are_isolated(emulator: Emulator) -> None:
    ask(emulator.anthropic("org-a"))
    other = ask(emulator.anthropic("org-b"))
    assert other.usage.cache_read_input_tokens == 0
    assert ask(emulator.anthropic("org-a")).usage.cache_read_input_tokens


def test_models_are_isolated(emulator: Emulator) -> None:
    client = emulator.anthropic()
    ask(client)
    assert ask(client, model="claude-opus-4-8").usage.cache_read_input_tokens == 0


def test_tool_use(emulator: Emulator) -> None:
    client = emulator.anthropic()
    reply = client.messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[TOOL],
        messages=[{"role": "user", "content": "Use the tool for Oslo."}],
    )
    assert reply.stop_reason == "tool_use"
    block = reply.content[0]
    assert (
        block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "example city"}
    )
    with client.messages.stream(
        model=MODEL,
        max_tokens=100,
        tools=[TOOL],
        messages=[{"role": "user", "content": "Use the tool for Oslo."}],
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {"city": "example city"}
    follow = client.messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[TOOL],
        messages=[
            {"role": "user", "content": "Use the tool for Oslo."},
            {"role": "assistant", "content": [block.model_dump()]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}],
            },
        ],
    )
    assert follow.stop_reason == "end_turn" and follow.content[0].type == "text"


def test_max_tokens_zero_prewarms(emulator: Emulator) -> None:
    client = emulator.anthropic()
    warm = ask(client, max_tokens=0)
    assert warm.content == [] and warm.stop_reason == "max_tokens"
    assert ask(client).usage.cache_read_input_tokens


def test_errors_have_anthropic_shape(emulator: Emulator) -> None:
    client = emulator.anthropic()
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": c, "cache_control": {"type": "ephemeral"}} for c in "abcde"
                    ],
                }
            ],
        )
    assert bad.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": bad.value.body["error"]["message"]},
    }  # type: ignore[index]
    response = emulator.post("/v1/messages", {"model": MODEL, "max_tokens": 1, "messages": []})
    assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"
    missing = httpx.post(
        emulator.base_url + "/v1/messages",
        headers={"x-api-key": "k"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
    )
    assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]
