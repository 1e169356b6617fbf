"""The OpenAI Agents SDK (``openai-agents``): an agent with a function tool, on the Responses and the
Chat Completions models, one turn run to completion and a streamed follow-up on its history."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support import CITY_QUESTION, FOLLOW_UP, OPENAI_MODEL, POLICY, Endpoint, Rig, run_both, weather

agents = pytest.importorskip("agents", reason="openai-agents is not installed")
openai = pytest.importorskip("openai")


@agents.function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return weather(city)


def _conversation(api: str) -> Any:
    def run(at: Endpoint) -> list[Any]:
        async def go() -> list[Any]:
            client = openai.AsyncOpenAI(api_key=at.openai_key, base_url=at.openai_base_url, max_retries=0)
            if api == "responses":
                model: Any = agents.OpenAIResponsesModel(model=OPENAI_MODEL, openai_client=client)
            else:
                model = agents.OpenAIChatCompletionsModel(model=OPENAI_MODEL, openai_client=client)
            agent = agents.Agent(name="support", instructions=POLICY, tools=[get_weather], model=model)
            config = agents.RunConfig(tracing_disabled=True)
            first = await agents.Runner.run(agent, CITY_QUESTION, run_config=config)
            history = [*first.to_input_list(), {"role": "user", "content": FOLLOW_UP}]
            streamed = agents.Runner.run_streamed(agent, history, run_config=config)
            deltas = [
                e.data.delta
                async for e in streamed.stream_events()
                if e.type == "raw_response_event"
                and getattr(e.data, "type", "") == "response.output_text.delta"
            ]
            calls = [i.raw_item.name for i in first.new_items if i.type == "tool_call_item"]  # type: ignore[union-attr]
            await client.close()
            return [calls, str(first.final_output), "".join(deltas), str(streamed.final_output)]

        return asyncio.run(go())

    return run


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_openai_agents(live: Rig, api: str) -> None:
    agents.set_tracing_disabled(True)
    calls, answer, deltas, final = run_both(live, f"agents-{api}", _conversation(api))
    assert calls == ["get_weather"] and answer
    assert deltas == final and final
