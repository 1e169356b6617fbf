"""A one-line description or title is stripped before it becomes a `//` comment (rendering._comment).

Each line of a multi-line description already was; the one-line case showed up on the dev half of
the cassettes: openai-agents' handoff tools end their description in a space, and each such first
turn was one token over with it (gpt-4o, Responses) and exact without it.
"""

from __future__ import annotations

import pytest
from cachewarden.proxy.engine.rendering import render_function
from cassette_counts import counted

CASSETTES = {
    "music-handoff": "traceloop/openllmetry:packages/opentelemetry-instrumentation-openai-agents/tests/"
    "cassettes/test_openai_agents/test_music_composer_handoff_hierarchy.yaml#1",
    "recipe-handoff": "traceloop/openllmetry:packages/opentelemetry-instrumentation-openai-agents/tests/"
    "cassettes/test_recipe_agents_hierarchy/test_recipe_agents_hierarchy.yaml#0",
}


def test_surrounding_whitespace_is_not_rendered() -> None:
    params = {"type": "object", "properties": {"q": {"type": "string", "description": " the query "}}}
    spaced = render_function({"name": "f", "description": "Hand off. ", "parameters": params})
    assert spaced == render_function(
        {
            "name": "f",
            "description": "Hand off.",
            "parameters": {**params, "properties": {"q": {"type": "string", "description": "the query"}}},
        }
    )
    assert spaced.startswith("// Hand off.\ntype f = (_: {\n// the query\nq?: string,\n")


@pytest.mark.parametrize("case", sorted(CASSETTES))
def test_cassettes(case: str) -> None:
    got, reported = counted(CASSETTES[case])
    assert got == reported
