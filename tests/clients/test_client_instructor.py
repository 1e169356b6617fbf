"""instructor: structured extraction in its tool modes and its JSON modes, on OpenAI and Anthropic,
a second turn on the first's answer, and a streamed partial object."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from support import CLAUDE_MODEL, OPENAI_MODEL, POLICY, Endpoint, Rig, run_both

instructor = pytest.importorskip("instructor", reason="instructor is not installed")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")


class Forecast(BaseModel):
    city: str
    degrees: int
    sunny: bool


MODES = {
    "openai-tools": ("openai", "TOOLS"),
    "openai-json": ("openai", "JSON"),
    "openai-json-schema": ("openai", "JSON_SCHEMA"),
    "anthropic-tools": ("anthropic", "ANTHROPIC_TOOLS"),
    "anthropic-json": ("anthropic", "ANTHROPIC_JSON"),
}


def _conversation(name: str) -> Any:
    family, mode_name = MODES[name]
    mode = getattr(instructor.Mode, mode_name)

    def run(at: Endpoint) -> list[Any]:
        if family == "openai":
            raw: Any = openai.OpenAI(api_key=at.openai_key, base_url=at.openai_base_url, max_retries=0)
            client = instructor.from_openai(raw, mode=mode)
            model: dict[str, Any] = {"model": OPENAI_MODEL}
        else:
            raw = anthropic.Anthropic(api_key=at.anthropic_key, base_url=at.anthropic_base_url, max_retries=0)
            client = instructor.from_anthropic(raw, mode=mode)
            model = {"model": CLAUDE_MODEL, "max_tokens": 400}
        # Anthropic caches only at breakpoints: the system prompt carries one, as a user would put it.
        system: Any = POLICY
        if family == "anthropic":
            system = [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
        messages: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": "The forecast for Paris."},
        ]
        first = client.chat.completions.create(
            response_model=Forecast, messages=messages, max_retries=0, **model
        )
        messages += [
            {"role": "assistant", "content": first.model_dump_json()},
            {"role": "user", "content": "And for Lyon?"},
        ]
        second = client.chat.completions.create(
            response_model=Forecast, messages=messages, max_retries=0, **model
        )
        partials = list(
            client.chat.completions.create_partial(
                response_model=Forecast, messages=messages, max_retries=0, **model
            )
        )
        raw.close()
        # Dumps: instructor keeps the raw completion (with its random id) on the objects it returns.
        assert isinstance(first, Forecast) and isinstance(second, Forecast)
        return [first.model_dump(), second.model_dump(), partials[-1].model_dump()]

    return run


@pytest.mark.parametrize("name", list(MODES))
def test_instructor_extraction(live: Rig, name: str) -> None:
    first, second, last_partial = run_both(live, f"instructor-{name}", _conversation(name))
    assert Forecast.model_validate(first) and last_partial == second
