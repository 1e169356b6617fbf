"""Where a Python module builds the cached part of a prompt.

- SDK calls: ``client.chat.completions.create``, ``client.messages.create`` / ``.stream``,
  ``client.responses.create``, litellm's ``completion``: their ``system``, ``instructions`` and
  ``tools`` arguments, with the call's ``model`` when it is a literal;
- chat messages with the system or developer role: ``{"role": "system", "content": ...}``,
  LangChain's ``SystemMessage(...)`` and ``("system", "...{field}...")`` templates;
- values named as prompts: ``SYSTEM_PROMPT = ...``, ``self.instructions = ...``,
  ``Agent(instructions=...)``, ``def build_system_prompt(...)`` and what it returns.

Only these are read: the rest of the module is code, not prompt text.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from .py_source import CONTINUING, Binding, PyModule, callee, dict_entry
from .py_turns import TURN_METHODS, followed_by_history, user_turn_only
from .vocab import words

_CREATE = frozenset({"create", "acreate", "stream", "parse", "count_tokens"})
_APIS = {
    "completions": "openai-chat",
    "ChatCompletion": "openai-chat",
    "messages": "anthropic",
    "responses": "openai-responses",
}
_LITELLM = frozenset({"completion", "acompletion"})
_SYSTEM_WORDS = frozenset({"system", "developer", "instructions", "preamble"})
_PROMPT_WORDS = frozenset({"prompt", "instructions", "instruction", "preamble", "backstory"})
_AGENT_FIELDS = frozenset({"role", "goal", "backstory"})  # crewAI Agent(...): its system prompt
# A name ending in one of these holds something about a prompt, not its text.
_NOT_TEXT = frozenset(
    {
        "role",
        "roles",
        "count",
        "tokens",
        "token",
        "len",
        "length",
        "id",
        "ids",
        "key",
        "keys",
        "enabled",
        "flag",
        "path",
        "paths",
        "file",
        "files",
        "dir",
        "type",
        "kind",
        "index",
        "idx",
        "hash",
        "version",
        "mode",
        "name",
        "names",
        "parts",
        "part",
        "cache",
        "size",
        "limit",
        "max",
        "min",
        "fn",
        "func",
        "function",
        "functions",
        "cls",
        "class",
        "factory",
        "builder",
        "loader",
        "registry",
        "tool",
        "tools",
    }
)

_PROMPT_VERB = frozenset(
    {"for", "user", "yes", "confirm", "input", "choice", "select", "continue", "password"}
)
_MESSAGE_TEXT = frozenset({"content", "message", "text"})
_LANGCHAIN_TEMPLATES = frozenset({"from_messages", "from_template", "PromptTemplate", "ChatPromptTemplate"})


@dataclass(frozen=True, slots=True)
class Site:
    """Prompt text to read: an expression, or the bindings of a name (``prompt = ...; prompt += ...``)."""

    expr: ast.expr | None
    chain: tuple[Binding, ...] = ()
    system: bool = False
    model: str | None = None
    provider: str = "openai-chat"
    placeholders: bool = False
    # Sent only as the conversation's newest user turn (``_user_turn_only``): what follows a value in
    # it is not cached on this call, and it is history, unchanged, on the next.
    turn: bool = False
    # A system message that the conversation's history follows (``messages.append(system)`` and then
    # the turns in a loop): what comes after its text is the cached history, not nothing.
    history_after: bool = False


def sdk_provider(node: ast.Call) -> str | None:
    """The request format of an LLM SDK call, or None for any other call."""
    # Called for every call of every module read: the called name first, the chain only for `create`.
    func = node.func
    if isinstance(func, ast.Attribute):
        last, base = func.attr, func.value
    elif isinstance(func, ast.Name):
        return "openai-chat" if func.id in _LITELLM else None
    else:
        return None
    if last in _LITELLM:
        return "openai-chat"
    if last not in _CREATE:
        return None
    api = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
    return _APIS.get(api) if api is not None else None


# id(module) -> (the module, {id(call): provider} for its SDK calls): both readers of a module
# (its prompt sites, its tool lists) ask, and most of its calls are not SDK calls.
_PROVIDERS: dict[int, tuple[PyModule, dict[int, str]]] = {}


def _providers(module: PyModule) -> dict[int, str]:
    kept = _PROVIDERS.get(id(module))
    if kept is not None and kept[0] is module:
        return kept[1]
    found = {id(c): p for c in module.of_type(ast.Call) if (p := sdk_provider(c)) is not None}
    _PROVIDERS.clear()  # one module at a time: only the one being checked is asked
    _PROVIDERS[id(module)] = (module, found)
    return found


def _attrs(node: ast.expr) -> list[str]:
    out: list[str] = []
    while isinstance(node, ast.Attribute):
        out.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        out.append(node.id)
    return out[::-1]


def _literal_model(node: ast.Call) -> str | None:
    for k in node.keywords:
        if k.arg == "model" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
            return k.value.value
    return None


@functools.lru_cache(maxsize=4096)
def prompt_name(name: str) -> bool:
    """``SYSTEM_PROMPT``, ``instructions``, ``system``; not ``system_prompt_role`` or ``prompt_tokens``."""
    ws = words(name)
    if not ws or ws[-1] in _NOT_TEXT or (ws[0] == "prompt" and len(ws) > 1 and ws[1] in _PROMPT_VERB):
        return False  # `prompt_for_approval()`, `prompt_user()`: a terminal prompt, not an LLM's
    # `system_message_content`, `get_system_message()`: the system message's text being built.
    message = any(a == "system" and b in ("message", "msg") for a, b in itertools.pairwise(ws))
    return bool(set(ws) & _PROMPT_WORDS) or (ws[0] == "system" and len(ws) <= 2) or message


@functools.lru_cache(maxsize=4096)
def _is_system(name: str) -> bool:
    return bool(set(words(name)) & _SYSTEM_WORDS)


def resolved(module: PyModule, expr: ast.expr) -> ast.expr:
    """A name's value when it is bound once with ``=`` (a list of messages or tools), else itself."""
    return module.value_of(expr)


def _blocks(module: PyModule, expr: ast.expr) -> Iterator[ast.expr]:
    """The text of a system value: a string, or a list of ``{"type": "text", "text": ...}`` blocks."""
    value = resolved(module, expr)
    if isinstance(value, ast.List | ast.Tuple):
        for element in value.elts:
            if isinstance(element, ast.Dict):
                text = dict_entry(element, "text")
                if text is not None:
                    yield text
        return
    yield expr


def prompt_sites(module: PyModule) -> Iterator[Site]:
    seen: set[int] = set()

    def once(site: Site) -> Iterator[Site]:
        key = id(site.expr) if site.expr is not None else id(site.chain[0])
        if key not in seen:
            seen.add(key)
            yield site

    calls = module.of_type(ast.Call)
    providers = _providers(module)
    for call in calls:
        provider = providers.get(id(call))
        if provider is None:
            continue
        model = _literal_model(call)
        for k in call.keywords:
            if k.arg in ("system", "instructions"):
                for text in _blocks(module, k.value):
                    yield from once(Site(text, system=True, model=model, provider=provider))
            elif k.arg in ("messages", "input"):
                for text in _role_texts(module, resolved(module, k.value)):
                    yield from once(Site(text, system=True, model=model, provider=provider))
    history_after = followed_by_history(module)
    for dict_node in module.of_type(ast.Dict):
        for text in _role_texts(module, dict_node):
            yield from once(Site(text, system=True, history_after=id(dict_node) in history_after))
        # A request body written as a dict (`kwargs = {"model": ..., "system": ...}`; `create(**kwargs)`).
        model_node = dict_entry(dict_node, "model")
        for key in ("system", "instructions") if model_node is not None else ():
            value = dict_entry(dict_node, key)
            literal = model_node.value if isinstance(model_node, ast.Constant) else None
            for text in _blocks(module, value) if value is not None else ():
                yield from once(Site(text, system=True, model=literal if isinstance(literal, str) else None))
    for call in calls:
        if call.keywords or callee(call) in _SITE_CALLS:  # nothing else is read by `_call_sites`
            yield from (s for site in _call_sites(module, call, providers.get(id(call))) for s in once(site))
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = [
        *module.of_type(ast.FunctionDef),
        *module.of_type(ast.AsyncFunctionDef),
    ]
    for node in functions:
        decorated = any(_attrs(d)[-1:] in (["system_prompt"], ["instructions"]) for d in node.decorator_list)
        if decorated or prompt_name(node.name):
            system = decorated or _is_system(node.name)
            for ret in _returns(node):
                yield from once(Site(ret.value, system=system))
    for (_, name), bindings in module.bindings.items():
        if prompt_name(name):
            for chain in _chains(bindings):
                scope = module.scope_of(chain[0].stmt)
                user_turn = not _is_system(name) and user_turn_only(module, name, scope)
                yield from once(Site(None, chain, system=_is_system(name), turn=user_turn))
    for assign in module.of_type(ast.Assign):
        target = assign.targets[0] if len(assign.targets) == 1 else None
        if isinstance(target, ast.Attribute) and prompt_name(target.attr):
            yield from once(Site(assign.value, system=_is_system(target.attr)))
    for listed in module.of_type(ast.List):
        turn = _single_shot_turn(listed)
        if turn is not None:
            yield from once(Site(turn))


def _single_shot_turn(node: ast.List) -> ast.expr | None:
    """The user turn of a whole request written as one list: system message(s), then one user
    message (``[Message(role="system", ...), Message(role="user", content=f"...")]``). No history
    comes before or after it, so its static text is re-sent on every call: it is prompt text."""
    elts = node.elts
    if len(elts) < 2 or _message(elts[-1]) is None or _message(elts[0]) is None:
        return None  # most lists are data: two looks decide
    roles = [_message(element) for element in elts]
    if any(r is None for r in roles):
        return None
    kinds = [r[0] for r in roles if r is not None]
    if kinds[-1] != "user" or any(k not in ("system", "developer") for k in kinds[:-1]):
        return None
    last = roles[-1]
    return last[1] if last is not None else None


def _message(node: ast.expr) -> tuple[str, ast.expr] | None:
    """(role, content) of a message written in place: ``{"role": ..., "content": ...}`` or a call
    with ``role=`` and ``content=`` (``Message(...)``, ``ChatMessage(...)``)."""
    if isinstance(node, ast.Dict):
        role, content = dict_entry(node, "role"), dict_entry(node, "content")
    elif isinstance(node, ast.Call):
        role = next((k.value for k in node.keywords if k.arg == "role"), None)
        content = next((k.value for k in node.keywords if k.arg in _MESSAGE_TEXT), None)
    else:
        return None
    if isinstance(role, ast.Constant) and isinstance(role.value, str) and content is not None:
        return role.value, content
    return None


_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.Return]:
    """The ``return value`` statements of a function (and of functions nested in it), in source
    order: only statement blocks are walked (a return is never inside an expression)."""
    stack: list[ast.AST] = list(reversed(function.body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            if node.value is not None:
                yield node
            continue
        for name in _BLOCKS:
            block = getattr(node, name, None)
            if block:
                stack.extend(reversed(block))


def _chains(bindings: list[Binding]) -> Iterator[tuple[Binding, ...]]:
    """Each ``name = value`` with the ``name += ...`` that follow it."""
    for i, binding in enumerate(bindings):
        if binding.op == "=" and binding.value is not None:
            j = i + 1
            while j < len(bindings) and bindings[j].op in CONTINUING:
                j += 1
            yield tuple(bindings[i:j])


def _role_texts(module: PyModule, node: ast.expr) -> Iterator[ast.expr]:
    """The content of system / developer messages in a message dict or a list of them."""
    if isinstance(node, ast.List | ast.Tuple):
        for element in node.elts:
            if isinstance(element, ast.Dict):
                yield from _role_texts(module, element)
        return
    if not isinstance(node, ast.Dict):
        return
    role = dict_entry(node, "role")
    if not (isinstance(role, ast.Constant) and role.value in ("system", "developer")):
        return
    content = dict_entry(node, "content")
    if content is not None:
        yield from _blocks(module, content)


_SITE_CALLS = frozenset({"Agent", "SystemMessage", *_LANGCHAIN_TEMPLATES})


def _call_sites(module: PyModule, node: ast.Call, provider: str | None) -> Iterator[Site]:
    name = callee(node)
    if name == "Agent":
        for k in node.keywords:
            if k.arg in _AGENT_FIELDS:
                yield Site(k.value, system=True, placeholders=True)  # crewAI fills `{topic}` from inputs
    if name == "SystemMessage":
        content = (
            node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "content"), None)
        )
        if content is not None:
            yield Site(content, system=True)
    elif name in _LANGCHAIN_TEMPLATES:
        for arg in (*node.args, *(k.value for k in node.keywords if k.arg in ("template", "messages"))):
            value = resolved(module, arg)
            if isinstance(value, ast.List | ast.Tuple):
                for element in value.elts:
                    pair = element.elts if isinstance(element, ast.Tuple) and len(element.elts) == 2 else None
                    if pair and isinstance(pair[0], ast.Constant) and isinstance(pair[0].value, str):
                        yield Site(
                            pair[1], system=pair[0].value in ("system", "developer"), placeholders=True
                        )
            elif name != "from_messages":
                yield Site(arg, placeholders=True)
    role = next((k.value for k in node.keywords if k.arg == "role"), None)
    if isinstance(role, ast.Constant) and role.value in ("system", "developer") and provider is None:
        # `format_chat_message(role="system", message=...)`, `ChatMessage(role="system", content=...)`:
        # a helper or class that makes a message of the role it is given.
        for k in node.keywords:
            if k.arg in _MESSAGE_TEXT:
                yield Site(k.value, system=True)
    turn = isinstance(node.func, ast.Attribute) and node.func.attr in TURN_METHODS
    for k in node.keywords:
        if k.arg and prompt_name(k.arg) and provider is None and not turn:
            yield Site(k.value, system=_is_system(k.arg))


def tool_sites(module: PyModule) -> Iterator[ast.expr]:
    """Expressions that build the tool list an SDK call sends."""
    providers = _providers(module)
    for node in module.of_type(ast.Call):
        if id(node) in providers:
            for k in node.keywords:
                if k.arg in ("tools", "functions"):
                    yield k.value
