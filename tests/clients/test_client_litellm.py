"""litellm as a client library: ``completion`` with tools and a streamed follow-up, against the OpenAI
and the Anthropic routes (litellm translates its OpenAI-shaped calls into Messages requests)."""

from __future__ import annotations

import json
from typing import Any

import pytest
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

litellm = pytest.importorskip("litellm", reason="litellm is not installed")

TOOLS: Any = [
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


def _conversation(provider: str) -> Any:
    def run(at: Endpoint) -> list[Any]:
        if provider == "openai":
            where: dict[str, Any] = {
                "model": f"openai/{OPENAI_MODEL}",
                "api_base": at.openai_base_url,
                "api_key": at.openai_key,
            }
        else:
            where = {
                "model": f"anthropic/{CLAUDE_MODEL}",
                "api_base": at.anthropic_base_url,
                "api_key": at.anthropic_key,
            }
        system: Any = {"role": "system", "content": POLICY}
        if provider == "anthropic":
            system["content"] = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
        messages: list[Any] = [system, {"role": "user", "content": CITY_QUESTION}]
        first = litellm.completion(messages=messages, tools=TOOLS, max_tokens=400, **where)
        call = first.choices[0].message.tool_calls[0]
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": weather(**json.loads(call.function.arguments)),
            }
        )
        second = litellm.completion(messages=messages, tools=TOOLS, max_tokens=400, **where)
        messages += [{"role": "assistant", "content": second.choices[0].message.content}]
        messages += [{"role": "user", "content": FOLLOW_UP}]
        stream = litellm.completion(
            messages=messages,
            tools=TOOLS,
            max_tokens=400,
            stream=True,
            stream_options={"include_usage": True},
            **where,
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = [c.usage for c in chunks if getattr(c, "usage", None)]
        return [
            call.function.name,
            json.loads(call.function.arguments),
            second.choices[0].message.content,
            text,
            bool(usage),
        ]

    return run


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_litellm_completion(live: Rig, provider: str) -> None:
    litellm.telemetry = False
    name, arguments, answer, streamed, has_usage = run_both(
        live, f"litellm-{provider}", _conversation(provider)
    )
    assert name == "get_weather" and arguments == {"city": "example city"}
    assert answer and streamed and has_usage
