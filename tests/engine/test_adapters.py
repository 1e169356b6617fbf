"""Request adapters: body -> Prompt in cache order, breakpoints as metadata, every bad body a RequestError."""

from __future__ import annotations

import base64
import copy
import json
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest
from cachewarden.proxy.engine.adapters import detect_provider, load_body, parse_request
from cachewarden.proxy.engine.adapters._body import CheckedBody, check_depth, json_depth_ok
from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.engine.prompt import PROVIDERS, CacheControl, Prompt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

RECORDED = Path("/work/shared/data/recorded/interactions.jsonl")


def shape(prompt: Prompt) -> list[tuple[str, str, str | None, int | None]]:
    return [(s.path, s.kind, s.role, s.message_index) for s in prompt.segments]


def png_b64(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", width, height)
    return base64.b64encode(header + b"\x08\x02\x00\x00\x00" + b"\x00" * 64).decode()


# --------------------------------------------------------------------------- OpenAI Chat Completions

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

CHAT_BODY: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "stream": True,
    "temperature": 0.2,
    "reasoning_effort": "low",
    "prompt_cache_key": "tenant-7",
    "tools": [WEATHER_TOOL, {"type": "function", "function": {"name": "search", "parameters": {}}}],
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}},
    },
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": [{"type": "text", "text": "Use metric units."}]},
        {
            "role": "user",
            "name": "alice",
            "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "image_url", "image_url": {"url": "https://x/img.png", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://x/big.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    ],
}


def test_chat_segments_paths_kinds_and_order() -> None:
    prompt = parse_request(orjson.dumps(CHAT_BODY))
    assert prompt.provider == "openai-chat"
    assert prompt.model == "gpt-4o-mini"
    assert shape(prompt) == [
        ("tools[0]", "tool", None, None),
        ("tools[1]", "tool", None, None),
        ("response_format", "schema", None, None),
        ("messages[0]", "system", "system", 0),
        ("messages[1].content[0]", "system", "developer", 1),
        ("messages[2].name", "other", "user", 2),
        ("messages[2].content[0]", "text", "user", 2),
        ("messages[2].content[1]", "image", "user", 2),
        ("messages[2].content[2]", "image", "user", 2),
        ("messages[3].tool_calls[0]", "tool_use", "assistant", 3),
        ("messages[4]", "tool_result", "tool", 4),
        ("messages[5]", "message", "assistant", 5),
        ("messages[6].refusal", "text", "assistant", 6),
    ]
    seg = {s.path: s for s in prompt.segments}
    assert seg["tools[0]"].name == "get_weather"
    assert seg["tools[0]"].text == orjson.dumps(WEATHER_TOOL).decode()
    assert seg["response_format"].name == "answer"
    assert seg["response_format"].text == orjson.dumps(CHAT_BODY["response_format"]).decode()
    assert seg["messages[2].name"].text == "alice"
    # GPT-4o mini's documented image rule (engine/images.py): 2,833 low; + 5,667 per tile (1024 x 1024).
    assert (seg["messages[2].content[1]"].fixed_tokens, seg["messages[2].content[1]"].text) == (2833, "")
    assert seg["messages[2].content[2]"].fixed_tokens == 2833 + 4 * 5667
    assert seg["messages[3].tool_calls[0]"].text == 'get_weather\n{"city": "Paris"}'
    assert seg["messages[3].tool_calls[0]"].name == "get_weather"
    assert seg["messages[4]"].text == "18C, cloudy"
    assert seg["messages[5]"].text == ""
    assert seg["messages[6].refusal"].text == "I can't help with that."
    assert prompt.params == (("reasoning_effort", "low"),)
    assert prompt.prompt_cache_key == "tenant-7"
    assert prompt.stream is True


def test_chat_images_differ_by_url_though_text_is_empty() -> None:
    other = copy.deepcopy(CHAT_BODY)
    other["messages"][2]["content"][1]["image_url"]["url"] = "https://x/other.png"
    a, b = parse_request(CHAT_BODY), parse_request(other)
    assert a.segments[7].path == "messages[2].content[1]"
    assert a.segments[7].digest != b.segments[7].digest
    assert a.segments[6].digest == b.segments[6].digest


def test_tool_call_arguments_are_verbatim() -> None:
    def args_text(arguments: str) -> str:
        body = copy.deepcopy(CHAT_BODY)
        body["messages"][3]["tool_calls"][0]["function"]["arguments"] = arguments
        prompt = parse_request(json.dumps(body))
        return next(s.text for s in prompt.segments if s.kind == "tool_use")

    escaped, raw = args_text('{"city":"\\u00e9"}'), args_text('{"city":"é"}')
    assert escaped == 'get_weather\n{"city":"\\u00e9"}'
    assert raw == 'get_weather\n{"city":"é"}'
    assert args_text('{"a":1,"b":2}') != args_text('{"b":2,"a":1}')


def test_tool_key_order_changes_the_digest() -> None:
    reordered = copy.deepcopy(CHAT_BODY)
    fn = reordered["tools"][0]["function"]
    reordered["tools"][0]["function"] = {k: fn[k] for k in ("parameters", "description", "name")}
    a, b = parse_request(CHAT_BODY), parse_request(reordered)
    assert a.segments[0].digest != b.segments[0].digest
    assert a.segments[1].digest == b.segments[1].digest
    assert json.loads(a.segments[0].text) == json.loads(b.segments[0].text)


def test_chat_tool_calls_without_content_and_empty_messages() -> None:
    body = {
        "model": "m",
        "messages": [
            {
                "role": "assistant",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "user", "content": []},
            {"role": "user"},
        ],
    }
    prompt = parse_request(body, "openai-chat")
    assert shape(prompt) == [
        ("messages[0].tool_calls[0]", "tool_use", "assistant", 0),
        ("messages[1]", "message", "user", 1),
        ("messages[2]", "message", "user", 2),
    ]
    assert [s.text for s in prompt.segments] == ["f\n{}", "", ""]


def test_chat_unknown_part_is_other_with_its_json() -> None:
    part = {"type": "hologram", "z": 1, "a": [True]}
    prompt = parse_request({"model": "m", "messages": [{"role": "user", "content": [part]}]}, "openai-chat")
    assert (prompt.segments[0].kind, prompt.segments[0].text) == (
        "other",
        '{"type":"hologram","z":1,"a":[true]}',
    )


# --------------------------------------------------------------------------- OpenAI Responses

RESPONSES_BODY: dict[str, Any] = {
    "model": "gpt-5",
    "instructions": "Be brief.",
    "previous_response_id": "resp_123",
    "prompt_cache_key": "k1",
    "prompt_cache_retention": "24h",
    "reasoning": {"effort": "high", "summary": "auto"},
    "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}},
    "tools": [
        {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
        {"type": "web_search"},
    ],
    "input": [
        {"role": "developer", "content": "Cite sources."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in this file?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "high"},
                {"type": "input_file", "file_id": "file-1"},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think."}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q":"x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
        {"role": "user", "content": []},
    ],
}


def test_responses_segments_paths_kinds_and_order() -> None:
    prompt = parse_request(orjson.dumps(RESPONSES_BODY), route="/v1/responses")
    assert prompt.provider == "openai-responses"
    assert shape(prompt) == [
        ("tools[0]", "tool", None, None),
        ("tools[1]", "tool", None, None),
        ("text.format", "schema", None, None),
        ("instructions", "system", None, None),
        ("input[0]", "system", "developer", 0),
        ("input[1].content[0]", "text", "user", 1),
        ("input[1].content[1]", "image", "user", 1),
        ("input[1].content[2]", "document", "user", 1),
        ("input[2]", "thinking", "assistant", 2),
        ("input[3]", "tool_use", "assistant", 3),
        ("input[4]", "tool_result", "tool", 4),
        ("input[5]", "other", "assistant", 5),
        ("input[6].content[0]", "text", "assistant", 6),
        ("input[7]", "message", "user", 7),
    ]
    seg = {s.path: s for s in prompt.segments}
    assert [seg["tools[0]"].name, seg["tools[1]"].name] == ["lookup", "web_search"]
    assert seg["text.format"].name == "out"
    assert seg["instructions"].text == "Be brief."
    assert seg["input[1].content[1]"].fixed_tokens == 70 + 4 * 140  # gpt-5: 70 + 140 per tile, 1024 x 1024
    assert seg["input[2]"].text == "Think."
    assert seg["input[3]"].text == 'lookup\n{"q":"x"}'
    assert seg["input[4]"].text == "found"
    assert seg["input[5]"].text == '{"type":"web_search_call","id":"ws_1","status":"completed"}'
    assert prompt.previous_response_id == "resp_123"
    assert prompt.prompt_cache_key == "k1"
    assert prompt.params == (("prompt_cache_retention", "24h"), ("reasoning_effort", "high"))


def test_responses_string_input() -> None:
    prompt = parse_request({"model": "gpt-5", "input": "hi"})
    assert shape(prompt) == [("input", "message", "user", 0)]
    assert prompt.segments[0].text == "hi"


# --------------------------------------------------------------------------- Anthropic Messages

ANTHROPIC_BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "temperature": 1,
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "tools": [
        {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search", "cache_control": {"type": "ephemeral"}},
    ],
    "system": [
        {"type": "text", "text": "You are a weather bot."},
        {"type": "text", "text": "Long reference text.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Need a tool.", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris", "u": "C"},
                },
                {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "x"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "timeout"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": png_b64(750, 20)},
                        },
                        {"type": "text", "text": "retry later"},
                    ],
                },
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": png_b64(300, 500)},
                },
                {"type": "image", "source": {"type": "url", "url": "https://x/y.jpg"}},
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "The doc."},
                    "citations": {"enabled": True},
                },
                {"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ],
}


def test_anthropic_segments_paths_kinds_and_order() -> None:
    prompt = parse_request(json.dumps(ANTHROPIC_BODY), route="/v1/messages")
    assert prompt.provider == "anthropic"
    assert shape(prompt) == [
        ("tools[0]", "tool", None, None),
        ("tools[1]", "tool", None, None),
        ("system[0]", "system", None, None),
        ("system[1]", "system", None, None),
        ("messages[0].content", "message", "user", 0),
        ("messages[1].content[0]", "thinking", "assistant", 1),
        ("messages[1].content[1]", "thinking", "assistant", 1),
        ("messages[1].content[2]", "text", "assistant", 1),
        ("messages[1].content[3]", "tool_use", "assistant", 1),
        ("messages[1].content[4]", "other", "assistant", 1),
        ("messages[2].content[0]", "tool_result", "user", 2),
        ("messages[2].content[1]", "image", "user", 2),
        ("messages[2].content[2]", "image", "user", 2),
        ("messages[2].content[3]", "document", "user", 2),
        ("messages[2].content[4]", "text", "user", 2),
    ]
    seg = {s.path: s for s in prompt.segments}
    assert seg["tools[0]"].name == "get_weather"
    # cache_control is metadata: it never enters the text.
    assert seg["tools[1]"].text == '{"type":"web_search_20250305","name":"web_search"}'
    assert seg["tools[1]"].cache_control == CacheControl("5m")
    assert seg["system[1]"].cache_control == CacheControl("1h")
    assert seg["messages[1].content[0]"].text == "Need a tool."
    assert seg["messages[1].content[1]"].text == "opaque"
    assert seg["messages[1].content[3]"].text == 'get_weather\n{"city":"Paris","u":"C"}'
    assert seg["messages[1].content[3]"].name == "get_weather"
    assert seg["messages[1].content[4]"].name == "web_search"
    assert seg["messages[2].content[0]"].text == "[is_error]\ntimeout\nretry later"
    assert seg["messages[2].content[0]"].fixed_tokens == 20  # 750 x 20 px / 750
    assert seg["messages[2].content[1]"].fixed_tokens == 200  # 300 x 500 px / 750
    assert seg["messages[2].content[2]"].fixed_tokens == 1600  # URL: documented default
    assert seg["messages[2].content[3]"].text == "The doc."
    assert prompt.breakpoints == (1, 3, 14)
    assert prompt.auto_cache is None
    assert prompt.params == (
        ("citations", "on"),
        ("thinking", '{"budget_tokens":2048,"type":"enabled"}'),
        ("tool_choice", '{"disable_parallel_tool_use":false,"type":"auto"}'),
        ("web_search", "on"),
    )


def test_moving_a_breakpoint_changes_no_digest() -> None:
    moved = copy.deepcopy(ANTHROPIC_BODY)
    del moved["system"][1]["cache_control"]
    del moved["tools"][1]["cache_control"]
    del moved["messages"][2]["content"][4]["cache_control"]
    moved["system"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    moved["messages"][2]["content"][0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    moved["messages"][2]["content"][1]["cache_control"] = {"type": "ephemeral"}
    moved["cache_control"] = {"type": "ephemeral"}
    a, b = parse_request(ANTHROPIC_BODY), parse_request(moved)
    assert [s.digest for s in a.segments] == [s.digest for s in b.segments]
    assert [s.text for s in a.segments] == [s.text for s in b.segments]
    assert a.breakpoints != b.breakpoints
    assert b.auto_cache == CacheControl("5m")
    assert a.fingerprint == b.fingerprint


def test_anthropic_tool_input_key_order_and_tool_order_matter() -> None:
    swapped = copy.deepcopy(ANTHROPIC_BODY)
    swapped["messages"][1]["content"][3]["input"] = {"u": "C", "city": "Paris"}
    swapped["tools"][0] = {
        "input_schema": {"type": "object"},
        "name": "get_weather",
        "description": "Weather",
    }
    a, b = parse_request(ANTHROPIC_BODY), parse_request(swapped)
    changed = [x.path for x, y in zip(a.segments, b.segments, strict=True) if x.digest != y.digest]
    assert changed == ["tools[0]", "messages[1].content[3]"]


def test_anthropic_params_change_fingerprint() -> None:
    other = copy.deepcopy(ANTHROPIC_BODY)
    other["thinking"]["budget_tokens"] = 4096
    other["temperature"] = 0
    other["max_tokens"] = 10
    assert parse_request(other).fingerprint != parse_request(ANTHROPIC_BODY).fingerprint
    cooler = copy.deepcopy(ANTHROPIC_BODY)
    cooler["temperature"] = 0
    cooler["max_tokens"] = 10
    assert parse_request(cooler).fingerprint == parse_request(ANTHROPIC_BODY).fingerprint


def test_anthropic_string_system_and_empty_content() -> None:
    body = {
        "model": "claude-x",
        "max_tokens": 5,
        "system": "Sys.",
        "messages": [{"role": "user", "content": []}],
    }
    prompt = parse_request(body)
    assert shape(prompt) == [("system", "system", None, None), ("messages[0].content", "message", "user", 0)]
    assert [s.text for s in prompt.segments] == ["Sys.", ""]


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ("/v1/chat/completions", "openai-chat"),
        ("/v1/responses", "openai-responses"),
        ("/v1/messages", "anthropic"),
        ("/v1/messages/count_tokens", "anthropic"),
        ("/v1/messages?beta=true", "anthropic"),
        ("/openai/deployments/gpt-4o/chat/completions", "openai-chat"),
    ],
)
def test_detect_by_route(route: str, expected: str) -> None:
    # The body looks like Chat: the route must win.
    assert detect_provider({"model": "m", "messages": []}, route) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"model": "m", "input": "x"}, "openai-responses"),
        ({"model": "m", "instructions": "x"}, "openai-responses"),
        ({"model": "m", "system": "x", "messages": []}, "anthropic"),
        ({"anthropic_version": "bedrock-2023-05-31", "messages": []}, "anthropic"),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "tool_result"}]}],
            },
            "anthropic",
        ),
        (
            {"model": "claude-opus-4", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
            "anthropic",
        ),
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}, "openai-chat"),
    ],
)
def test_detect_by_shape(body: dict[str, Any], expected: str) -> None:
    assert detect_provider(body) == expected
    assert detect_provider(body, "/some/other/path") == expected


def test_detect_undecidable() -> None:
    with pytest.raises(RequestError, match="cannot tell the request format"):
        detect_provider({"model": "m"})


# --------------------------------------------------------------------------- malformed bodies


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"model": "m",', "not valid JSON"),
        (b'{"model": "\xff\xfe"}', r"not valid UTF-8 \(byte offset 11\)"),
        ("\ud800", "not valid UTF-8"),
        (b"[1, 2]", "must be a JSON object, not an array"),
        (b'"text"', "must be a JSON object, not a string"),
        (b"[" * 10_000 + b"]" * 10_000, "nested deeper than 256"),
        (b'{"a":' * 300 + b"1" + b"}" * 300, "nested deeper than 256"),
        (b"", "not valid JSON"),
    ],
)
def test_load_body_rejects(data: bytes | str, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        load_body(data)


def test_load_body_size_limit() -> None:
    with pytest.raises(RequestError, match="over the limit of 10"):
        load_body(b'{"model": "gpt-4o"}', max_bytes=10)
    assert load_body(b'{"a": 1}', max_bytes=8) == {"a": 1}


def test_deep_mapping_given_directly_is_rejected() -> None:
    deep: Any = "x"
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(RequestError, match="nested deeper"):
        parse_request({"model": "m", "messages": deep}, "openai-chat")


@pytest.mark.parametrize(
    ("provider", "body", "path"),
    [
        ("openai-chat", {"model": "m", "messages": {}}, "messages"),
        ("openai-chat", {"model": "m"}, "messages"),
        ("openai-chat", {"messages": []}, "model"),
        ("openai-chat", {"model": 5, "messages": []}, "model"),
        ("openai-chat", {"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ("openai-chat", {"model": "m", "messages": ["hi"]}, "messages[0]"),
        ("openai-chat", {"model": "m", "messages": [{"content": "x"}]}, "messages[0].role"),
        (
            "openai-chat",
            {"model": "m", "messages": [{"role": "user", "content": [{"text": "x"}]}]},
            "messages[0].content[0].type",
        ),
        (
            "openai-chat",
            {"model": "m", "messages": [], "tools": [{"type": "function", "function": {}}]},
            "tools[0].function.name",
        ),
        ("openai-chat", {"model": "m", "messages": [], "stream": "yes"}, "stream"),
        (
            "openai-chat",
            {
                "model": "m",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}],
                    }
                ],
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
        ("openai-responses", {"model": "m", "input": 7}, "input"),
        (
            "openai-responses",
            {"model": "m", "input": [{"type": "function_call", "arguments": "{}"}]},
            "input[0].name",
        ),
        (
            "openai-responses",
            {"model": "m", "input": [{"role": "user", "content": [1]}]},
            "input[0].content[0]",
        ),
        ("openai-responses", {"model": "m", "input": [], "reasoning": {"effort": 1}}, "reasoning.effort"),
        ("anthropic", {"model": "m", "messages": [], "tools": [{"description": "no name"}]}, "tools[0].name"),
        ("anthropic", {"model": "m", "messages": [], "system": 5}, "system"),
        (
            "anthropic",
            {"model": "m", "messages": [{"role": "user", "content": [{"text": "x"}]}]},
            "messages[0].content[0].type",
        ),
        (
            "anthropic",
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "content": [{"type": "text"}]}]}
                ],
            },
            "messages[0].content[0].content[0].text",
        ),
        (
            "anthropic",
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": "yes"}]}
                ],
            },
            "messages[0].content[0].cache_control",
        ),
    ],
)
def test_wrong_types_name_the_path(provider: Any, body: dict[str, Any], path: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_request(body, provider)
    assert info.value.path == path
    assert str(info.value).startswith(f"{path}: ")


def test_model_fallback_only_when_body_has_none() -> None:
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5, "messages": []}
    assert parse_request(body, model="claude-haiku-4-5").model == "claude-haiku-4-5"
    assert parse_request({**body, "model": "claude-x"}, model="other").model == "claude-x"


def test_python_values_outside_json_still_only_raise_request_error() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "x", "n": 2**80, "s": "\ud800"}]}],
    }
    assert (
        parse_request(body, "openai-chat").segments[0].text
        == '{"type":"x","n":1208925819614629174706176,"s":"\ud800"}'
    )
    with pytest.raises(RequestError):
        parse_request(
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "x", "v": object()}]}]},
            "openai-chat",
        )


# --------------------------------------------------------------------------- property: only RequestError

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=25,
)

# Keys and type names the adapters look at, so that random bodies get deep into every branch.
KEYS = [
    "model", "messages", "input", "instructions", "tools", "system", "role", "content", "type", "text",
    "name", "function", "arguments", "tool_calls", "image_url", "detail", "refusal", "source", "data",
    "input_schema",
    "cache_control", "ttl", "is_error", "thinking", "output", "summary", "format", "json_schema",
    "response_format", "reasoning", "effort", "tool_choice", "stream", "citations", "enabled", "custom",
    "audio", "function_call", "prompt_cache_key", "previous_response_id", "speed", "prompt_cache_options",
]  # fmt: skip
TYPES = [
    "text", "image", "image_url", "document", "tool_use", "tool_result", "thinking", "redacted_thinking",
    "function", "function_call", "function_call_output", "reasoning", "message", "input_text", "input_image",
    "input_file", "json_schema", "search_result", "custom", "base64", "content", "file", "refusal",
    "web_search_20250305", "user", "assistant", "system", "tool", "1h", "low",
]  # fmt: skip
shaped_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(TYPES) | st.text(max_size=4)
shaped_values = st.recursive(
    shaped_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
    max_leaves=40,
)


def only_request_error(body: Any, provider: Any) -> None:
    try:
        prompt = parse_request(body, provider)
    except RequestError:
        return
    assert isinstance(prompt, Prompt)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, provider=st.sampled_from([*PROVIDERS, None]))
def test_random_json_raises_only_request_error(value: Any, provider: Any) -> None:
    only_request_error(orjson.dumps(value), provider)
    if isinstance(value, dict):
        only_request_error(value, provider)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.dictionaries(st.sampled_from(KEYS), shaped_values, max_size=8),
    provider=st.sampled_from([*PROVIDERS, None]),
)
def test_shaped_random_bodies_raise_only_request_error(body: dict[str, Any], provider: Any) -> None:
    only_request_error(body, provider)
    only_request_error(orjson.dumps(body), provider)


# --------------------------------------------------------------------------- real recorded bodies


def test_recorded_bodies_parse() -> None:
    if not RECORDED.exists():
        pytest.skip("recorded interactions not available")
    failures: list[str] = []
    count = 0
    with RECORDED.open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            count += 1
            body = record["request"]
            path = record.get("path") or ""
            assert detect_provider(body, path) == record["provider"]
            assert detect_provider(body) == record["provider"]
            # Azure deployments and Bedrock invoke put the model in the URL, not the body.
            fallback = path.split("/")[-2] if "model" not in body else None
            try:
                parse_request(orjson.dumps(body), record["provider"], model=fallback)
            except RequestError as exc:
                failures.append(f"{record['source']}: {exc}")
    assert count > 0
    assert failures == []


# --------------------------------------------------------------------------- depth check on the text

_json_keys = st.text(alphabet='k"\\[{', max_size=3)
_json_values = st.recursive(
    st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(alphabet='ab[]{}"\\\u00e9\n', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_json_keys, inner, max_size=3),
    max_leaves=40,
)


def _depth(value: Any, level: int = 1) -> int:
    if isinstance(value, dict):
        return max([level, *(_depth(v, level + 1) for v in value.values())])
    if isinstance(value, list):
        return max([level, *(_depth(v, level + 1) for v in value)])
    return level - 1


@settings(max_examples=300, deadline=None)
@given(value=_json_values, indent=st.booleans())
def test_depth_from_the_text_is_exact(value: Any, indent: bool) -> None:
    depth = _depth(value)
    for text in (orjson.dumps(value), json.dumps(value, indent=1 if indent else None).encode()):
        for limit in (max(depth - 1, 0), depth, depth + 1):
            assert json_depth_ok(text, limit) == (depth <= limit)
            try:
                check_depth(value, limit)
                walked = True
            except RequestError:
                walked = False
            assert walked == (depth <= limit)


def test_depth_past_the_first_passes() -> None:
    for depth in (7, 8, 9, 40, 256, 257):
        text = b'{"a":' + b"[" * (depth - 1) + b'"x"' + b"]" * (depth - 1) + b"}"
        assert json_depth_ok(text, 256) == (depth <= 256)
        assert json_depth_ok(text, depth) and not json_depth_ok(text, depth - 1)


def test_load_body_marks_a_checked_body_only_when_checked_as_strictly() -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
    assert type(load_body(body)) is CheckedBody
    assert type(load_body(body, max_depth=1000)) is dict
    deep = b'{"model": "m", "messages": ' + b"[" * 300 + b"]" * 300 + b"}"
    with pytest.raises(RequestError, match="nested deeper than 256"):
        parse_request(load_body(deep, max_depth=1000), "openai-chat")
