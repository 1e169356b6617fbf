"""Bad input through the proxy: every malformed request is forwarded unchanged, or refused with a clear 4xx.

A capturing upstream records the exact bytes it receives. The proxy runs with the full analysis
(``cli.proxy.build``: engine, rules, reported usage) in observe mode, on real loopback sockets.
After the whole corpus the proxy is still healthy, and every body the analysis could not read is
counted in ``cachewarden_analysis_errors_total{stage="request"}`` (exactly: the adapters raise a
RequestError, the hook dispatcher counts it; readable bodies cause no error).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.errors import RequestError
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import metric, serving

UPSTREAM_BODY = b'{"id":"up-1","object":"chat.completion","choices":[]}'


class CapturingUpstream:
    """Records (path, headers, body) of every request, keyed by the ``x-case`` header; answers 200 JSON."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, list[tuple[bytes, bytes]], bytes]] = {}
        self.count = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = list(scope["headers"])
        case = dict(headers).get(b"x-case", b"?").decode()
        self.seen[case] = (scope["path"], headers, b"".join(chunks))
        self.count += 1
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": UPSTREAM_BODY})


@dataclass
class Stack:
    upstream: CapturingUpstream
    url: str


def _stack(*, full: bool = True, **settings: Any) -> Iterator[Stack]:
    upstream = CapturingUpstream()
    with serving(upstream, "upstream", lifespan="off", stop_timeout=30) as up:
        config = Settings(openai_upstream=up.url, anthropic_upstream=up.url, **settings)
        app = build(config) if full else create_app(config)
        with serving(app, "proxy", stop_timeout=30) as proxy:
            yield Stack(upstream, proxy.url)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    yield from _stack()


@pytest.fixture(scope="module")
def raised_stack() -> Iterator[Stack]:
    # Forwarding only (the reported-usage analyzer): the live rules take ~10 s of an analysis thread on
    # a 50 MB body (linter/tree.py), which the client never waits for but the fixture's shutdown would.
    yield from _stack(full=False, max_body_bytes=64 * 2**20)


# -- the corpus ---------------------------------------------------------------------------------------

ROUTES = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
}
CHAT: dict[str, Any] = {
    "model": "gpt-4.1",
    "messages": [
        {"role": "system", "content": "You are a booking assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Find booking ABC123"}]},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Find a booking.",
                "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}},
            },
        }
    ],
    "tool_choice": "auto",
    "temperature": 0.2,
    "max_tokens": 64,
    "stream": False,
    "user": "u-1",
    "response_format": {"type": "text"},
    "prompt_cache_key": "sess-1",
}
RESPONSES: dict[str, Any] = {
    "model": "gpt-4.1",
    "instructions": "You are a booking assistant.",
    "input": [{"role": "user", "content": [{"type": "input_text", "text": "Find booking ABC123"}]}],
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "description": "Find a booking.",
            "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}},
        }
    ],
    "previous_response_id": "resp_1",
    "reasoning": {"effort": "low"},
    "text": {"format": {"type": "text"}},
    "store": False,
    "max_output_tokens": 64,
    "stream": False,
}
ANTHROPIC: dict[str, Any] = {
    "model": "claude-sonnet-5",
    "max_tokens": 64,
    "system": [
        {"type": "text", "text": "You are a booking assistant.", "cache_control": {"type": "ephemeral"}}
    ],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Find booking ABC123"}]}],
    "tools": [
        {
            "name": "lookup",
            "description": "Find a booking.",
            "input_schema": {"type": "object", "properties": {"ref": {"type": "string"}}},
        }
    ],
    "tool_choice": {"type": "auto"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "metadata": {"user_id": "u-1"},
    "stream": False,
    "temperature": 0.2,
}
REALISTIC = {"openai-chat": CHAT, "openai-responses": RESPONSES, "anthropic": ANTHROPIC}
WRONG_VALUES: list[Any] = [None, 7, "x", [], {}, True]


@dataclass(frozen=True)
class Case:
    name: str
    provider: str
    body: bytes
    content_type: str | None = "application/json"


def _dump(body: Any) -> bytes:
    return json.dumps(body).encode()


def corpus() -> list[Case]:
    cases: list[Case] = []
    garbage: dict[str, bytes] = {
        "empty": b"",
        "whitespace": b"  \n ",
        "truncated-json": b'{"model": "gpt-4.1", "messages": [',
        "not-json": b"hello, proxy",
        "trailing-garbage": b'{"model": "gpt-4.1"}}',
        "nan": b'{"model": "gpt-4.1", "messages": [], "temperature": NaN}',
        "json-array": b"[1, 2, 3]",
        "json-string": b'"just a string"',
        "json-null": b"null",
        "invalid-utf8": b'{"model": "gpt-4.1", "messages": [{"role": "user", "content": "\xff\xfe\xc3("}]}',
        "lone-surrogate": b'{"model": "gpt-4.1", "messages": [{"role": "user", "content": "\\ud800"}]}',
        "nul-bytes": b'{"model": "gpt\x00-4.1"\x00}',
        "deep-array": b"[" * 10_000 + b"]" * 10_000,
        "deep-object": b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
        "deep-messages": b'{"model": "gpt-4.1", "messages": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
        "deep-content": (
            b'{"model": "claude-sonnet-5", "max_tokens": 5, "messages": [{"role": "user", "content": '
            + b'{"x":' * 10_000
            + b"1"
            + b"}" * 10_000
            + b"}]}"
        ),
        "model-is-prompt": _dump(
            {"model": "say sk-planted\n" * 50, "messages": [{"role": "user", "content": "hi"}]}
        ),
        "huge-number": b'{"model": "gpt-4.1", "max_tokens": 1' + b"0" * 5000 + b', "messages": []}',
    }
    for name, raw in garbage.items():
        for provider in ROUTES:
            cases.append(Case(f"{name}/{provider}", provider, raw))
    # Wrong types in every top-level field of realistic bodies, and in the first message / item.
    for provider, body in REALISTIC.items():
        list_key = "input" if provider == "openai-responses" else "messages"
        for field in body:
            for i, value in enumerate(WRONG_VALUES):
                cases.append(Case(f"type/{provider}/{field}/{i}", provider, _dump({**body, field: value})))
        for i, value in enumerate(WRONG_VALUES):
            cases.append(
                Case(f"type/{provider}/{list_key}[0]/{i}", provider, _dump({**body, list_key: [value]}))
            )
            first = body[list_key][0]
            for key in first:
                item = {**first, key: value}
                cases.append(
                    Case(
                        f"type/{provider}/{list_key}[0].{key}/{i}",
                        provider,
                        _dump({**body, list_key: [item]}),
                    )
                )
        missing = {k: v for k, v in body.items() if k != list_key}
        cases.append(Case(f"missing/{provider}/{list_key}", provider, _dump(missing)))
        cases.append(
            Case(
                f"missing/{provider}/model", provider, _dump({k: v for k, v in body.items() if k != "model"})
            )
        )
    # Unknown content-block types.
    unknown = [
        (
            "openai-chat",
            {**CHAT, "messages": [{"role": "user", "content": [{"type": "hologram", "hologram": 1}]}]},
        ),
        (
            "openai-responses",
            {**RESPONSES, "input": [{"type": "hologram_call", "id": "h1", "payload": [1, 2]}]},
        ),
        (
            "openai-responses",
            {**RESPONSES, "input": [{"role": "user", "content": [{"type": "input_hologram", "x": {}}]}]},
        ),
        (
            "anthropic",
            {**ANTHROPIC, "messages": [{"role": "user", "content": [{"type": "hologram", "h": 1}]}]},
        ),
        ("anthropic", {**ANTHROPIC, "system": [{"type": "hologram"}]}),
        ("anthropic", {**ANTHROPIC, "tools": [{"type": "hologram_tool_2031", "name": "h"}]}),
    ]
    for i, (provider, body) in enumerate(unknown):
        cases.append(Case(f"unknown-block/{i}/{provider}", provider, _dump(body)))
    # Thousands of tools.
    chat_tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object"}}}
        for i in range(5000)
    ]
    resp_tools = [
        {"type": "function", "name": f"tool_{i}", "parameters": {"type": "object"}} for i in range(5000)
    ]
    anth_tools = [{"name": f"tool_{i}", "input_schema": {"type": "object"}} for i in range(5000)]
    cases.append(Case("tools-5000/openai-chat", "openai-chat", _dump({**CHAT, "tools": chat_tools})))
    cases.append(
        Case("tools-5000/openai-responses", "openai-responses", _dump({**RESPONSES, "tools": resp_tools}))
    )
    cases.append(Case("tools-5000/anthropic", "anthropic", _dump({**ANTHROPIC, "tools": anth_tools})))
    # Wrong content types (a valid body, or a form body), and none at all.
    for provider, body in REALISTIC.items():
        valid = _dump(body)
        cases.append(Case(f"ctype-text/{provider}", provider, valid, "text/plain"))
        cases.append(Case(f"ctype-none/{provider}", provider, valid, None))
        cases.append(
            Case(
                f"ctype-form/{provider}",
                provider,
                b"model=gpt-4.1&messages=hi",
                "application/x-www-form-urlencoded",
            )
        )
        multipart = (
            b'--b0undary\r\nContent-Disposition: form-data; name="model"\r\n\r\ngpt-4.1\r\n--b0undary--\r\n'
        )
        cases.append(
            Case(f"ctype-multipart/{provider}", provider, multipart, "multipart/form-data; boundary=b0undary")
        )
        cases.append(Case(f"ctype-none-empty/{provider}", provider, b"", None))
    return cases


def unreadable(case: Case) -> bool:
    """Whether the analysis cannot read this body (the adapters raise RequestError for it; the proxy
    reads bodies with the same strict loader, so lone surrogates and NaN count too)."""
    try:
        parse_request(case.body, provider=case.provider)  # type: ignore[arg-type]
    except RequestError:
        return True
    return False


def send(url: str, case: Case, client: httpx.Client) -> httpx.Response:
    # One key per case: its own tenant, so Responses bodies do not wait for an earlier turn of a chain.
    headers = {"x-case": case.name, "authorization": f"Bearer sk-bad-input-{case.name}"}
    if case.content_type is not None:
        headers["content-type"] = case.content_type
    return client.post(url + ROUTES[case.provider], content=case.body, headers=headers)


# -- tests --------------------------------------------------------------------------------------------


def test_corpus_is_forwarded_unchanged_and_every_unreadable_body_is_counted(stack: Stack) -> None:
    cases = corpus()
    assert len({c.name for c in cases}) == len(cases)
    expected_errors = sum(unreadable(c) for c in cases)
    assert expected_errors > 100  # the corpus really is hostile
    with httpx.Client(timeout=30) as client, ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda case: send(stack.url, case, client), cases))
        for case, response in zip(cases, responses, strict=True):
            assert response.status_code == 200, (case.name, response.text[:300])
            assert response.content == UPSTREAM_BODY, case.name
            path, headers, body = stack.upstream.seen[case.name]
            assert path == ROUTES[case.provider], case.name
            assert body == case.body, case.name  # the exact bytes
            got_ctype = [v for k, v in headers if k == b"content-type"]
            assert got_ctype == ([case.content_type.encode()] if case.content_type else []), case.name
    assert stack.upstream.count == len(cases)

    assert httpx.get(stack.url + "/healthz", timeout=10).status_code == 200
    # Requests are counted once their request analysis finished (after the response): wait for all.
    deadline = time.monotonic() + 60
    while metric(stack.url, "cachewarden_requests_total") < len(cases):
        assert time.monotonic() < deadline, "analysis did not finish"
        time.sleep(0.05)
    assert metric(stack.url, "cachewarden_requests_total", status="200") == len(cases)
    assert metric(stack.url, "cachewarden_analysis_errors_total", stage="request") == expected_errors
    assert metric(stack.url, "cachewarden_analysis_errors_total", stage="response") == 0
    assert metric(stack.url, "cachewarden_analysis_dropped_total") == 0


def _too_large(size: int) -> bytes:
    pad = b"A" * (size - 100)
    return b'{"model": "gpt-4.1", "messages": [], "pad": "' + pad + b'"}'


@pytest.mark.parametrize("provider", ["openai-chat", "anthropic"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_50mb_body_is_413_in_the_providers_error_shape(stack: Stack, provider: str, chunked: bool) -> None:
    body = _too_large(50 * 2**20)
    before = stack.upstream.count
    content: Any = body
    if chunked:

        def pieces() -> Iterator[bytes]:
            for i in range(0, len(body), 2**20):
                yield body[i : i + 2**20]

        content = pieces()
    with httpx.Client(timeout=30) as client:
        response = client.post(
            stack.url + ROUTES[provider],
            content=content,
            headers={"content-type": "application/json", "authorization": "Bearer sk-big"},
        )
    assert response.status_code == 413
    error = response.json()
    limit = str(32 * 2**20)
    if provider == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "request_too_large"
        assert limit in error["error"]["message"]
    else:
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["code"] == "request_too_large"
        assert limit in error["error"]["message"] and "larger than" in error["error"]["message"]
    assert stack.upstream.count == before  # never forwarded
    assert httpx.get(stack.url + "/healthz", timeout=10).status_code == 200
    assert metric(stack.url, "cachewarden_requests_total", status="413") >= 1


def test_50mb_body_is_forwarded_unchanged_under_a_raised_limit(raised_stack: Stack) -> None:
    # A realistic 50 MB body: a large inline image.
    image = "data:image/png;base64," + "iVBORw0KGgo" * (50 * 2**20 // 11)
    body = _dump(
        {
            "model": "gpt-4.1",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}],
        }
    )
    assert 50 * 2**20 < len(body) < 64 * 2**20
    with httpx.Client(timeout=60) as client:
        response = client.post(
            raised_stack.url + "/v1/chat/completions",
            content=body,
            headers={"content-type": "application/json", "x-case": "big"},
        )
    assert response.status_code == 200 and response.content == UPSTREAM_BODY
    assert raised_stack.upstream.seen["big"][2] == body
