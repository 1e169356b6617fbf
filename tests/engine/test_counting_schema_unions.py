"""A nullable union (``anyOf`` with a ``{"type": "null"}`` member) in a json_schema response format
costs 3 tokens beyond its JSON (rendering.response_format_correction).

Found on the training split of ../shared/data/recorded: crewAI's LLMGuardrailResult (one union, 11
first-turn requests, gpt-4o and gpt-4.1-mini) was short by exactly 3 and StepObservation (two unions,
21 requests, gpt-4o-mini) by exactly 6. The rule's own cases; the counted records are in
test_counting_schema_union_records.py.
"""

from __future__ import annotations

import json

from cachewarden.proxy.engine.rendering import NULLABLE_UNION, response_format_correction


def _format(schema: dict[str, object], chat: bool = True) -> str:
    if chat:
        return json.dumps(
            {"type": "json_schema", "json_schema": {"name": "R", "schema": schema, "strict": True}}
        )
    return json.dumps({"type": "json_schema", "name": "R", "schema": schema, "strict": True})


def test_nullable_unions_are_counted_where_they_are() -> None:
    nullable = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    either = {"anyOf": [{"type": "string"}, {"type": "number"}]}
    flat = {"type": "object", "properties": {"a": nullable, "b": either, "c": {"type": "string"}}}
    assert response_format_correction(_format(flat)) == NULLABLE_UNION
    assert response_format_correction(_format(flat, chat=False)) == NULLABLE_UNION
    nested = {
        "type": "object",
        "properties": {"a": nullable, "items": {"type": "array", "items": {"$ref": "#/$defs/T"}}},
        "$defs": {"T": {"type": "object", "properties": {"x": nullable}}},
    }
    assert response_format_correction(_format(nested)) == 2 * NULLABLE_UNION
    assert response_format_correction(_format({"type": "object", "properties": {"b": either}})) == 0
    assert response_format_correction("not json") == 0
