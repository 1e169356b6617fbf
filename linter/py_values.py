"""One Python value in prompt text: is it volatile, how often does it change, whose data is it?

Clock, id and random sources are recognised by what is called (``datetime.now()``, ``time.time()``,
``uuid.uuid4()``, ``secrets.token_hex()``, ``random.*``, ``os.urandom()``) and by names
(``request_id``, ``current_date``); a name bound earlier to such a call is one too. How often the
value changes follows from its strftime format, and from where it is computed: at import (module
or class level) or in ``__init__`` it is frozen per process / per object.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from .findings import Hit
from .frequency import Frequency, of_format, of_name
from .py_order import json_hits, order_hits
from .py_source import (
    Binding,
    PyModule,
    callee,
    dotted,
    following,
    list_elements,
    local_function,
    return_value,
)
from .template_scan import Piece
from .vocab import (
    PERSONAL_WORDS,
    STRFTIME,
    Volatile,
    classify_call,
    classify_name,
    is_per_request,
    is_per_user,
    words,
)

_MODULE_KINDS: dict[str, Volatile] = {"random": "random", "secrets": "unique-id"}
_EXTRA_CALLS: dict[str, Volatile] = {
    "urandom": "unique-id",
    "getpid": "unique-id",
    "token_bytes": "unique-id",
    "randbelow": "random",
    "getrandbits": "random",
    "localtime": "timestamp",
    "gmtime": "timestamp",
    "time_ns": "timestamp",
    "ctime": "timestamp",
    "asctime": "timestamp",
}
MAX_CALL_DEPTH = 4  # functions of the module followed inside one another for one value
# Names followed to what they are bound to, for one value: `note` (a loop over `notes`) → the
# appended `f"It is {shown}."` → `shown = str(moment)` → `moment = datetime.now()`.
MAX_NAME_DEPTH = 3
_DAILY_CALLS = frozenset({"today", "date"})
_BUILTINS = frozenset({"str", "repr", "len", "sorted", "list", "tuple", "dict", "set", "format", "json"})
# Methods whose result still shows the clock or id they are called on.
_FORMATTING = frozenset(
    {
        "strftime",
        "isoformat",
        "date",
        "time",
        "timestamp",
        "ctime",
        "astimezone",
        "replace",
        "format",
        "hex",
        "upper",
        "lower",
        "strip",
        "split",
        "__str__",
    }
)


@dataclass(frozen=True, slots=True)
class Candidate:
    start: int
    end: int
    kind: Volatile
    label: str
    frequency: Frequency


class Values:
    """Classify value expressions; JSON and order hits met on the way are collected in ``hits``."""

    def __init__(
        self,
        module: PyModule,
        expanding: set[int],
        hits: list[Hit],
        params: dict[int, dict[str, ast.expr]] | None = None,
    ) -> None:
        self.m = module
        self._expanding = expanding
        self.hits = hits
        # id(function) -> the arguments of the call being followed into it (shared with the timeline).
        self._params: dict[int, dict[str, ast.expr]] = {} if params is None else params

    def piece(self, expr: ast.expr, spec_text: str = "") -> Piece:
        """A value piece: volatile if anything in it is (the first such thing in the source names it)."""
        start, end = self.m.span(expr)
        piece = Piece(False, start, end, label=_label(self.m.segment(expr)))
        candidates = list(self._candidates(expr, piece, 0))
        if STRFTIME.search(spec_text):
            frequency = of_format(spec_text) or "request"
            candidates.append(Candidate(start, end, "timestamp", f"{piece.label}:{spec_text}", frequency))
        if not candidates:
            if not piece.per_request and not piece.per_user and self._constant(expr):
                # `format_as_xml(EXAMPLES)`: made from module constants, the same text on every
                # request; its length is unknown, so it counts as the least static text that matters.
                return Piece(True, start, start, include="?")
            return piece
        chosen = min(candidates, key=lambda c: (c.start, -c.end))
        inner = [c for c in candidates if chosen.start <= c.start and c.end <= chosen.end]
        # A clock frozen at import stays frozen whatever format prints it later.
        frozen = next((c.frequency for c in inner if c.frequency in ("process", "instance")), None)
        formats = [c.frequency for c in inner if c.kind == "timestamp" and c.frequency != "request"]
        piece.start, piece.end, piece.volatile, piece.label = (
            chosen.start,
            chosen.end,
            chosen.kind,
            chosen.label,
        )
        piece.frequency = frozen or (
            formats[-1] if chosen.kind == "timestamp" and formats else chosen.frequency
        )
        if STRFTIME.search(spec_text) and not frozen:
            piece.frequency = of_format(spec_text) or piece.frequency
        return piece

    def _candidates(self, expr: ast.expr, piece: Piece, depth: int) -> Iterator[Candidate]:
        # (node, whether what it reads says who the text is for): the arguments of a method of the
        # agent (`team.members_text(run_context=ctx)`) are not what its text is made of.
        stack: list[tuple[ast.AST, bool]] = [(expr, True)]
        substituted: set[int] = set()
        while stack:
            node, telling = stack.pop()
            if isinstance(node, ast.Call):
                found = self._call(node) or self._returned(node, depth)
                if found:
                    yield found
                self.hits.extend(json_hits(self.m, node))
                func = node.func
                receiver = dotted(func.value) if isinstance(func, ast.Attribute) else None
                own = receiver is not None and receiver.split(".")[0] in _AGENT_HEADS
                tells = telling and not own
                stack.extend((a, tells) for a in (*node.args, *(k.value for k in node.keywords)))
                if isinstance(func, ast.Attribute):
                    stack.append((func.value, telling))
                continue
            if isinstance(node, ast.comprehension):
                self.hits.extend(order_hits(self.m, node.iter))
            name = dotted(node) if isinstance(node, ast.Name | ast.Attribute) else None
            if (
                isinstance(node, ast.Name | ast.Attribute)
                and name is not None
                and isinstance(node.ctx, ast.Load)
            ):
                if name.split(".")[0] in self.m.modules:
                    continue
                passed = self._passed(node) if isinstance(node, ast.Name) else None
                if passed is not None:
                    # A parameter of a function followed from its call: judged as what is passed.
                    if id(passed) not in substituted:
                        substituted.add(id(passed))
                        stack.append((passed, telling))
                    continue
                if telling:
                    if _per_user(name) and not piece.per_user:
                        piece.per_user = name
                    # `INPUT_NUMBERS = [1, 100, 12]` at module level, `agent.additional_context`:
                    # the same on every request (of that agent).
                    constant = _agent_config(name) or (isinstance(node, ast.Name) and self._constant(node))
                    piece.per_request = piece.per_request or (is_per_request(name) and not constant)
                yield from self._name(node, name, piece, depth)
                continue
            stack.extend((child, telling) for child in ast.iter_child_nodes(node))

    def _call(self, node: ast.Call) -> Candidate | None:
        name = callee(node)
        receiver = dotted(node.func.value) if isinstance(node.func, ast.Attribute) else None
        # `x.strftime(...)` shows a clock only when `x` is one: `order.created.strftime` is not.
        formats_other = (
            name in _FORMATTING
            and isinstance(node.func, ast.Attribute)
            and receiver not in ("time", "datetime")
            and not any(True for _ in self._candidates(node.func.value, Piece(False, 0, 0), 1))
        )
        if formats_other:
            return None
        kind = classify_call(name) or _EXTRA_CALLS.get(name)
        if kind is None and receiver in _MODULE_KINDS:
            kind = _MODULE_KINDS[receiver]
        if kind is None and name == "len" and node.args and not self._constant(node.args[0]):
            arg = dotted(node.args[0])
            kind = "unique-id" if arg and _turn_collection(arg) else None  # a turn counter
        if kind is None:
            return None
        frequency: Frequency = "day" if name in _DAILY_CALLS else "request"
        if name == "strftime" and node.args and isinstance(node.args[0], ast.Constant):
            frequency = of_format(str(node.args[0].value)) or frequency
        start, end = self.m.span(node)
        return Candidate(start, end, kind, _label(self.m.segment(node)), self._evaluated(node) or frequency)

    def _returned(self, call: ast.Call, depth: int) -> Candidate | None:
        """``now_str()`` for a function of this module that returns a clock or id (``return
        datetime.now().strftime(...)``, ``return f"Time: {now:%H:%M}"``): the call is that value."""
        func = local_function(self.m, call) if depth < MAX_CALL_DEPTH else None
        returned = return_value(func) if func is not None else None
        if func is None or returned is None or id(func) in self._expanding:
            return None
        with following(func, call, self._expanding, self._params):
            for found in self._candidates(returned, Piece(False, 0, 0), depth + 1):
                if not self._direct(returned, (found.start, found.end)):
                    return None  # `return tz.tzname(now)`: what the function makes of a clock
                start, end = self.m.span(call)
                label = f"{_label(self.m.segment(call))} → {found.label}"
                # Called at import or in `__init__`, the value is frozen whatever the function does.
                return Candidate(start, end, found.kind, label, self._evaluated(call) or found.frequency)
            return None

    def _passed(self, node: ast.Name) -> ast.expr | None:
        """The argument a followed call passes for parameter ``node``, else None."""
        chain = self.m.resolve(node)
        if not chain or chain[0].op or not isinstance(chain[0].stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        return self._params.get(id(chain[0].stmt), {}).get(node.id)

    def _name(
        self, node: ast.Name | ast.Attribute, name: str, piece: Piece, depth: int
    ) -> Iterator[Candidate]:
        start, end = self.m.span(node)
        kind = classify_name(name)
        if kind is not None:
            frequency = of_name(name) if kind == "timestamp" else "request"
            if kind == "timestamp" and isinstance(node, ast.Name) and depth < 2:
                # `current_date = now.strftime("%Y-%m-%d %H:%M")`: the format says more than the name.
                made = list(self._bound(node, Piece(False, 0, 0), depth))
                frequency = made[0].frequency if made and made[0].kind == kind else frequency
            yield Candidate(start, end, kind, name, frequency)
            return
        if not isinstance(node, ast.Name) or depth >= MAX_NAME_DEPTH:
            return
        # `now = datetime.now()` earlier: `now` is a clock value where it is used.
        for found in self._bound(node, piece, depth):
            label = found.label if found.label.startswith(f"{name} → ") else name
            yield Candidate(start, end, found.kind, label, found.frequency)

    def _bound(self, node: ast.Name, piece: Piece, depth: int) -> Iterator[Candidate]:
        """The clock / id a name is bound to where it is used (at most one), else nothing."""
        chain = self.m.resolve(node)
        if chain and chain[0].value is None and id(chain[0]) not in self._expanding:
            yield from self._element(chain[0], node.id, piece, depth)
            return
        if not chain or chain[0].value is None or id(chain[0]) in self._expanding:
            return
        self._expanding.add(id(chain[0]))
        value = chain[0].value
        try:
            for found in self._candidates(value, piece, depth + 1):
                # The value itself (`datetime.now()`, `now.strftime(...)`, `str(uuid4())`): not what
                # some other function makes of it (`tz.tzname(now)` is a zone name).
                if self._direct(value, (found.start, found.end)):
                    yield found
                return
        finally:
            self._expanding.discard(id(chain[0]))

    def _element(self, binding: Binding, name: str, piece: Piece, depth: int) -> Iterator[Candidate]:
        """``for note in notes:`` over a list built here (``notes.append(f"It is {now}.")``): the first
        clock or id among its elements, named through the loop variable."""
        loop = binding.stmt
        if not (
            isinstance(loop, ast.For | ast.AsyncFor)
            and isinstance(loop.target, ast.Name)
            and isinstance(loop.iter, ast.Name)
        ):
            return
        # A parameter of a function followed from its call: the list the caller passes.
        passed = self._passed(loop.iter)
        iterated = passed if isinstance(passed, ast.Name) else loop.iter
        self._expanding.add(id(binding))
        try:
            for element in list_elements(self.m, iterated) or ():
                for found in self._candidates(element, piece, depth + 1):
                    if self._direct(element, (found.start, found.end)):
                        label = f"{name} → {found.label}"
                        yield Candidate(found.start, found.end, found.kind, label, found.frequency)
                        return
                    break
        finally:
            self._expanding.discard(id(binding))

    def _direct(self, value: ast.expr, span: tuple[int, int]) -> bool:
        """Whether ``value`` is the clock / id at ``span`` itself, converted or formatted."""
        if self.m.span(value) == span or _converts(value):
            return True
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            return value.func.attr in _FORMATTING and self._direct(value.func.value, span)
        if isinstance(value, ast.BinOp):  # now + timedelta(days=1)
            return self._direct(value.left, span) or self._direct(value.right, span)
        if isinstance(value, ast.IfExp):  # datetime.now(tz) if tz else datetime.now()
            return self._direct(value.body, span) or self._direct(value.orelse, span)
        return False

    def _constant(self, expr: ast.expr) -> bool:
        """Every name in ``expr`` is a module-level constant (UPPER_CASE) or an import."""
        called = {id(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}  # functions, not data
        names = [n for n in ast.walk(expr) if isinstance(n, ast.Name) and id(n) not in called]
        if not names or any(isinstance(n, ast.Lambda | ast.NamedExpr) for n in ast.walk(expr)):
            return False
        for name in names:
            if name.id in self.m.modules or name.id in _BUILTINS:
                continue
            chain = self.m.resolve(name)
            if not (name.id.isupper() and chain and self.m.scope_of(chain[0].stmt) is self.m.tree):
                return False
        return True

    def _evaluated(self, node: ast.AST) -> Frequency | None:
        return evaluated_at(self.m, node)


def evaluated_at(module: PyModule, node: ast.AST) -> Frequency | None:
    """ "process" when computed at import, "instance" in ``__init__``, None inside a function."""
    for parent in module.ancestors(node):
        if isinstance(parent, ast.Lambda):
            return None
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            return "instance" if parent.name == "__init__" else None
    return "process"


# An agent object and its configuration: set when the agent is built, the same text on every
# request it serves (its history and inputs excepted).
_AGENT_HEADS = frozenset({"agent", "team", "bot", "assistant", "crew", "config", "cfg", "settings"})
_AGENT_INPUTS = frozenset({"history", "messages", "message", "conversation", "query", "question", "input"})


def _agent_config(name: str) -> bool:
    """``agent.additional_context``, ``team.description``: not ``agent.history`` or a bare ``agent``."""
    parts = name.split(".")
    return len(parts) > 1 and parts[0] in _AGENT_HEADS and not set(words(parts[-1])) & _AGENT_INPUTS


def _per_user(name: str) -> bool:
    """``user.email``, ``customer_name``, ``user_id``: not a bare ``user`` / ``client`` (in Python more
    often the SDK client or a pydantic class) nor a class name such as ``UserDetail``."""
    if name[:1].isupper() and not name.isupper():
        return False
    ws = words(name)
    return is_per_user(name) and len(ws) > 1 and bool(set(ws[1:]) & PERSONAL_WORDS)


def _converts(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Call) and callee(node) in ("str", "repr", "int", "float", "round", "format")
    )


def _label(segment: str) -> str:
    return segment.split("\n")[0][:60]


# What a conversation grows by: `len(messages)` counts the turns, so it is new on every request of
# the conversation. The length of this request's other inputs (`len(chunks)`, `len(documents)`) is
# as new as they are, and they come with it: not a counter.
_TURN_COLLECTIONS = frozenset(
    {"messages", "msgs", "history", "turns", "conversation", "chat", "dialog", "dialogue", "rounds", "steps"}
)


def _turn_collection(name: str) -> bool:
    ws = words(name.split(".")[-1])
    return bool(ws) and ws[-1] in _TURN_COLLECTIONS
