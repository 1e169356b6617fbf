"""How the provider renders the parts of a request that are not plain text, before tokenizing them.

OpenAI turns tool definitions into a TypeScript-like namespace and json_schema output formats into a
"# Response Formats" section; Anthropic adds a structured-output schema as indented JSON. The
counter (``counting``) tokenizes these renderings; the framing tokens around them live there too.

This module is long because every rendering rule keeps its evidence (the records, the public source)
in a comment beside it, and the rules of one rendering only make sense read together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .prompt import Prompt

# Tool definitions → TypeScript-like text (OpenAI). The template is not public; the rules below follow
# openai/harmony's renderer (src/encoding.rs, the public reference for the gpt-oss prompt format) and
# were checked against recorded usage (bench/bench_counting.py, training split): a property's `title`
# and then its `description` become `//` comment lines above it, nested object properties are
# indented, a `default` trails as `// default: …` (chatml: under a comment line only). A multi-line
# description gets `// ` on every line (as in harmony), but the recorded counts only fit once blank
# lines are dropped and each line is stripped: a 160-line markdown description then lands within 2
# tokens (of ~3,700), a docstring with "Args:" / indented lines within 1 (raw text: 17 and 7 off;
# harmony's lines as they are: 118 and 20).


def _comment(text: str, pad: str) -> str:
    """A title or description as `//` comment lines above what it describes.

    A one-line text is stripped too, as each line of a longer one is: openai-agents' handoff tools
    ("Handoff to the ... agent to handle the request. ", a trailing space) were one token over with
    the space and exact without it (gpt-4o, two cassettes of the dev half, record cases in
    tests/engine/test_counting_descriptions.py).
    """
    if "\n" not in text:
        return f"{pad}// {text.strip()}\n"
    return "".join(f"{pad}// {line.strip()}\n" for line in text.split("\n") if line.strip())


def _ts_type(
    schema: Any, indent: int, *, direct: bool = False, legacy: bool = False, bare_defaults: bool = False
) -> str:
    """``direct``: the value of a property (not array items or a $defs type); ``legacy``: a function of
    the legacy ``functions`` list, ``bare_defaults``: the harmony dialect's defaults (see _ts_props)."""
    if not isinstance(schema, Mapping):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(
                _ts_type(s, indent, legacy=legacy, bare_defaults=bare_defaults) for s in schema[key]
            )
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join("number" if k == "integer" else str(k) for k in kind)
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return "any[]"
        return f"{_ts_type(items, indent, legacy=legacy, bare_defaults=bare_defaults)}[]"
    if kind == "object":
        if not isinstance(schema.get("properties"), Mapping) or not schema["properties"]:
            return "object"
        flat = direct and not legacy
        return (
            "{\n"
            + _ts_props(schema, indent + 1, flat=flat, legacy=legacy, bare_defaults=bare_defaults)
            + ("" if flat else "  " * indent)
            + "}"
        )
    if kind in ("integer", "number"):
        return "number"
    if kind in ("string", "boolean", "null"):
        return str(kind)
    return "any"


def _ts_props(
    schema: Mapping[str, Any],
    indent: int,
    *,
    flat: bool = False,
    legacy: bool = False,
    bare_defaults: bool = False,
) -> str:
    """Property lines, each ending in a newline (the caller closes the brace).

    ``flat``: the properties of an object that is itself a property's value, which OpenAI renders
    without indentation (o200k, both APIs, both dialects: every such request outside the final halves
    was over by 3 per described and 2 per bare nested property, and is exact without the indentation:
    sublayer's four generator specs, ruby_llm's gpt-5-nano object params; the items of an array and
    a $defs type keep theirs, which those records need). The legacy ``functions`` list keeps it
    (hmarr/openai-chat-tokens' API-measured nested case, gpt-3.5-turbo)."""
    required = set(schema.get("required") or [])
    pad = "" if flat else "  " * indent
    out: list[str] = []
    for key, value in schema["properties"].items():
        prop: Mapping[str, Any] = value if isinstance(value, Mapping) else {}
        # Recorded usage: a title costs its comment line whether or not a description follows
        # (e.g. pydantic's "title": "Value" beside "description": "Value to count"), but only on the
        # parameters themselves: titles inside a nested object or a $defs type are not rendered.
        comments = ""
        if indent == 0 and isinstance(prop.get("title"), str) and prop["title"]:
            comments += _comment(prop["title"], pad)
        if isinstance(prop.get("description"), str) and prop["description"]:
            comments += _comment(prop["description"], pad)
        out.append(comments)
        default = ""
        # A default trails its property only when a comment line is above it (the chatml dialect;
        # ``bare_defaults``: harmony writes it anyway, as gpt-oss's and leaked ChatGPT tools show;
        # no harmony record has a bare default). pydantic-ai's MCP get_error (`value?: boolean`,
        # "default": false, no title or description) made its 8 gpt-4o requests outside the final
        # halves (dbos / prefect / temporal complex_agent_run) exactly 5 over, the tokens of
        # " // default: false"; every commented property's default is exact as a trailer (string and
        # null defaults, strict and not, required and optional, both APIs). The records cannot tell
        # this apart from "a boolean default is not written" (get_error's is the only one of either
        # kind): the rule on the structure is kept.
        if "default" in prop and (comments or bare_defaults):
            default = f" // default: {json.dumps(prop['default'], ensure_ascii=False)}"
        optional = "" if key in required else "?"
        kind = _ts_type(prop, indent, direct=True, legacy=legacy, bare_defaults=bare_defaults)
        out.append(f"{pad}{key}{optional}: {kind},{default}\n")
    return "".join(out)


# The tool dialects that write a parameter's default beside it when no comment line is above it
# (_ts_props explains why chatml does not).
BARE_DEFAULTS = frozenset({"harmony"})


def render_function(fn: Mapping[str, Any], dialect: str = "chatml", *, legacy: bool = False) -> str:
    """One function definition as OpenAI renders it into the system prompt (no trailing blank line).

    ``dialect`` is the framing's tool_dialect: "harmony" (gpt-5) leaves out the parameters' title.
    ``legacy``: the function came in the legacy ``functions`` list (nested objects stay indented).
    """
    head = (
        _comment(fn["description"], "")
        if isinstance(fn.get("description"), str) and fn["description"]
        else ""
    )
    params = fn.get("parameters")
    name = fn.get("name", "")
    if isinstance(params, Mapping) and isinstance(params.get("properties"), Mapping) and params["properties"]:
        # A description of the parameters object itself is a comment between "(_: " and its brace
        # (harmony's object rendering; recorded gpt-5.2 / 5.4 requests match it to the token). Its
        # title is one more comment line there, before the description, as a parameter's title is
        # above the parameter: openai-agents sends "title": "<name>_args" and every such request was
        # short by exactly the tokens of "// <title>\n" (cassettes, dev half: gpt-4o, 4o-mini, 4.1;
        # cases by record id in tests/engine/test_counting_schema_titles.py). No gpt-5 record has
        # such a title; harmony's renderer (the public reference) writes an object's description
        # only, so the harmony dialect does too.
        keys = ("description",) if dialect == "harmony" else ("title", "description")
        lead = "".join(
            _comment(params[key], "") for key in keys if isinstance(params.get(key), str) and params[key]
        )
        props = _ts_props(params, 0, legacy=legacy, bare_defaults=dialect in BARE_DEFAULTS)
        body = f"type {name} = (_: {lead}{{\n{props}}}) => any;"
    else:
        body = f"type {name} = () => any;"
    lines = [head + body]
    if isinstance(params, Mapping) and isinstance(params.get("$defs"), Mapping):
        lines.extend(
            f"type {k} = {_ts_type(v, 0, legacy=legacy, bare_defaults=dialect in BARE_DEFAULTS)};"
            for k, v in params["$defs"].items()
        )
    return "\n".join(lines)


_NOT_JSON = object()


def _parsed(text: str, otherwise: Any = _NOT_JSON) -> Any:
    """``text`` as JSON, or ``otherwise`` where it is not JSON (or nests past the parser's depth)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return otherwise


def compact_json(text: str) -> str:
    """A call's arguments as Chat Completions renders them (framing.compact_arguments): the JSON
    re-serialised without spaces, keys in the order sent; text that is not JSON stays as it is."""
    value = _parsed(text)
    return text if value is _NOT_JSON else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# Parallel calls in Chat Completions (4o / 4.1 era, framing.parallel_wrapper): an assistant message with
# several tool_calls is rendered as ONE call to OpenAI's wrapper tool, "assistant to=multi_tool_use.parallel"
# with {"tool_uses":[{"recipient_name":"functions.NAME","parameters":ARGS},...]} as compact JSON (the
# arguments parsed), and the tool messages that answer it as ONE message authored by the wrapper, whose
# content is the results as a JSON array with ", " between them: a string result as a JSON string, a
# result that is itself a JSON object or array as that value, dumped with Python's defaults (", ", ": ",
# non-ASCII escaped). The wrapper is public knowledge (community.openai.com "parallel tool use
# documentation for API models": billed as input; it leaks as multi_tool_use.parallel / tool_uses /
# recipient_name in vercel/ai#19067, Azure/azure-rest-api-specs#32329); the layout of its JSON and of the
# merged results was found on the records outside the final halves, where one call per message was
# exact but every two-call turn was 7 to 61 tokens under (gpt-4o, 4o-mini, 4.1-nano; Mirascope, crewAI,
# pydantic-ai, otel, ellmer, activeagent): with it all are exact but 5 that are 5 over, as their
# cassettes' first requests before any call, and one 87k-character outlier (bench_counting_rules.py
# prints the counts). Cases by record id in tests/engine/test_counting_parallel_calls.py.
PARALLEL_RECIPIENT = " to=multi_tool_use.parallel"
PARALLEL_AUTHOR = "multi_tool_use.parallel"


def parallel_call_piece(name: str, arguments: str, *, first: bool, last: bool) -> str:
    """One call's part of the wrapper's JSON: the opening ``{"tool_uses":[`` before the first, a comma
    before the others, ``]}`` after the last."""
    item = json.dumps(
        {"recipient_name": "functions." + name, "parameters": _parsed(arguments, arguments)},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return ('{"tool_uses":[' if first else ",") + item + ("]}" if last else "")


def parallel_result_piece(text: str, *, first: bool, last: bool, ascii_strings: bool = False) -> str:
    """One result's part of the merged results array. ``ascii_strings``: string results with
    non-ASCII escaped (the cl100k models' rendering: gpt-3.5-turbo's one parallel-call record with an
    emoji result is exact so, and 12 under without)."""
    value = _parsed(text, text)
    if isinstance(value, (dict, list)):
        item = json.dumps(value)
    else:
        item = json.dumps(text, ensure_ascii=ascii_strings)
    return ("[" if first else ", ") + item + ("]" if last else "")


def _first_property(fn: Mapping[str, Any]) -> Mapping[str, Any] | None:
    params = fn.get("parameters")
    props = params.get("properties") if isinstance(params, Mapping) else None
    if not isinstance(props, Mapping) or not props:
        return None
    first = next(iter(props.values()))
    return first if isinstance(first, Mapping) else {}


# Counts that no rendering we know reproduces, measured on recorded usage (cases by record id in
# tests/engine/test_counting_tool_rules.py). With o200k, a function whose first parameter has
# neither title nor description costs one token less than its text (the 9 first turns with such
# functions and nothing else unmodelled were one over per such function: gpt-4o, 4o-mini, 4.1-mini,
# both APIs; gpt-5-mini's too); with a comment line above the first parameter the text is exact.
# o200k's pre-tokenizer joins " {\n//" into one piece (cl100k's does not), so the renderer's text
# must differ just there; with cl100k the legacy `functions` format is exact either way
# (hmarr/openai-chat-tokens' API-measured gpt-3.5-turbo cases), but `tools` are one less with a bare
# first parameter too (every such gpt-3.5-turbo-0125 request outside the final halves was over
# without it: one over, openllmetry test_finish_reason_tool_calls_mapped_correctly#0 and four
# instructor-rb specs; two over, dd-apm-test-agent's ebff79da#0 with a call to a function named "0";
# those with a commented first parameter were exact).
# In the harmony format (gpt-5*) a function without a description costs one less too, on top of
# the first-parameter rule: without parameters ("type f = () => any;" alone) on 20 first turns of
# gpt-5-mini, with a bare first parameter on gpt-5.5 (held-out dev, test_openai_responses_phase_live#0:
# 2 less in all); with a description it is exact (5 turns of gpt-5).
def tool_correction(
    fn: Mapping[str, Any], dialect: str = "chatml", tokenizer: str = "o200k_base", *, legacy: bool = False
) -> int:
    """Tokens the provider counts for a function beyond (< 0: below) the tokens of its rendered text;
    ``legacy``: the function came in the legacy ``functions`` list, not in ``tools``."""
    described = isinstance(fn.get("description"), str) and bool(fn["description"])
    undescribed = -1 if dialect == "harmony" and not described else 0
    first = _first_property(fn)
    if first is None:
        return undescribed
    commented = any(isinstance(first.get(k), str) and first[k] for k in ("title", "description"))
    # cl100k: only the legacy `functions` format is exact with a bare first parameter (see above).
    exact = commented or (tokenizer != "o200k_base" and legacy)
    return undescribed + (0 if exact else -1)


# Structured outputs. OpenAI: the json_schema format as a "# Response Formats" section (harmony's
# layout: "## NAME", the format's description as a comment, then the schema) with the schema as
# compact JSON in its own key order, non-ASCII escaped, with titles and descriptions but without what
# strict mode implies or does not enforce: additionalProperties, required, default and the validation
# keywords (minimum, maxItems, pattern, ...). A strict format also addresses the assistant's answers
# to it (framing.strict_format_turn; strict_format_name). Of the JSON variants tried on the training
# split (each keyword dropped or kept, both separators, ASCII escapes or not, sorted keys, TypeScript
# types, with and without the header) this one with the strict rule fits every Chat Completions record
# outside the final halves (182 training, 12 dev; before it 140 and 8): crewAI's StepObservation was
# 6 and 12 short only for its em-dashes, ASCII-escaped (the escaping applies to every API's section:
# only Chat Completions records on 4o have a schema with non-ASCII text). A leaked gpt-4.1 system message
# (ghost.ai.moda, "OpenAI Internals: Structured Outputs to System Prompts") shows the same section:
# compact JSON in the user's key order, without required, additionalProperties or strict.
# Anthropic (output_format / output_config.format): the schema as indented JSON plus schema_once; it
# is not a segment (the adapter keeps it in params), so its tokens are TokenizedPrompt.hidden.
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SCHEMA_ANNOTATIONS = frozenset(
    {
        "additionalProperties",
        "required",
        "default",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minLength",
        "maxLength",
        "pattern",
        "format",
    }
)


def _strip_annotations(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strip_annotations(v) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_ANNOTATIONS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: _strip_annotations(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_annotations(value)
    return out


def _format_holder(text: str) -> Mapping[str, Any] | None:
    """What holds a json_schema format's name, schema and strictness: chat's ``json_schema`` object,
    or the format itself (Responses' ``text.format``)."""
    spec = _parsed(text, None)
    holder = spec.get("json_schema", spec) if isinstance(spec, Mapping) else None
    return holder if isinstance(holder, Mapping) else None


def render_response_format(text: str) -> str | None:
    """A json_schema response format (chat ``response_format`` / Responses ``text.format``) as rendered."""
    holder = _format_holder(text)
    if holder is None:
        return None
    head = f"# Response Formats\n\n## {holder.get('name') or ''}\n\n"
    if holder.get("description"):
        head += f"// {holder['description']}\n"
    schema = _strip_annotations(holder.get("schema", {}))
    return head + json.dumps(schema, separators=(",", ":"))


def strict_format_name(text: str) -> str | None:
    """The name of a json_schema response format sent with ``strict: true`` (None for any other).

    Chat Completions (4o / 4.1) addresses the assistant's answers to a strict format: each earlier
    assistant message with text and the reply cost the format's name plus strict_format_turn, the
    section strict_format_section less (framing.py). Every strict first turn outside the final halves
    is short by the name's tokens less 2 without it (Reason, Invoice, Book: one-token names, 1 over;
    FentanylHandbook 3 short, TaskEvaluationPydanticOutput 4), and every later turn by name + 2 per
    earlier answer (crewAI's ScoreOutput, Mirascope's int resumed). The nullable-union cost this
    replaces (3 a union) was LLMGuardrailResult's five-token name and StepObservation's em-dashes."""
    holder = _format_holder(text)
    if holder is None or holder.get("strict") is not True:
        return None
    name = holder.get("name")
    return name if isinstance(name, str) else ""


def param_object(prompt: Prompt, name: str) -> Mapping[str, Any]:
    raw = prompt.param(name)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, Mapping) else {}


def anthropic_output_schema(prompt: Prompt) -> str | None:
    """The structured-output schema of an Anthropic request as indented JSON, if it has one."""
    fmt = param_object(prompt, "output_format") or param_object(prompt, "output_config").get("format")
    if not isinstance(fmt, Mapping) or not isinstance(fmt.get("schema"), Mapping):
        return None
    return json.dumps(fmt["schema"], ensure_ascii=False, indent=2)


def function_of(text: str) -> Mapping[str, Any] | None:
    """The function definition in a tool segment's JSON (chat nests it under "function"), if any."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, Mapping) and isinstance(value.get("function"), Mapping):
        value = value["function"]
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        return value
    return None


TOOLS_HEAD = "# Tools\n\n## functions\n\nnamespace functions {\n\n"
TOOLS_TAIL = "} // namespace functions"


def render_additional_tools(text: str) -> str | None:
    """A Responses ``additional_tools`` input item (tools added mid-conversation) as a tools section.

    None when ``text`` is not such an item. The section is rendered as the request's own tools are;
    what the provider adds around it is ADDITIONAL_TOOLS_EXTRA (framing, measured).
    """
    if '"additional_tools"' not in text:
        return None
    try:
        item = json.loads(text)
    except ValueError:
        return None
    if not isinstance(item, Mapping) or item.get("type") != "additional_tools":
        return None
    tools = item.get("tools")
    functions = [t for t in tools if isinstance(t, Mapping)] if isinstance(tools, list) else []
    # Measured on gpt-5 (harmony) records only.
    body = "".join(
        render_function(fn, "harmony") + "\n\n" for fn in functions if isinstance(fn.get("name"), str)
    )
    return TOOLS_HEAD + body + TOOLS_TAIL
