"""A parameter's default in the chatml tool rendering: written only beside a comment line.

Where the rule comes from is in proxy/engine/rendering.py (_ts_props). Record cases are from the
recorded data's held-out "dev" half (../shared/data/recorded, read in place; skipped where absent):
pydantic-ai's MCP toolset, whose get_error(value: bool = False) has no title or description. The
data-free tests spell the rendering out as text, so they check the renderer against the rule.
"""

from __future__ import annotations

import pytest
from cachewarden.proxy.engine.rendering import render_function
from recorded_counts import assert_count_exact

CASSETTES = "pydantic/pydantic-ai:tests/cassettes/"
RECORD_CASES = {
    # gpt-4o with a dozen tools, get_error among them: each was 5 over, " // default: false"
    "temporal-1": CASSETTES + "test_temporal/test_complex_agent_run.yaml#1",
    "temporal-2": CASSETTES + "test_temporal/test_complex_agent_run.yaml#2",
    "dbos-0": CASSETTES + "test_dbos/test_complex_agent_run_in_workflow.yaml#0",
    "dbos-2": CASSETTES + "test_dbos/test_complex_agent_run_in_workflow.yaml#2",
    "prefect-0": CASSETTES + "test_prefect/test_complex_agent_run_in_flow.yaml#0",
    "prefect-2": CASSETTES + "test_prefect/test_complex_agent_run_in_flow.yaml#2",
}

GET_ERROR = {
    "name": "get_error",
    "description": "",
    "parameters": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"value": {"default": False, "type": "boolean"}},
    },
}


@pytest.mark.parametrize("case", sorted(RECORD_CASES))
def test_recorded_bare_defaults_count_exactly(case: str) -> None:
    assert_count_exact(RECORD_CASES, case)


def test_a_bare_parameter_default_is_not_written() -> None:
    assert render_function(GET_ERROR) == "type get_error = (_: {\nvalue?: boolean,\n}) => any;"


def test_a_commented_parameter_keeps_its_default_trailer() -> None:
    fn = {
        "name": "f",
        "parameters": {
            "type": "object",
            "properties": {
                "unit": {"type": "string", "description": "The unit", "default": "celsius"},
                "named": {"title": "Named", "type": "boolean", "default": False},
                "bare": {"type": "number", "default": 3},
            },
        },
    }
    assert render_function(fn) == (
        "type f = (_: {\n"
        "// The unit\n"
        'unit?: string, // default: "celsius"\n'
        "// Named\n"
        "named?: boolean, // default: false\n"
        "bare?: number,\n"
        "}) => any;"
    )


def test_harmony_writes_a_bare_default_all_the_same() -> None:
    # gpt-oss's browser tool (openai/harmony's examples): `view_source?: boolean, // default: false`
    assert "value?: boolean, // default: false\n" in render_function(GET_ERROR, "harmony")
