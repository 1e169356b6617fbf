"""Usage parsers: every response shape, streamed or not, fed in awkward chunkings."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable

import brotli
import pytest
import zstandard
from cachewarden.proxy.engine.usage import (
    SseParser,
    Usage,
    UsageTracker,
    usage_from_anthropic,
    usage_from_openai,
)

CHAT_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0},
}
RESPONSES_USAGE = {
    "input_tokens": 3652,
    "input_tokens_details": {"cached_tokens": 3584},
    "output_tokens": 95,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 3747,
}
ANTHROPIC_USAGE = {
    "input_tokens": 50,
    "cache_creation_input_tokens": 248,
    "cache_read_input_tokens": 4000,
    "cache_creation": {"ephemeral_5m_input_tokens": 148, "ephemeral_1h_input_tokens": 100},
    "output_tokens": 708,
    "service_tier": "standard",
}


def sse(*events: tuple[str | None, object]) -> bytes:
    out = b""
    for name, data in events:
        if name is not None:
            out += f"event: {name}\n".encode()
        text = data if isinstance(data, str) else json.dumps(data)
        out += f"data: {text}\n\n".encode()
    return out


def feed(tracker: UsageTracker, body: bytes, size: int) -> None:
    for i in range(0, len(body), size):
        tracker.feed(body[i : i + size])


def chunkings(body: bytes) -> Iterable[int]:
    return (1, 3, 7, 64, len(body) or 1)


# -- normal form ------------------------------------------------------------------------------------


def test_openai_chat_counts_cached_inside_prompt_tokens() -> None:
    assert usage_from_openai(CHAT_USAGE) == Usage(2006, 1920, 0, 0, 86, 300)


def test_openai_responses_usage() -> None:
    assert usage_from_openai(RESPONSES_USAGE) == Usage(3652, 3584, 0, 0, 68, 95)


def test_openai_cache_write_tokens_are_part_of_the_prompt() -> None:
    usage = {
        "prompt_tokens": 5000,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 3000},
    }
    assert usage_from_openai(usage) == Usage(5000, 1000, 3000, 0, 1000, 0)


def test_deepseek_hit_tokens_fallback() -> None:
    usage = {"prompt_tokens": 100, "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36}
    assert usage_from_openai(usage) == Usage(100, 64, 0, 0, 36, 0)


def test_anthropic_counts_cache_beside_input_tokens() -> None:
    usage = usage_from_anthropic(ANTHROPIC_USAGE)
    assert usage == Usage(4298, 4000, 248, 100, 50, 708)
    assert usage is not None and usage.cached + usage.cache_write + usage.uncached == usage.input_total


def test_usage_without_token_counts_is_none() -> None:
    assert usage_from_openai({"foo": 1}) is None
    assert usage_from_anthropic({"output_tokens": 3}) is None


# -- JSON bodies ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "body", "expected"),
    [
        (
            "openai-chat",
            {"id": "c", "model": "gpt-4.1", "usage": CHAT_USAGE},
            Usage(2006, 1920, 0, 0, 86, 300),
        ),
        (
            "openai-responses",
            {"id": "r", "object": "response", "model": "gpt-5", "usage": RESPONSES_USAGE},
            Usage(3652, 3584, 0, 0, 68, 95),
        ),
        (
            "anthropic",
            {"id": "m", "type": "message", "model": "claude-sonnet-4-5", "usage": ANTHROPIC_USAGE},
            Usage(4298, 4000, 248, 100, 50, 708),
        ),
    ],
)
def test_json_bodies(provider: str, body: dict[str, object], expected: Usage) -> None:
    raw = json.dumps(body).encode()
    for size in chunkings(raw):
        tracker = UsageTracker(provider, "application/json; charset=utf-8")  # type: ignore[arg-type]
        feed(tracker, raw, size)
        report = tracker.finish()
        assert report.state == "reported"
        assert report.usage == expected
        assert report.model == body["model"]


def test_gzip_json_is_decoded_on_a_side_copy() -> None:
    raw = gzip.compress(json.dumps({"model": "gpt-4.1", "usage": CHAT_USAGE}).encode())
    tracker = UsageTracker("openai-chat", "application/json", "gzip")
    feed(tracker, raw, 5)
    assert tracker.finish().usage == Usage(2006, 1920, 0, 0, 86, 300)


def _compressed(coding: str, data: bytes) -> bytes:
    if coding == "gzip":
        return gzip.compress(data)
    if coding == "br":
        return bytes(brotli.compress(data))
    return bytes(zstandard.ZstdCompressor().compress(data))


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
@pytest.mark.parametrize("size", [1, 7, 4096])
def test_compressed_json_is_decoded_on_a_side_copy(coding: str, size: int) -> None:
    raw = _compressed(coding, json.dumps({"model": "gpt-4.1", "usage": CHAT_USAGE}).encode())
    tracker = UsageTracker("openai-chat", "application/json", coding)
    feed(tracker, raw, size)
    report = tracker.finish()
    assert (report.state, report.usage) == ("reported", Usage(2006, 1920, 0, 0, 86, 300))


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_compressed_streams_are_parsed_incrementally(coding: str) -> None:
    raw = _compressed(coding, chat_stream(include_usage=True))
    tracker = UsageTracker("openai-chat", "text/event-stream", coding)
    feed(tracker, raw, 9)
    assert tracker.finish().usage == Usage(2006, 1920, 0, 0, 86, 300)


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_a_compressed_bomb_stops_at_the_parse_limit(coding: str) -> None:
    raw = _compressed(coding, b'{"usage": {"prompt_tokens": 1}, "pad": "' + b"a" * 200_000 + b'"}')
    tracker = UsageTracker("openai-chat", "application/json", coding, limit=10_000)
    feed(tracker, raw, 64)
    assert tracker.finish().state == "unparsed"


def test_an_unknown_coding_is_unparsed() -> None:
    tracker = UsageTracker("openai-chat", "application/json", "compress")
    tracker.feed(b"\x1f\x9d\x90")
    report = tracker.finish()
    assert (report.state, report.detail) == ("unparsed", "compressed (compress)")


def test_error_body_has_no_usage() -> None:
    tracker = UsageTracker("anthropic", "application/json")
    tracker.feed(b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')
    assert tracker.finish().state == "missing"


def test_malformed_and_oversized_bodies() -> None:
    tracker = UsageTracker("openai-chat", "application/json")
    tracker.feed(b'{"usage": {')
    assert tracker.finish().state == "unparsed"
    tracker = UsageTracker("openai-chat", "application/json", limit=10)
    tracker.feed(b'{"usage": {"prompt_tokens": 1}}')
    assert tracker.finish().detail == "too-large"


# -- streams ----------------------------------------------------------------------------------------


def chat_stream(include_usage: bool) -> bytes:
    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        out: dict[str, object] = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "gpt-4.1-2025",
            "choices": [choice],
        }
        if include_usage:
            out["usage"] = None
        return out

    events: list[tuple[str | None, object]] = [
        (None, chunk({"role": "assistant", "content": ""})),
        (None, chunk({"content": "Hel"})),
        (None, chunk({"content": "lo"}, "stop")),
    ]
    if include_usage:
        events.append(
            (None, {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": CHAT_USAGE})
        )
    events.append((None, "[DONE]"))
    return sse(*events)


def test_chat_stream_with_include_usage() -> None:
    body = chat_stream(include_usage=True)
    for size in chunkings(body):
        tracker = UsageTracker("openai-chat", "text/event-stream")
        feed(tracker, body, size)
        report = tracker.finish()
        assert report.usage == Usage(2006, 1920, 0, 0, 86, 300)
        assert report.model == "gpt-4.1-2025"


def test_chat_stream_without_include_usage_is_missing() -> None:
    tracker = UsageTracker("openai-chat", "text/event-stream")
    feed(tracker, chat_stream(include_usage=False), 11)
    report = tracker.finish()
    assert (report.state, report.model) == ("missing", "gpt-4.1-2025")


@pytest.mark.parametrize("terminal", ["response.completed", "response.incomplete", "response.failed"])
def test_responses_stream_terminal_event(terminal: str) -> None:
    response = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-5",
        "status": "in_progress",
        "usage": None,
    }
    body = sse(
        ("response.created", {"type": "response.created", "response": response}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hi"}),
        (terminal, {"type": terminal, "response": {**response, "usage": RESPONSES_USAGE}}),
    )
    for size in chunkings(body):
        tracker = UsageTracker("openai-responses", "text/event-stream; charset=utf-8")
        feed(tracker, body, size)
        report = tracker.finish()
        assert report.usage == Usage(3652, 3584, 0, 0, 68, 95)
        assert report.model == "gpt-5"


def anthropic_stream(*deltas: dict[str, object]) -> bytes:
    start_usage = {
        "input_tokens": 50,
        "cache_creation_input_tokens": 248,
        "cache_read_input_tokens": 4000,
        "cache_creation": {"ephemeral_5m_input_tokens": 148, "ephemeral_1h_input_tokens": 100},
        "output_tokens": 1,
    }
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "usage": start_usage,
    }
    events: list[tuple[str | None, object]] = [
        ("message_start", {"type": "message_start", "message": message}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        ("ping", {"type": "ping"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"text": "Hi"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ]
    events += [("message_delta", {"type": "message_delta", "delta": {}, "usage": d}) for d in deltas]
    events.append(("message_stop", {"type": "message_stop"}))
    return sse(*events)


def test_anthropic_stream_overlays_the_last_cumulative_delta() -> None:
    # Server tools: several deltas, each cumulative; summing them would double count.
    body = anthropic_stream(
        {"output_tokens": 20, "input_tokens": 60, "cache_read_input_tokens": 4000},
        {"output_tokens": 708, "input_tokens": 70, "cache_read_input_tokens": 4100},
    )
    for size in chunkings(body):
        tracker = UsageTracker("anthropic", "text/event-stream")
        feed(tracker, body, size)
        report = tracker.finish()
        # input 70 + read 4100 + creation 248 (from message_start, not in the deltas)
        assert report.usage == Usage(4418, 4100, 248, 100, 70, 708)
        assert report.model == "claude-sonnet-4-5"


def test_anthropic_stream_with_only_output_in_delta() -> None:
    tracker = UsageTracker("anthropic", "text/event-stream")
    feed(tracker, anthropic_stream({"output_tokens": 708}), 13)
    assert tracker.finish().usage == Usage(4298, 4000, 248, 100, 50, 708)


def test_gzip_stream_is_parsed_incrementally() -> None:
    raw = gzip.compress(chat_stream(include_usage=True))
    tracker = UsageTracker("openai-chat", "text/event-stream", "gzip")
    feed(tracker, raw, 9)
    assert tracker.finish().state == "reported"


def test_tracker_ignores_other_content_types() -> None:
    tracker = UsageTracker("openai-chat", "text/plain")
    tracker.feed(b"hello")
    assert tracker.finish().state == "unparsed"


# -- the SSE parser ---------------------------------------------------------------------------------


def test_sse_parser_handles_every_line_ending_split_anywhere() -> None:
    stream = b": comment\r\nevent: a\r\ndata: 1\r\ndata:2\r\n\r\nevent: b\rdata: x\r\rdata: y\n\n"
    for size in range(1, len(stream) + 1):
        parser = SseParser()
        got = [e for i in range(0, len(stream), size) for e in parser.feed(stream[i : i + size])]
        assert got == [("a", b"1\n2"), ("b", b"x"), (None, b"y")], size


def test_sse_parser_drops_oversized_events() -> None:
    parser = SseParser(limit=8)
    got = list(parser.feed(b"data: 0123456789abcdef\n\ndata: ok\n\n"))
    assert got == [(None, b"ok")]
    assert parser.oversized == 1
