"""pydantic-ai: an agent with a tool on OpenAI Chat, OpenAI Responses and Anthropic models, a streamed
follow-up on its message history, and structured output (tool output and native JSON schema)."""

from __future__ import annotations

import asyncio
import typing
from typing import Any

import pytest
from pydantic import BaseModel
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

pydantic_ai = pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed")


class Forecast(BaseModel):
    city: str
    degrees: int
    sunny: bool


def get_weather(city: str) -> str:
    """The weather in a city."""
    return weather(city)


def _model(kind: str, at: Endpoint) -> tuple[Any, Any]:
    """The model, and the SDK client it uses (closed by the caller: its sockets are the test's)."""
    if kind == "anthropic":
        import anthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        claude = anthropic.AsyncAnthropic(api_key=at.anthropic_key, base_url=at.anthropic_base_url)
        return AnthropicModel(CLAUDE_MODEL, provider=AnthropicProvider(anthropic_client=claude)), claude
    import openai
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai.AsyncOpenAI(base_url=at.openai_base_url, api_key=at.openai_key, max_retries=0)
    cls = OpenAIResponsesModel if kind == "openai-responses" else OpenAIChatModel
    return cls(OPENAI_MODEL, provider=OpenAIProvider(openai_client=client)), client


def _conversation(kind: str) -> Any:
    def run(at: Endpoint) -> list[Any]:
        async def go() -> list[Any]:
            model, client = _model(kind, at)
            agent = pydantic_ai.Agent(model, instructions=POLICY, tools=[get_weather])
            first = await agent.run(CITY_QUESTION)
            calls = [
                part.tool_name
                for message in first.all_messages()
                for part in getattr(message, "parts", [])
                if part.part_kind == "tool-call"
            ]
            async with agent.run_stream(FOLLOW_UP, message_history=first.all_messages()) as stream:
                deltas = [d async for d in stream.stream_text(delta=True)]
            tool_out = pydantic_ai.Agent(model, instructions=POLICY, output_type=Forecast)
            forecast = (await tool_out.run("The forecast for Paris as data.")).output
            native = pydantic_ai.Agent(
                model, instructions=POLICY, output_type=pydantic_ai.NativeOutput(Forecast)
            )
            natively = (await native.run("The forecast for Paris as JSON.")).output
            await client.close()
            return [calls, first.output, "".join(deltas), forecast, natively]

        return asyncio.run(go())

    return run


def _anthropic_incompatible() -> str | None:
    """Why pydantic-ai cannot build Anthropic requests with the installed SDK, if it cannot.

    pydantic-ai (2.38) constructs ``BetaMessageParam(role=..., content=...)``; newer anthropic SDKs
    (2.x) made that name a Union of TypedDicts, which cannot be instantiated. That is between the two
    libraries, before any request is sent, so the proxy has nothing to do with it.
    """
    from anthropic.types.beta import BetaMessageParam

    if typing.get_origin(BetaMessageParam) is typing.Union:
        return "pydantic-ai cannot call this anthropic SDK (BetaMessageParam is a Union)"
    return None


@pytest.mark.parametrize("kind", ["openai", "openai-responses", "anthropic"])
def test_pydantic_ai_agent(live: Rig, kind: str) -> None:
    why = _anthropic_incompatible() if kind == "anthropic" else None
    if why is not None:
        pytest.skip(why)
    calls, answer, streamed, forecast, natively = run_both(live, f"pydantic-ai-{kind}", _conversation(kind))
    assert calls == ["get_weather"] and answer and streamed
    assert isinstance(forecast, Forecast) and isinstance(natively, Forecast)
