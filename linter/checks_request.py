"""Request-body and tool-schema rules, on a positional JSON / YAML tree.

Only the cached prefix matters: tools and system instructions are re-sent on every request, so a
per-request literal there busts the cache; a UUID in the last user message does not. The same
checks serve the proxy on live bodies (``check_body``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from . import context as limits
from .context import Context
from .findings import Edit, Hit
from .frequency import message_args, severity
from .literals import find_literal
from .tokens import model_info
from .tree import Node

_VOLATILE_CODE = {"timestamp": "CW101", "unique-id": "CW102"}
_NOT_TEXT = frozenset({"system", "developer", "text", "ephemeral"})  # role, block type, cache_control
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("$defs", "definitions", "patternProperties")


@dataclass(slots=True)
class Block:
    """One cacheable block in Anthropic's order: a tool, a system block, a message content block."""

    node: Node
    where: str  # tools | system | messages
    path: str
    text: str


# Every top-level parameter of the chat / messages / responses APIs (and the SDKs' extras): a body
# with any other key is some other document that holds a conversation (a saved agent state, an
# eval case), which the providers would reject with a 400 if it were sent.
_REQUEST_PARAMS = frozenset(
    {"//", "$schema", "model", "messages", "input", "system", "instructions", "tools", "tool_choice"}
    | {"functions", "function_call", "max_tokens", "max_completion_tokens", "max_output_tokens"}
    | {"temperature", "top_p", "top_k", "n", "stream", "stream_options", "stop", "stop_sequences"}
    | {"presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "user"}
    | {"seed", "response_format", "text", "reasoning", "reasoning_effort", "metadata", "store"}
    | {"parallel_tool_calls", "previous_response_id", "include", "truncation", "service_tier"}
    | {"prompt_cache_key", "prompt_cache_retention", "safety_identifier", "modalities", "audio"}
    | {"prediction", "web_search_options", "thinking", "betas", "container", "mcp_servers"}
    | {"context_management", "anthropic_version", "anthropic_beta", "extra_headers", "extra_body"}
    | {"extra_query", "timeout", "verbosity", "background", "conversation", "prompt", "max_tool_calls"}
    | {"cache_control", "output_format", "output_config", "service_level", "top_a", "min_p"}
)
_CONVERSATION = ("messages", "input", "system", "instructions")


def document_kind(root: Node) -> str | None:
    """What a JSON / YAML file holds, by its shape: "request" (a body with a conversation and only
    request parameters), "tools" (tool definitions in a provider's format), else None (data that
    is never sent as it is: a server's tool list with ids, a saved agent state, a fixture)."""
    if root.kind == "array":
        return "tools" if _tools(root) else None
    if root.kind != "object":
        return None
    keys = {k for k, _, _ in root.members}
    if keys & set(_CONVERSATION):
        return "request" if keys <= _REQUEST_PARAMS else None
    listed = root.get("tools")
    if listed is not None and listed.kind == "array":
        # Tools in some other configuration (an agent's file): they are sent, so they are read.
        return "tools" if any(_provider_tool(t) for t in listed.items) else None
    return "tools" if _tools(root) else None


def provider_of(root: Node, model: str | None) -> str:
    if root.get("input") is not None and root.get("messages") is None:
        return "openai-responses"
    if (model or "").startswith("claude") or "anthropic" in (model or ""):
        return "anthropic"
    # A top-level `system` is Anthropic's format, unless the model is one the table knows under
    # another tokenizer (`gpt-4` with `system`: some other tool's document, not a Messages body).
    if root.get("system") is not None and (not model or model_info(model, "anthropic").tokenizer == "claude"):
        return "anthropic"
    return "openai-chat"


def _strings(node: Node) -> Iterator[Node]:
    if node.kind == "string":
        yield node
    for _, _, child in node.members:
        yield from _strings(child)
    for child in node.items:
        yield from _strings(child)


def _text(node: Node) -> str:
    return "\n".join(s.value for s in _strings(node))


def _provider_tool(node: Node) -> bool:
    """A tool as a provider takes it: OpenAI ``{"type": "function", "function": {...}}`` or the
    Responses flat form, Anthropic ``{"name", "input_schema"}`` or a server tool (``type`` + ``name``),
    legacy ``functions`` (``{"name", "parameters"}``). A server's own tool records (ids, source
    code, a ``json_schema`` field) are not."""
    if node.kind != "object":
        return False
    function = node.get("function")
    if function is not None and function.kind == "object":
        return True
    name = node.get("name")
    return (
        name is not None
        and name.kind == "string"
        and any(node.get(k) is not None for k in ("parameters", "input_schema", "type"))
    )


def _tools(root: Node) -> list[Node]:
    if root.kind == "array":
        return [t for t in root.items if _provider_tool(t)]
    tools = root.get("tools")
    if tools is not None and tools.kind == "array":
        return [t for t in tools.items if t.kind == "object"]
    if root.get("name") is not None and (root.get("input_schema") or root.get("parameters")):
        return [root]
    return []


def _system_nodes(root: Node, provider: str) -> list[tuple[str, Node]]:
    out: list[tuple[str, Node]] = []
    system = root.get("system") or root.get("instructions")
    if system is not None:
        blocks = system.items if system.kind == "array" else [system]
        out.extend((f"system[{i}]", b) for i, b in enumerate(blocks))
    messages = root.get("messages") or root.get("input")
    if messages is not None and messages.kind == "array":
        for i, msg in enumerate(messages.items):
            role = msg.get("role")
            if role is None or role.value not in ("system", "developer"):
                break  # only the leading instructions are re-sent unchanged on every request
            out.append((f"messages[{i}]", msg))
    return out


def check_body(ctx: Context, root: Node, source_text: str, fixable: bool) -> Iterator[Hit]:
    """All request / tool-schema rules for one parsed document."""
    if root.kind not in ("object", "array"):
        return
    model = root.get("model")
    if root.kind == "object" and model is not None and isinstance(model.value, str):
        ctx.model = model.value
    ctx.provider = provider_of(root, ctx.model) if root.kind == "object" else "openai-chat"
    tools = _tools(root)
    prefix = [(f"tools[{i}]", t) for i, t in enumerate(tools)]
    if root.kind == "object":
        prefix += _system_nodes(root, ctx.provider)
    # A value at the very end of the instructions, with only the new user message after it (a
    # single-turn request), busts nothing: no cached text follows it.
    single_turn = root.kind == "object" and _turns(root, ctx.provider) == 1
    for i, (_, node) in enumerate(prefix):
        tail = ctx if single_turn and i == len(prefix) - 1 else None
        yield from _volatile_literals(node, source_text, tail)
    for tool in tools:
        for schema in (
            tool.get("input_schema"),
            tool.get("parameters"),
            _get(tool, "function", "parameters"),
        ):
            if schema is not None:
                yield from _schema_order(schema, source_text, fixable)
    if root.kind == "object":
        for schema in (
            _get(root, "response_format", "json_schema", "schema"),
            _get(root, "text", "format", "schema"),
        ):
            if schema is not None:
                yield from _schema_order(schema, source_text, fixable)
        if ctx.provider == "anthropic" and root.get("messages") is not None:
            yield from _breakpoints(ctx, root, tools)


def _get(node: Node, *keys: str) -> Node | None:
    current: Node | None = node
    for key in keys:
        if current is None or current.kind != "object":
            return None
        current = current.get(key)
    return current


def _locate(node: Node, value: str, source_text: str) -> tuple[int, int]:
    at = source_text.find(value, node.start, node.end)
    return (at, at + len(value)) if at >= 0 else (node.start, node.end)


def _turns(root: Node, provider: str) -> int | None:
    """Messages after the leading system ones (None: no conversation in this file)."""
    messages = root.get("messages") or root.get("input")
    if messages is None:
        return None
    if messages.kind != "array":
        return 1  # Responses `input` as one string
    leading = sum(1 for label, _ in _system_nodes(root, provider) if label.startswith("messages"))
    return len(messages.items) - leading


def _volatile_literals(node: Node, source_text: str, tail: Context | None = None) -> Iterator[Hit]:
    """Clock and id literals; with ``tail`` (the node ends the cached prefix) one followed by less
    than a few tokens of its own string is at the very end, and not reported."""
    strings = list(_strings(node))
    for i, string in enumerate(strings):
        found = find_literal(string.value)
        if found is None or found.kind not in _VOLATILE_CODE:
            continue
        if tail is not None:
            later = "".join(s.value for s in strings[i + 1 :] if s.value not in _NOT_TEXT)
            if tail.tokens(string.value[found.end :] + later) < limits.VOLATILE_TAIL_TOKENS:
                continue
        literal = string.value[found.start : found.end]
        start, end = _locate(string, literal, source_text)
        args = {"value": literal, **message_args(found.frequency, "all following")}
        yield Hit(_VOLATILE_CODE[found.kind], start, end, args, severity=severity(found.frequency))


def _schema_order(schema: Node, source_text: str, fixable: bool) -> Iterator[Hit]:
    if schema.kind != "object":
        return
    props = schema.get("properties")
    if props is not None and props.kind == "object":
        keys = [k for k, _, _ in props.members]
        if keys != sorted(keys):
            key_start = next(ks for k, ks, v in schema.members if v is props)
            edits = (_sorted_members(props, source_text),) if fixable else ()
            yield Hit(
                "CW204", key_start, key_start + len('"properties"'), {"keys": ", ".join(keys[:6])}, edits
            )
        for _, _, child in props.members:
            yield from _schema_order(child, source_text, fixable)
    for key in ("items", "additionalProperties", "not", "if", "then", "else"):
        sub = schema.get(key)
        if sub is not None:
            yield from _schema_order(sub, source_text, fixable)
    for key in _SCHEMA_LISTS:
        listed = schema.get(key)
        for item in listed.items if listed is not None else []:
            yield from _schema_order(item, source_text, fixable)
    for key in _SCHEMA_MAPS:
        mapped = schema.get(key)
        for _, _, item in mapped.members if mapped is not None else []:
            yield from _schema_order(item, source_text, fixable)


def _sorted_members(obj: Node, text: str) -> Edit:
    """Reorder the members' own source text, keeping the separators (and so the indentation) in place."""
    spans = [(key_start, child.end) for _, key_start, child in obj.members]
    chunks = [text[a:b] for a, b in spans]
    seps = [text[spans[i][1] : spans[i + 1][0]] for i in range(len(spans) - 1)]
    order = sorted(range(len(chunks)), key=lambda i: obj.members[i][0])
    out = [chunks[order[0]]]
    for sep, i in zip(seps, order[1:], strict=True):
        out += [sep, chunks[i]]
    return Edit(spans[0][0], spans[-1][1], "".join(out))


def _blocks(root: Node, tools: list[Node]) -> list[Block]:
    blocks = [Block(t, "tools", f"tools[{i}]", _text(t)) for i, t in enumerate(tools)]
    system = root.get("system")
    if system is not None:
        for i, b in enumerate(system.items if system.kind == "array" else [system]):
            blocks.append(Block(b, "system", f"system[{i}]", _text(b)))
    messages = root.get("messages")
    for i, msg in enumerate(messages.items if messages is not None else []):
        content = msg.get("content")
        if content is None:
            continue
        for j, b in enumerate(content.items if content.kind == "array" else [content]):
            blocks.append(Block(b, "messages", f"messages[{i}].content[{j}]", _text(b)))
    return blocks


def _prefix_tokens(ctx: Context, blocks: list[Block], enough: int) -> int:
    """Tokens of the blocks, counted block by block until ``enough``: a breakpoint deep in a long
    conversation costs a few blocks' tokenization, not the whole prompt's (live requests too)."""
    total = 0
    for block in blocks:
        total += ctx.tokens(block.text) + 1  # + the separator between blocks
        if total >= enough:
            break
    return max(0, total - 1)


def _breakpoints(ctx: Context, root: Node, tools: list[Node]) -> Iterator[Hit]:
    rules = ctx.info.cache
    blocks = _blocks(root, tools)
    marks: list[tuple[int, Block, int]] = []  # (block index, block, offset of the cache_control key)
    for index, block in enumerate(blocks):
        for key, key_start, _ in block.node.members:
            if key == "cache_control":
                marks.append((index, block, key_start))
    for n, (index, block, at) in enumerate(marks):
        end = at + len('"cache_control"')
        if rules.min_tokens > 0:
            prefix = _prefix_tokens(ctx, blocks[: index + 1], rules.min_tokens)
            if prefix < rules.min_tokens:
                args = {
                    "path": block.path,
                    "tokens": prefix,
                    "minimum": rules.min_tokens,
                    "model": ctx.info.model,
                }
                yield Hit("CW307", at, end, args)
        if n == rules.max_breakpoints:
            yield Hit("CW303", at, end, {"count": len(marks), "maximum": rules.max_breakpoints})
        if block.where in ("tools", "system"):
            found = find_literal(block.text)
            # A date read all day long repays its write; a clock or an id never does.
            if found is not None and severity(found.frequency) is None:
                value = block.text[found.start : found.end]
                yield Hit("CW304", at, end, {"path": block.path, "value": value, "kind": found.kind})
        if n and marks[n][0] - marks[n - 1][0] > rules.lookback:
            yield Hit(
                "CW306",
                at,
                end,
                {"path": block.path, "distance": marks[n][0] - marks[n - 1][0], "lookback": rules.lookback},
            )
    if not marks:
        stable = "\n".join(b.text for b in blocks if b.where != "messages")
        tokens = ctx.tokens(stable) if stable else 0
        if tokens >= rules.min_tokens > 0:
            anchor = root.get("system") or (tools[-1] if tools else None)
            key_at = next((ks for k, ks, v in root.members if v is anchor), root.start)
            yield Hit(
                "CW305",
                key_at,
                key_at + len('"system"'),
                {"tokens": tokens, "minimum": rules.min_tokens, "model": ctx.info.model},
            )
