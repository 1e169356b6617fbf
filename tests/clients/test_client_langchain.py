"""LangChain chat models (``langchain-openai``, ``langchain-anthropic``): tools bound to the model, a
tool call answered with a ToolMessage, and a streamed follow-up."""

from __future__ import annotations

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

messages_mod = pytest.importorskip("langchain_core.messages", reason="langchain-core is not installed")
tools_mod = pytest.importorskip("langchain_core.tools", reason="langchain-core is not installed")


@tools_mod.tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return weather(city)


def _model(kind: str, at: Endpoint) -> Any:
    if kind == "openai":
        lc_openai = pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
        return lc_openai.ChatOpenAI(
            model=OPENAI_MODEL,
            base_url=at.openai_base_url,
            api_key=at.openai_key,
            max_retries=0,
            stream_usage=True,
        )
    if kind == "openai-responses":
        lc_openai = pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
        return lc_openai.ChatOpenAI(
            model=OPENAI_MODEL,
            base_url=at.openai_base_url,
            api_key=at.openai_key,
            max_retries=0,
            use_responses_api=True,
        )
    lc_anthropic = pytest.importorskip("langchain_anthropic", reason="langchain-anthropic is not installed")
    return lc_anthropic.ChatAnthropic(
        model=CLAUDE_MODEL,
        base_url=at.anthropic_base_url,
        api_key=at.anthropic_key,
        max_retries=0,
        max_tokens=400,
    )


def _conversation(kind: str) -> Any:
    def run(at: Endpoint) -> list[Any]:
        model = _model(kind, at).bind_tools([get_weather])
        system: Any = POLICY
        if kind == "anthropic":
            system = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
        history: list[Any] = [messages_mod.SystemMessage(system), messages_mod.HumanMessage(CITY_QUESTION)]
        first = model.invoke(history)
        call = first.tool_calls[0]
        history += [
            first,
            messages_mod.ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]),
        ]
        second = model.invoke(history)
        history += [second, messages_mod.HumanMessage(FOLLOW_UP)]
        chunks = list(model.stream(history))
        streamed = "".join(c.text if isinstance(c.text, str) else c.text() for c in chunks)
        usage = [c.usage_metadata for c in chunks if c.usage_metadata]
        answer = second.text if isinstance(second.text, str) else second.text()
        return [call["name"], call["args"], answer, streamed, bool(usage)]

    return run


@pytest.mark.parametrize("kind", ["openai", "openai-responses", "anthropic"])
def test_langchain_chat_model(live: Rig, kind: str) -> None:
    name, arguments, answer, streamed, has_usage = run_both(live, f"langchain-{kind}", _conversation(kind))
    assert name == "get_weather" and arguments == {"city": "example city"}
    assert answer and streamed and has_usage
