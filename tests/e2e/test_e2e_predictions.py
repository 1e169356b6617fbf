"""End to end: the official SDKs → cachewarden proxy → the emulator, over real loopback sockets.

The proxy's predictions must equal the usage the emulator reports (the emulator is the reference
model of each provider's cache) on a scripted agent workload, streamed and not, for OpenAI Chat
Completions, OpenAI Responses and Anthropic Messages; and /metrics must say so.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from cachewarden.proxy.cli.proxy import build
from cachewarden.proxy.emulator.app import create_app as create_emulator
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.testing import metric, scrape, serving

POLICY = "\n".join(
    f"Policy {i}: for a request about topic {i}, check clause {i * 3 % 17} and answer in {20 + i} words."
    for i in range(120)
)
CHAT_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_booking",
            "description": "Find a booking by its reference.",
            "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]},
        },
    }
]
ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": "lookup_booking",
        "description": "Find a booking by its reference.",
        "input_schema": {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]},
    }
]


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    with serving(create_emulator(), "emulator") as emulator:
        proxy_app = build(Settings(openai_upstream=emulator.url, anthropic_upstream=emulator.url))
        with serving(proxy_app, "proxy") as proxy:
            yield proxy.url


def tokens_by_source(url: str, provider: str) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = defaultdict(dict)
    for (name, labels), value in scrape(url).items():
        d = dict(labels)
        if name == "cachewarden_input_tokens_total" and d.get("provider") == provider:
            found[d["source"]][d["kind"]] = found[d["source"]].get(d["kind"], 0) + value
    return found


def wait_for_reports(url: str, provider: str, expected: int) -> None:
    """Response hooks run after the client got its response: wait until all were analysed."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        count = metric(url, "cachewarden_prediction_error_tokens_count", provider=provider)
        if count >= expected:
            return
        time.sleep(0.05)
    raise AssertionError(f"only {count} of {expected} {provider} responses were analysed")


def assert_predictions_match(url: str, provider: str, requests: int) -> None:
    wait_for_reports(url, provider, requests)
    by_source = tokens_by_source(url, provider)
    assert by_source["predicted"] == by_source["reported"], by_source
    assert by_source["reported"]["cached"] > 0, "the workload should produce cache hits"
    samples = scrape(url)
    # Prediction error histogram (negative buckets, so no _sum): every observation is exactly 0,
    # i.e. it falls in the bucket le=0 and not in the largest bucket below 0.
    buckets: dict[float, float] = defaultdict(float)
    for (name, labels), value in samples.items():
        d = dict(labels)
        if name == "cachewarden_prediction_error_tokens_bucket" and d.get("provider") == provider:
            buckets[float(d["le"])] += value
    below_zero = max(le for le in buckets if le < 0)
    assert buckets[0.0] == buckets[float("inf")] >= requests
    assert buckets[below_zero] == 0
    unexplained = [
        v
        for (name, labels), v in samples.items()
        if name == "cachewarden_cache_miss_tokens_total" and dict(labels).get("reason") == "unexplained"
    ]
    assert sum(unexplained) == 0
    analysis_errors = [v for (name, _), v in samples.items() if name == "cachewarden_analysis_errors_total"]
    assert sum(analysis_errors) == 0


def test_openai_chat_agent_workload(proxy_url: str) -> None:
    client = openai.OpenAI(api_key="sk-e2e-chat", base_url=proxy_url + "/v1", max_retries=0)
    messages: list[Any] = [{"role": "system", "content": POLICY}]
    sent = 0
    for turn in range(4):
        messages.append({"role": "user", "content": f"Question {turn}: what does policy {turn} say?"})
        if turn % 2 == 0:
            reply = client.chat.completions.create(model="gpt-4.1", messages=messages, tools=CHAT_TOOLS)
            text = reply.choices[0].message.content or ""
            assert reply.usage is not None and reply.usage.prompt_tokens > 1024
        else:
            stream = client.chat.completions.create(
                model="gpt-4.1",
                messages=messages,
                tools=CHAT_TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
            text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        messages.append({"role": "assistant", "content": text})
        sent += 1
    client.close()
    assert_predictions_match(proxy_url, "openai-chat", sent)


def test_openai_async_responses_chain(proxy_url: str) -> None:
    async def run() -> int:
        client = openai.AsyncOpenAI(api_key="sk-e2e-responses", base_url=proxy_url + "/v1", max_retries=0)
        previous: str | None = None
        for turn in range(3):
            kwargs: dict[str, Any] = {"previous_response_id": previous} if previous else {}
            response = await client.responses.create(
                model="gpt-4.1", instructions=POLICY, input=f"Turn {turn}: summarise policy {turn}.", **kwargs
            )
            previous = response.id
        await client.close()
        return 3

    sent = asyncio.run(run())
    assert_predictions_match(proxy_url, "openai-responses", sent)


def test_anthropic_agent_workload(proxy_url: str) -> None:
    client = anthropic.Anthropic(api_key="sk-ant-e2e", base_url=proxy_url, max_retries=0)
    messages: list[Any] = []
    sent = 0
    for turn in range(4):
        messages.append({"role": "user", "content": f"Question {turn}: what does policy {turn} say?"})
        kwargs: dict[str, Any] = {
            "model": "claude-sonnet-5",
            "max_tokens": 64,
            "system": [{"type": "text", "text": POLICY}],
            "tools": ANTHROPIC_TOOLS,
            "messages": messages,
            "extra_body": {"cache_control": {"type": "ephemeral"}},
        }
        if turn % 2 == 0:
            reply = client.messages.create(**kwargs)
            text = "".join(b.text for b in reply.content if b.type == "text")
        else:
            with client.messages.stream(**kwargs) as stream:
                text = "".join(stream.text_stream)
        messages.append({"role": "assistant", "content": text or "ok"})
        sent += 1
    client.close()
    assert_predictions_match(proxy_url, "anthropic", sent)
