"""Structured outputs: the JSON schema a request asks its answer to follow, and a value that fits it.

Where each API puts the schema:

- OpenAI Chat: ``response_format: {"type": "json_schema", "json_schema": {"schema": …}}``, or
  ``{"type": "json_object"}`` (JSON mode: any object; the schema, if any, is in the prompt text).
- OpenAI Responses: ``text.format: {"type": "json_schema", "schema": …}`` or ``{"type": "json_object"}``.
- Anthropic: ``output_config.format`` (and the beta ``output_format``):
  ``{"type": "json_schema", "schema": …}``.

In JSON mode the libraries that want a shape (instructor's JSON modes) describe it in a message as
a JSON schema, so the emulator looks for the largest JSON object with ``properties`` in the
prompt's text and answers a value of that; with none it answers ``{}``. Without any output format,
a prompt that says "JSON" and holds a schema gets a value of it too (as a model would comply).

``example_value`` builds a small value that validates against a schema (Draft 2020-12 / OpenAPI
subset the SDKs emit: ``$ref`` / ``$defs``, ``allOf`` / ``anyOf`` / ``oneOf``, enums, consts,
required properties, array and string bounds, numeric bounds, common string formats). It is
deterministic: the same schema always gets the same value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from cachewarden.proxy.engine.prompt import Provider

_MAX_DEPTH = 12
_MAX_SCANNED_OBJECTS = 2_000
_FORMATS = {
    "date-time": "2026-01-01T00:00:00Z",
    "date": "2026-01-01",
    "time": "00:00:00Z",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "hostname": "example.com",
    "duration": "P1D",
}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def requested_format(
    provider: Provider, body: Mapping[str, Any]
) -> tuple[str, Mapping[str, Any] | None] | None:
    """("json_schema", schema) or ("json_object", None) when the request asks for JSON, else None."""
    if provider == "openai-chat":
        fmt = _mapping(body.get("response_format"))
        schema = _mapping(fmt.get("json_schema")).get("schema")
    elif provider == "openai-responses":
        fmt = _mapping(_mapping(body.get("text")).get("format"))
        schema = fmt.get("schema")
    else:
        fmt = _mapping(_mapping(body.get("output_config")).get("format")) or _mapping(
            body.get("output_format")
        )
        schema = fmt.get("schema")
    kind = fmt.get("type")
    if kind == "json_schema":
        return "json_schema", schema if isinstance(schema, Mapping) else {}
    if kind == "json_object":
        return "json_object", None
    return None


def _texts(value: Any) -> Iterator[str]:
    """Every string in a request's messages (system prompt, message texts, content blocks)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def schema_in_prompt(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The largest JSON object with ``properties`` written in the prompt's text (JSON mode)."""
    decoder = json.JSONDecoder()
    best: Mapping[str, Any] | None = None
    best_size = 0
    scanned = 0
    sources = [body.get(k) for k in ("system", "instructions", "messages", "input")]
    for text in _texts(sources):
        if '"properties"' not in text:
            continue
        start = text.find("{")
        while start != -1 and scanned < _MAX_SCANNED_OBJECTS:
            scanned += 1
            try:
                value, end = decoder.raw_decode(text, start)
            except ValueError:
                start = text.find("{", start + 1)
                continue
            if isinstance(value, dict) and "properties" in value and end - start > best_size:
                best, best_size = value, end - start
            start = text.find("{", end)
    return best


def prompted_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A schema the prompt itself asks the answer to follow: a text that says "JSON" and holds a
    JSON schema (instructor's JSON modes on Anthropic, pydantic-ai's prompted output)."""
    sources = [body.get(k) for k in ("system", "instructions", "messages", "input")]
    if not any("json" in text.lower() and '"properties"' in text for text in _texts(sources)):
        return None
    return schema_in_prompt(body)


def answer_schema(provider: Provider, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The schema the answer must follow, or None for a prose answer."""
    found = requested_format(provider, body)
    if found is None:
        return prompted_schema(body)
    kind, schema = found
    if kind == "json_schema":
        return schema or {}
    return schema_in_prompt(body) or {"type": "object"}


# -- values --------------------------------------------------------------------------------------------


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        node = _mapping(node).get(part.replace("~1", "/").replace("~0", "~"))
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    return {**_mapping(node), **rest}


def _merged_all_of(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return schema
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in parts:
        sub = _resolve(_mapping(part), root)
        for key, value in sub.items():
            if key == "properties":
                merged["properties"] = {**_mapping(merged.get("properties")), **_mapping(value)}
            elif key == "required":
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def _string(schema: Mapping[str, Any], name: str) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    text = f"example {name}"
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(text) < low:
        text = text + "x" * (low - len(text))
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    return text


def _number(schema: Mapping[str, Any], integer: bool) -> int | float:
    value: float = 1 if integer else 1.5
    low = schema.get("minimum")
    low_ex = schema.get("exclusiveMinimum")
    high = schema.get("maximum")
    high_ex = schema.get("exclusiveMaximum")
    if isinstance(low, int | float) and value < low:
        value = low
    if isinstance(low_ex, int | float) and value <= low_ex:
        value = low_ex + 1 if integer else low_ex + 0.5
    if isinstance(high, int | float) and value > high:
        value = high
    if isinstance(high_ex, int | float) and value >= high_ex:
        value = (
            high_ex - 1 if integer else (high_ex + (low if isinstance(low, int | float) else high_ex - 1)) / 2
        )
    return int(value) if integer else float(value)


def example_value(schema: Any, name: str = "value", depth: int = 0, root: Any = None) -> Any:
    """A small value that fits a JSON schema (enum / const first, then by type)."""
    root = schema if root is None else root
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return f"example {name}"
    schema = _merged_all_of(_resolve(schema, _mapping(root)), _mapping(root))
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if "default" in schema and schema.get("type") is None:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            # The first option that is not null: a value, not an absence.
            chosen = next((o for o in options if _mapping(o).get("type") != "null"), options[0])
            return example_value(chosen, name, depth + 1, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and isinstance(schema.get("properties"), Mapping)):
        props = _mapping(schema.get("properties"))
        out = {k: example_value(v, k, depth + 1, root) for k, v in props.items()}
        required = schema.get("required")
        for key in required if isinstance(required, list) else []:
            if isinstance(key, str) and key not in out:
                out[key] = f"example {key}"
        return out
    if kind == "array":
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list):
            return [example_value(p, name, depth + 1, root) for p in prefix]
        count = schema.get("minItems")
        count = max(1, count) if isinstance(count, int) else 1
        high = schema.get("maxItems")
        if isinstance(high, int):
            count = min(count, high)
        return [example_value(schema.get("items"), name, depth + 1, root) for _ in range(count)]
    if kind == "integer":
        return _number(schema, integer=True)
    if kind == "number":
        return _number(schema, integer=False)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema, name)
