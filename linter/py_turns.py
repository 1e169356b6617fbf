"""Where a message built in Python goes: the conversation's newest user turn, or before history.

Both change what a value in it costs. The newest user turn is not cached on the call that sends it,
and is history, unchanged, on the next: a value in it busts only a static block after it that
could be cached on its own. A system message that the history follows is a cached prefix: what
comes after its own text is every turn of the conversation.
"""

from __future__ import annotations

import ast

from .py_source import PyModule, callee, dict_entry, dotted

# An agent's run / chat methods take the task as the conversation's newest user message (swarms'
# `agent.run(task)`, pydantic-ai's `run_sync`, AutoGen's `initiate_chat(message=...)`, LangChain's
# `invoke`): nothing after it is cached on the call that sends it, and it is history, sent unchanged,
# on the next one. A clock or a count in it busts nothing.
TURN_METHODS = frozenset(
    {
        "run",
        "arun",
        "run_sync",
        "run_async",
        "run_stream",
        "invoke",
        "ainvoke",
        "chat",
        "achat",
        "astream_chat",
        "stream_chat",
        "step",
        "astep",
        "ask",
        "aask",
        "send_message",
        "generate_reply",
        "a_generate_reply",
        "initiate_chat",
        "a_initiate_chat",
    }
)
_TURN_KEYWORDS = frozenset({"task", "message", "input", "query", "question", "user_input", "content"})
_INPUT_KEYS = ("input", "user_input", "question", "query", "task")
_USER_ROLES = frozenset({"user", "human"})
_USER_MESSAGES = frozenset({"HumanMessage", "UserMessage", "ChatMessageUser", "UserPromptPart"})


def user_turn_only(module: PyModule, name: str, scope: ast.AST) -> bool:
    """Whether every use of ``name`` in the function that binds it sends it as the newest user turn:
    an agent's task (``TURN_METHODS``), ``{"role": "user", "content": name}``, ``HumanMessage(name)``,
    a chain's or agent's input mapping (``{"input": name}``).
    A prompt-named local used only so is the request's own input, not its cached part (see
    ``checks_python``: only a static block that could be cached on its own still counts)."""
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return False  # a module or class constant: an agent's instructions, whatever it is passed to
    loads = turns = 0
    for node in ast.walk(scope):
        if isinstance(node, ast.Name):
            loads += node.id == name and isinstance(node.ctx, ast.Load)
        elif isinstance(node, ast.Call):
            turns += _turn_arguments(node, name)
        elif isinstance(node, ast.Dict):
            role, content = dict_entry(node, "role"), dict_entry(node, "content")
            user = isinstance(role, ast.Constant) and role.value in _USER_ROLES
            turns += user and isinstance(content, ast.Name) and content.id == name
            # `chain.invoke({"input": prompt})`, `prompt_agent(prompt_args={"user_input": prompt})`
            inputs = (dict_entry(node, key) for key in _INPUT_KEYS)
            turns += sum(isinstance(v, ast.Name) and v.id == name for v in inputs)
    return loads > 0 and loads == turns


def _turn_arguments(call: ast.Call, name: str) -> int:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in TURN_METHODS:
        taken = [*call.args[:1], *(k.value for k in call.keywords if k.arg in _TURN_KEYWORDS)]
    elif callee(call) in _USER_MESSAGES:
        taken = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "content")]
    else:
        return 0
    return sum(isinstance(arg, ast.Name) and arg.id == name for arg in taken)


def followed_by_history(module: PyModule) -> set[int]:
    """The message dicts after which a list of messages gets the conversation's history: in a list
    display before ``*history`` (or a list of them), or appended to a list that is later extended,
    or appended to in a loop, in the same function (SuperAGI's agent loop adds a system message
    with the time after the system prompt, then every step of the history)."""
    followed: set[int] = set()
    for listed in module.of_type(ast.List):
        for i, element in enumerate(listed.elts[:-1]):
            later = listed.elts[i + 1 :]
            if isinstance(element, ast.Dict) and any(
                not isinstance(e, ast.Dict | ast.Constant) for e in later
            ):
                followed.add(id(element))
    grown: dict[tuple[int, str], list[ast.Call]] = {}
    appended: list[tuple[ast.Dict, ast.Call, str]] = []
    for call in module.of_type(ast.Call):
        func = call.func
        if not isinstance(func, ast.Attribute) or func.attr not in ("append", "extend"):
            continue
        receiver = dotted(func.value)
        if receiver is None:
            continue
        scope = id(module.scope_of(call))
        if func.attr == "extend" or any(
            isinstance(a, ast.For | ast.AsyncFor | ast.While) for a in module.ancestors(call)
        ):
            grown.setdefault((scope, receiver), []).append(call)
        if func.attr == "append" and call.args and isinstance(call.args[0], ast.Dict):
            appended.append((call.args[0], call, receiver))
    for message, call, receiver in appended:
        growth = grown.get((id(module.scope_of(call)), receiver), [])
        if any((c.lineno, c.col_offset) > (call.lineno, call.col_offset) for c in growth):
            followed.add(id(message))
    return followed
