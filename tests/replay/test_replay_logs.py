"""The LOG formats: every line shape, timestamps, recorded usage, and lines that are skipped or bad."""

from __future__ import annotations

import io
import json

import pytest
from cachewarden.proxy.replay import logs as replay_logs
from cachewarden.proxy.replay.logs import (
    LogLineError,
    OversizedLine,
    SkipLine,
    parse_line,
    parse_timestamp,
    read_lines,
    reported_usage,
    route_provider,
)
from replay_fixtures import anthropic, chat, responses


def dumps(obj: object) -> str:
    return json.dumps(obj)


def test_a_bare_body() -> None:
    entry = parse_line(dumps(chat(1)))
    assert entry is not None
    assert entry.kind == "body" and entry.provider is None and entry.timestamp is None
    assert entry.body["model"] == "gpt-4o"


def test_blank_lines_are_not_entries() -> None:
    assert parse_line("  \n") is None


def test_a_record_with_timestamp_usage_route_and_tenant() -> None:
    usage = {"input_tokens": 5, "cache_read_input_tokens": 2000}
    record = {
        "request": anthropic(1),
        "timestamp": 1_700_000_000.5,
        "usage": usage,
        "route": "/v1/messages",
        "tenant": "team-a",
    }
    entry = parse_line(dumps(record))
    assert entry is not None
    assert entry.kind == "record" and entry.provider == "anthropic" and entry.route == "/v1/messages"
    assert entry.timestamp == 1_700_000_000.5 and entry.tenant == "team-a" and entry.usage == usage


def test_the_proxy_capture_record() -> None:
    # hooks.Capture writes the route label, the provider and the raw usage the provider returned.
    capture = {
        "timestamp": 1_700_000_000.25,
        "provider": "openai-chat",
        "route": "openai-chat",
        "upstream": "openai",
        "tenant": "k-1a2b",
        "status": "200",
        "request": chat(1),
        "usage": {"prompt_tokens": 1700, "prompt_tokens_details": {"cached_tokens": 1664}},
    }
    entry = parse_line(dumps(capture))
    assert entry is not None
    assert entry.provider == "openai-chat" and entry.tenant == "k-1a2b"
    assert entry.timestamp == 1_700_000_000.25


@pytest.mark.parametrize(
    ("route", "provider"),
    [
        ("/v1/chat/completions", "openai-chat"),
        ("/v1/responses", "openai-responses"),
        ("/v1/messages", "anthropic"),
        ("/openai/deployments/x/chat/completions?api-version=2024", "openai-chat"),
        ("anthropic-messages", "anthropic"),
        ("openai-responses", "openai-responses"),
        ("/v1/embeddings", None),
    ],
)
def test_routes_name_the_request_format(route: str, provider: str | None) -> None:
    assert route_provider(route) == provider


@pytest.mark.parametrize(
    "record",
    [
        {"route": "anthropic-count-tokens", "request": anthropic(1)},
        {"route": "/v1/messages/count_tokens", "request": anthropic(1)},
        {"route": "passthrough", "request": {}},
        {"route": "openai-chat", "status": "429", "request": chat(1)},
        {"custom_id": "x", "method": "POST", "url": "/v1/embeddings", "body": {"input": "hi"}},
    ],
)
def test_lines_that_never_reach_the_cache_are_skipped(record: dict[str, object]) -> None:
    with pytest.raises(SkipLine):
        parse_line(dumps(record))


def test_openai_batch_lines() -> None:
    line = {"custom_id": "r1", "method": "POST", "url": "/v1/responses", "body": responses(1)}
    entry = parse_line(dumps(line))
    assert entry is not None
    assert entry.kind == "openai-batch" and entry.provider == "openai-responses"
    assert entry.body["instructions"]


def test_anthropic_batch_lines() -> None:
    entry = parse_line(dumps({"custom_id": "r1", "params": anthropic(1)}))
    assert entry is not None
    assert entry.kind == "anthropic-batch" and entry.provider == "anthropic"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object, not list"),
        ('{"request": [1]}', "'request' must be a JSON object"),
        ('{"request": {}, "timestamp": "yesterday"}', "is not epoch seconds, ISO 8601 or an HTTP date"),
        ('{"request": {}, "usage": 3}', "'usage' must be a JSON object or null"),
        ('{"request": {}, "provider": "gemini"}', "unknown provider 'gemini'"),
        ('{"custom_id": "a", "params": "x"}', "'params' must be a JSON object"),
    ],
)
def test_bad_lines_have_a_one_line_reason(text: str, message: str) -> None:
    with pytest.raises(LogLineError) as caught:
        parse_line(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1_700_000_000, 1_700_000_000.0),
        (1_700_000_000_500, 1_700_000_000.5),  # milliseconds
        ("1700000000", 1_700_000_000.0),
        ("2023-11-14T22:13:20Z", 1_700_000_000.0),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000.0),
        ("2023-11-14 22:13:20.5", 1_700_000_000.5),  # naive: UTC
        ("Tue, 14 Nov 2023 22:13:20 GMT", 1_700_000_000.0),  # an HTTP Date header
        (None, None),
    ],
)
def test_timestamps(value: object, seconds: float | None) -> None:
    assert parse_timestamp(value) == seconds


@pytest.mark.parametrize("value", [True, -5, float("nan"), [1], "soon"])
def test_bad_timestamps(value: object) -> None:
    with pytest.raises(LogLineError):
        parse_timestamp(value)


def test_openai_chat_usage_counts_cached_inside_prompt_tokens() -> None:
    usage = reported_usage(
        "openai-chat", {"prompt_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 1792}}
    )
    assert usage is not None
    assert (usage.input_total, usage.cached, usage.cache_write, usage.uncached) == (2000, 1792, 0, 208)


def test_openai_responses_usage() -> None:
    usage = reported_usage(
        "openai-responses", {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 1024}}
    )
    assert usage is not None
    assert (usage.input_total, usage.cached, usage.uncached) == (1500, 1024, 476)


def test_anthropic_usage_counts_cache_beside_input_tokens_with_the_ttl_split() -> None:
    raw = {
        "input_tokens": 10,
        "cache_read_input_tokens": 2000,
        "cache_creation_input_tokens": 300,
        "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
    }
    usage = reported_usage("anthropic", raw)
    assert usage is not None
    assert (usage.input_total, usage.cached, usage.cache_write, usage.cache_write_1h, usage.uncached) == (
        2310,
        2000,
        300,
        200,
        10,
    )


def test_usage_already_in_the_contract_or_normal_form() -> None:
    contract = reported_usage(
        "anthropic", {"cached_tokens": 5, "cache_write_tokens": 6, "uncached_tokens": 7}
    )
    normal = reported_usage(
        "openai-chat", {"input_total": 18, "cached": 5, "cache_write": 6, "cache_write_1h": 0, "uncached": 7}
    )
    assert contract is not None and normal is not None
    assert (contract.cached, contract.cache_write, contract.uncached, contract.input_total) == (5, 6, 7, 18)
    assert (normal.cached, normal.cache_write, normal.uncached, normal.input_total) == (5, 6, 7, 18)


def test_no_usage() -> None:
    assert reported_usage("openai-chat", None) is None
    assert reported_usage("openai-chat", {}) is None
    assert reported_usage("openai-chat", {"total_tokens": 3}) is None


def test_read_lines_keeps_bad_utf8_for_a_per_line_error() -> None:
    data = b'{"a": 1}\n{"b": "\xff"}\n'
    progress = [0]
    lines = list(read_lines(io.BytesIO(data), progress))
    assert len(lines) == 2 and progress[0] == len(data)
    with pytest.raises(LogLineError, match="not valid UTF-8"):
        parse_line(lines[1])


def test_an_oversized_line_is_dropped_without_holding_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_logs, "MAX_LINE_BYTES", 64)
    data = b'{"x": 1}\n' + b"y" * 1000 + b"\n" + b'{"z": 2}\n'
    lines = list(read_lines(io.BytesIO(data)))
    assert len(lines) == 3
    assert isinstance(lines[1], OversizedLine)
    assert lines[2] == '{"z": 2}\n'
    with pytest.raises(LogLineError, match="longer than"):
        parse_line(lines[1])
