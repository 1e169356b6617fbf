"""bench/cassette_records.py: VCR cassettes (vcrpy and Ruby VCR, plain or gzipped) become records.

Synthetic cassettes written here (no third-party data): the loader must find the OpenAI exchanges,
their usage (JSON or server-sent events), and the quality flags the benches filter on.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from cassette_counts import _loader

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
USAGE = {"prompt_tokens": 8, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}}


def _vcrpy(interactions: list[dict[str, Any]]) -> str:
    return json.dumps({"interactions": interactions, "version": 1})  # JSON is YAML


def _exchange(uri: str, body: Any, response: str, code: int = 200) -> dict[str, Any]:
    return {
        "request": {"method": "POST", "uri": uri, "body": json.dumps(body), "headers": {}},
        "response": {
            "status": {"code": code, "message": "OK"},
            "headers": {"Date": ["Tue, 25 Nov 2025 16:21:20 GMT"]},
            "body": {"string": response},
        },
    }


def test_vcrpy_ruby_and_gzip(tmp_path: Path) -> None:
    repo = tmp_path / "someone+project"
    (repo / "tests" / "cassettes").mkdir(parents=True)
    chat = json.dumps({"id": "chatcmpl-AbCdEfGhIjKlMnOp", "model": "gpt-4o-2024-08-06", "usage": USAGE})
    interactions = [
        _exchange("https://api.openai.com/v1/chat/completions", CHAT, chat),
        # another host with the same route: not OpenAI's tokenizer, left out
        _exchange("https://openrouter.ai/api/v1/chat/completions", CHAT, chat),
        # an error: no usage to compare with
        _exchange("https://api.openai.com/v1/chat/completions", CHAT, "{}", code=400),
        # the same body and count again: a duplicate of the first
        _exchange("https://api.openai.com/v1/chat/completions", CHAT, chat),
    ]
    (repo / "tests" / "cassettes" / "a.yaml").write_text(_vcrpy(interactions))
    stream = "\n\n".join(
        "data: " + json.dumps(e)
        for e in (
            {"type": "response.created", "response": {"id": "resp_0123456789abcdef0123", "model": "gpt-5"}},
            {
                "type": "response.completed",
                "response": {
                    "id": "resp_0123456789abcdef0123",
                    "model": "gpt-5-2025-08-07",
                    "usage": {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 1280}},
                },
            },
        )
    )
    ruby = {
        "http_interactions": [
            {
                "request": {
                    "method": "post",
                    "uri": "https://api.openai.com/v1/responses",
                    "body": {"encoding": "UTF-8", "string": json.dumps({"model": "gpt-5", "input": "x"})},
                },
                "response": {"status": {"code": 200}, "body": {"string": stream}},
                "recorded_at": "Wed, 19 Aug 2026 14:34:25 GMT",
            }
        ]
    }
    (repo / "tests" / "cassettes" / "b.yml.gz").write_bytes(gzip.compress(json.dumps(ruby).encode()))
    records = list(_loader().records(tmp_path))
    assert [(r["source"], r["provider"]) for r in records] == [
        ("someone/project:tests/cassettes/a.yaml#0", "openai-chat"),
        ("someone/project:tests/cassettes/a.yaml#3", "openai-chat"),
        ("someone/project:tests/cassettes/b.yml.gz#0", "openai-responses"),
    ]
    first, again, responses = records
    assert first["total_input_tokens"] == 8 and first["self_contained"] and not first["suspect"]
    assert first["recorded_at"] == "Tue, 25 Nov 2025 16:21:20 GMT"
    assert again["duplicate_of"] == first["source"]
    assert responses["streamed"] and responses["cache_read_tokens"] == 1280
    assert responses["response_model"] == "gpt-5-2025-08-07"
    assert responses["recorded_at"] == "Wed, 19 Aug 2026 14:34:25 GMT"


def test_quality_flags() -> None:
    loader = _loader()
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    assert loader.not_self_contained("openai-chat", CHAT) == []
    assert loader.not_self_contained(
        "openai-chat", {"model": "gpt-4o", "messages": [{"role": "user", "content": [image]}]}
    ) == ["part image_url"]
    assert loader.not_self_contained(
        "openai-responses", {"model": "gpt-5", "input": "x", "previous_response_id": "resp_1"}
    ) == ["previous_response_id"]
    assert loader.not_self_contained(
        "openai-responses", {"model": "gpt-5", "input": [{"type": "reasoning", "id": "rs_1"}]}
    ) == ["item reasoning"]
    # a read reported under OpenAI's 1,024-token minimum, and a placeholder id: hand-written
    usage = {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 1}}
    body = json.dumps({"id": "chatcmpl-QwErTyUiOpAsDfGh", "usage": usage})
    rec = loader._record("o/r:c.yaml", 0, _exchange("https://api.openai.com/v1/chat/completions", CHAT, body))
    assert rec is not None and rec["suspect"]
    body = json.dumps({"id": "chatcmpl-123", "usage": USAGE})
    rec = loader._record("o/r:c.yaml", 0, _exchange("https://api.openai.com/v1/chat/completions", CHAT, body))
    assert rec is not None and rec["suspect"]


AIOHTTP_CASSETTE = """interactions:
- request:
    body: '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
    headers:
      ? !!python/object/apply:multidict._multidict.istr
      - Content-Type
      : - application/json
      ? !!python/object/new:multidict._multidict.istr
      - Accept
      : - application/json
    method: POST
    uri: https://api.openai.com/v1/chat/completions
  response:
    body:
      string: '{"id": "chatcmpl-AbCdEfGhIjKlMnOpQrSt", "model": "gpt-4o", "usage": {"prompt_tokens": 8}}'
    headers:
      Date: Tue, 25 Nov 2025 16:21:20 GMT
    status: {code: 200, message: OK}
version: 1
"""

RUBY_BINARY_CASSETTE = """---
http_interactions:
- request:
    method: post
    uri: https://api.openai.com/v1/chat/completions
    body:
      encoding: UTF-8
      string: '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
  response:
    status: {code: 200, message: OK}
    body:
      encoding: ASCII-8BIT
      string: !binary |-
        %s
  recorded_at: 2026-08-02 10:11:12
"""


def test_aiohttp_header_names_and_ruby_binary_bodies_are_read(tmp_path: Path) -> None:
    # vcrpy dumps aiohttp's header names as multidict.istr objects and Ruby VCR a non-UTF-8 body as
    # !binary: each made the whole cassette unreadable before, silently.
    import base64

    repo = tmp_path / "someone+project"
    repo.mkdir()
    (repo / "aiohttp.yaml").write_text(AIOHTTP_CASSETTE)
    body = json.dumps({"id": "chatcmpl-ZyXwVuTsRqPoNmLkJiHg", "model": "gpt-4o", "usage": USAGE})
    (repo / "ruby.yml").write_text(RUBY_BINARY_CASSETTE % base64.b64encode(body.encode()).decode())
    got = {r["source"]: r for r in _loader().records(tmp_path)}
    aiohttp = got["someone/project:aiohttp.yaml#0"]
    assert aiohttp["total_input_tokens"] == 8
    assert aiohttp["recorded_at"] == "Tue, 25 Nov 2025 16:21:20 GMT"
    ruby = got["someone/project:ruby.yml#0"]
    assert ruby["total_input_tokens"] == 8
    # Ruby / R VCR write a YAML timestamp: a string the benches can parse, not a datetime.
    assert ruby["recorded_at"] == "2026-08-02T10:11:12+00:00"
