"""A Python module as the linter reads it: its syntax tree, node offsets, scopes and name bindings.

Positions: ``ast`` gives 1-based lines and UTF-8 byte columns; rules need character offsets into
the file, so every node span goes through :meth:`PyModule.span`.

Names are resolved the way a reader of the code would: a name used in a function is the value it
was last given before that point in the function (plus any ``+=`` after it), else the module-level
value. Loop targets, parameters and imports are bindings without a value.

The module is long because it is the one place that knows how Python binds names: the walk that
records bindings, and the readers built on them (a name's value, a function's return and
arguments, a list's appended elements) share its scope rules, and splitting them would repeat those.
"""

from __future__ import annotations

import ast
import bisect
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from .sources import Source

T = TypeVar("T", bound=ast.AST)
ScopeNode = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BINDERS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.Import,
    ast.ImportFrom,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.For,
    ast.AsyncFor,
    ast.With,
    ast.AsyncWith,
    ast.NamedExpr,
)


_SCOPE_TYPES = frozenset(_SCOPES)
# What ancestors() reports: the nodes whose extent the checks ask about (scopes, loops, lambdas).
_CONTAINER_TYPES = frozenset(
    {ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.For, ast.AsyncFor}
)
_BINDER_TYPES = frozenset(_BINDERS)
# Fields that never hold a child node worth walking: names and flags (str / int), expression
# contexts, and operators (shared singletons that no check reads through the tree).
_LEAF_FIELDS = frozenset(
    {"ctx", "id", "attr", "arg", "asname", "module", "level", "kind", "type_comment", "is_async"}
    | {"conversion", "simple", "op", "ops", "name", "rest", "lineno", "tag"}
)
_LEAF_OF: dict[str, frozenset[str]] = {
    "Constant": frozenset({"value"}),
    "MatchSingleton": frozenset({"value"}),
    "Global": frozenset({"names"}),
    "Nonlocal": frozenset({"names"}),
    "MatchClass": frozenset({"kwd_attrs"}),
}
# The classes the checks look up by class (``of_type``): only these are listed, not every node.
_INDEXED = frozenset({ast.Call, ast.Dict, ast.List, ast.Assign, ast.FunctionDef, ast.AsyncFunctionDef})


def _child_fields(cls: type) -> tuple[str, ...]:
    leaf = _LEAF_OF.get(cls.__name__, frozenset())
    return tuple(f for f in getattr(cls, "_fields", ()) if f not in _LEAF_FIELDS and f not in leaf)


def _ast_classes() -> list[type]:
    found: list[type] = []
    pending: list[type] = [ast.AST]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {cls: _child_fields(cls) for cls in _ast_classes()}
# Nodes without child nodes (Name, Constant, alias, pass...: most of a module) are recorded where
# they are met, never pushed on the walk's stack.
_LEAVES = frozenset(cls for cls, fields in _CHILD_FIELDS.items() if not fields)


# Ops of a binding that carries the text before it on: ``+=`` appends to it, and ``~`` is
# ``text = fill(agent, text)`` / ``text = text.strip()``: the same text, passed through a call.
CONTINUING = ("+=", "~")


@dataclass(frozen=True, slots=True)
class Binding:
    """``name = value`` (op "="), ``name += value`` (op "+="), ``name = f(name)`` (op "~": the text so
    far passed through a call), or a binding without a value (op "")."""

    at: tuple[int, int]  # (line, UTF-8 column) where it is bound: orders bindings and uses
    op: str
    value: ast.expr | None
    stmt: ast.AST


@dataclass(slots=True)
class PyModule:
    source: Source
    tree: ast.Module
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    bindings: dict[tuple[int, str], list[Binding]] = field(default_factory=dict)  # (id(scope), name)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)  # names bound by `import x` / `from x import y`
    # name -> (module, level, imported name): `from ..p import f as g` gives g -> ("p", 2, "f"),
    # `import a.b as c` gives c -> ("a.b", 0, None), `import a.b` gives a -> ("a", 0, None).
    imports: dict[str, tuple[str, int, str | None]] = field(default_factory=dict)
    by_type: dict[type, list[ast.AST]] = field(default_factory=dict)  # the same nodes by class
    # Functions, classes, lambdas and loops, in walk order; sorted by start on first use.
    containers: list[ast.AST] = field(default_factory=list)
    _container_starts: list[tuple[int, int]] | None = None
    _container_nodes: list[ast.AST] = field(default_factory=list)
    _container_up: list[int] = field(default_factory=list)  # index of each one's enclosing container
    _lines: list[bytes] = field(default_factory=list)  # UTF-8 lines, only for a non-ASCII file
    _ascii: bool = True  # byte columns are character columns

    @classmethod
    def parse(cls, source: Source) -> PyModule:
        """Raises SyntaxError on a file that is not valid Python."""
        # A syntax tree is tens of thousands of container objects and no reference cycles: with the
        # cycle collector on, building it and its tables triggers collections that scan the whole
        # heap over and over (half of the time of a parse and walk on large modules).
        collecting = gc.isenabled()
        gc.disable()
        # Python skips a UTF-8 byte order mark, ast.parse of a str does not: a form feed in its place
        # is whitespace to Python and keeps every offset.
        text = "\x0c" + source.text[1:] if source.text.startswith("\ufeff") else source.text
        try:
            module = cls(source, ast.parse(text, filename=source.path))
            module._ascii = text.isascii()
            if not module._ascii:
                module._lines = [line.encode("utf-8") for line in text.split("\n")]
            module._walk()
        finally:
            if collecting:
                gc.enable()
        for bindings in module.bindings.values():
            bindings.sort(key=lambda b: b.at)
        return module

    # --- positions -------------------------------------------------------------------------------

    def of_type(self, kind: type[T]) -> list[T]:
        """Every node of this exact class (one of ``_INDEXED``), in walk order."""
        assert kind in _INDEXED, f"{kind.__name__} nodes are not indexed"
        return self.by_type.get(kind, [])  # type: ignore[return-value]

    def offset(self, lineno: int, col: int) -> int:
        """Character offset of a 1-based line and a UTF-8 byte column."""
        if self._ascii:
            return self.source.line_start(lineno) + col
        line = self._lines[lineno - 1] if 0 < lineno <= len(self._lines) else b""
        return self.source.line_start(lineno) + len(line[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end_line = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
        end_col = getattr(node, "end_col_offset", None)
        return start, self.offset(end_line, end_col) if end_col is not None else start

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source.text[start:end]

    def content_start(self, node: ast.Constant) -> int:
        """Offset of the first character of a string literal's content (after prefix and quotes)."""
        start, end = self.span(node)
        text = self.source.text
        i = start
        while i < end and text[i] not in "'\"":
            i += 1
        quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else text[i : i + 1]
        return min(i + len(quote), end)

    # --- scopes and names ------------------------------------------------------------------------

    def scope_of(self, node: ast.AST) -> ScopeNode:
        """The innermost function or class that holds ``node`` (not ``node`` itself), else the module."""
        for outer in self.ancestors(node):
            if isinstance(outer, _SCOPES):
                return outer
        return self.tree

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        """The functions, classes, lambdas and loops that hold ``node``, innermost first, then the
        module: the only ancestors the checks ask for. Found by source position (a decorator is
        outside its function), so no parent table is built for them."""
        line = getattr(node, "lineno", None)
        if line is None:  # a node without a position (arguments, withitem): by its parents
            parents = self._parent_table()
            current = parents.get(node)
            while current is not None:
                if current.__class__ in _CONTAINER_TYPES or current is self.tree:
                    yield current
                current = parents.get(current)
            return
        at = (line, getattr(node, "col_offset", 0))
        starts = self._container_starts if self._container_starts is not None else self._index_containers()
        nodes, up = self._container_nodes, self._container_up
        # The last container to start before the node; the ones holding the node are it or its
        # enclosing ones (containers nest): up its chain, never back over its siblings.
        i = bisect.bisect_right(starts, at) - 1
        while i >= 0:
            outer = nodes[i]
            if outer is not node and (outer.end_lineno, outer.end_col_offset) > at:  # type: ignore[attr-defined]
                yield outer
            i = up[i]
        yield self.tree

    def _index_containers(self) -> list[tuple[int, int]]:
        ordered = sorted(self.containers, key=_start)
        up: list[int] = []
        open_: list[int] = []  # indexes of the containers that hold the current one
        for i, node in enumerate(ordered):
            start = _start(node)
            while open_ and (ordered[open_[-1]].end_lineno, ordered[open_[-1]].end_col_offset) <= start:  # type: ignore[attr-defined]
                open_.pop()
            up.append(open_[-1] if open_ else -1)
            open_.append(i)
        self._container_nodes, self._container_up = ordered, up
        self._container_starts = [_start(c) for c in ordered]
        return self._container_starts

    def _parent_table(self) -> dict[ast.AST, ast.AST]:
        """Every node's parent, built on first use: most parsed modules never resolve a name (about
        one in five of a large framework's does), and a dict entry per node is a third of a walk."""
        if self.parents or not self.tree.body:
            return self.parents
        parents, fields_of, leaves = self.parents, _CHILD_FIELDS, _LEAVES
        stack: list[ast.AST] = [self.tree]
        pop, push = stack.pop, stack.append
        while stack:
            node = pop()
            for name in fields_of[node.__class__]:
                value = getattr(node, name, None)
                if value.__class__ is list:
                    for item in value:
                        if item is not None:
                            parents[item] = node
                            if item.__class__ not in leaves:
                                push(item)
                elif value is not None:
                    parents[value] = node
                    if value.__class__ not in leaves:
                        push(value)
        return parents

    def resolve(self, name: ast.Name) -> list[Binding] | None:
        """The bindings that make up ``name``'s value where it is used: the last ``=`` before the use
        and the ``+=`` after it, in order. None when the name has no visible binding here."""
        at = (name.lineno, name.col_offset)
        home = self.scope_of(name)
        scope: ScopeNode = home
        while True:
            found = self.bindings.get((id(scope), name.id))
            if found:
                # Where the name is used only what came before counts; an enclosing scope has run
                # (at least up to the definition) by the time a function body uses its names.
                visible = [b for b in found if b.at < at] if scope is home else found
                return _chain(visible) if visible else None
            if scope is self.tree:
                return None
            scope = self.scope_of(scope)
            while isinstance(scope, ast.ClassDef):  # a class body does not enclose its methods
                scope = self.scope_of(scope)

    def value_of(self, expr: ast.expr) -> ast.expr:
        """A name's value when it is bound once with ``=`` where it is used, else the expression."""
        if isinstance(expr, ast.Name):
            chain = self.resolve(expr)
            if chain and len(chain) == 1 and chain[0].op == "=" and chain[0].value is not None:
                return chain[0].value
        return expr

    def _bind(self, scope: ScopeNode, name: str, binding: Binding) -> None:
        self.bindings.setdefault((id(scope), name), []).append(binding)

    def _walk(self) -> None:
        """One pass: the indexed classes' nodes and the names each scope binds (parents are built
        only when asked for). Hand-rolled over the fields that can hold child nodes
        (``_CHILD_FIELDS``): ``ast.walk`` + ``iter_child_nodes`` cost twice as much, and a ``getattr``
        of every field of every ``Name`` and ``Constant`` (most of a module's nodes) half of the rest."""
        by_type, fields_of, leaves = self.by_type, _CHILD_FIELDS, _LEAVES
        stack: list[tuple[ast.AST, ScopeNode]] = [(self.tree, self.tree)]
        pop, push = stack.pop, stack.append
        while stack:
            node, scope = pop()
            cls = node.__class__
            if cls in _INDEXED:
                by_type.setdefault(cls, []).append(node)
            inner: ScopeNode = node if cls in _SCOPE_TYPES else scope  # type: ignore[assignment]
            if cls in _CONTAINER_TYPES:
                self.containers.append(node)
            for name in fields_of[cls]:
                value = getattr(node, name, None)
                if value.__class__ is list:
                    for item in value:
                        # Dict.keys has None for `**x`, kw_defaults for no default
                        if item is not None and item.__class__ not in leaves:
                            push((item, inner))
                elif value is not None and value.__class__ not in leaves:
                    push((value, inner))
            if cls in _BINDER_TYPES:
                self._collect(node, scope)

    def _collect(self, node: ast.AST, scope: ScopeNode) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if scope is self.tree:
                self.functions[node.name] = node
            args = node.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                if arg is not None:
                    self._bind(node, arg.arg, Binding((arg.lineno, arg.col_offset), "", None, node))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                local = (alias.asname or alias.name).split(".")[0]
                self.modules.add(local)
                if isinstance(node, ast.ImportFrom):
                    self.imports[local] = (node.module or "", node.level, alias.name)
                else:
                    self.imports[local] = (alias.name if alias.asname else local, 0, None)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            self._assignment(node, scope)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.With | ast.AsyncWith | ast.NamedExpr):
            targets = (
                [node.target]
                if isinstance(node, ast.For | ast.AsyncFor | ast.NamedExpr)
                else [i.optional_vars for i in node.items if i.optional_vars is not None]
            )
            value = node.value if isinstance(node, ast.NamedExpr) else None
            for target in targets:
                for name in _names(target):
                    self._bind(
                        scope,
                        name.id,
                        Binding((name.lineno, name.col_offset), "=" if value else "", value, node),
                    )

    def _assignment(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign, scope: ScopeNode) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                if isinstance(node, ast.AugAssign):
                    op = "+=" if isinstance(node.op, ast.Add) else ""
                elif node.value is not None and _passes_through(node.value, target.id):
                    op = "~"
                else:
                    op = "=" if node.value is not None else ""
                self._bind(scope, target.id, Binding((node.lineno, node.col_offset), op, node.value, node))
            else:
                for name in _names(target):  # tuple unpacking: the parts are unknown
                    self._bind(scope, name.id, Binding((name.lineno, name.col_offset), "", None, node))


def _start(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def _names(target: ast.AST) -> Iterator[ast.Name]:
    """Every name in a target (``a, b``; ``self.x`` gives ``self``; ``d[k]`` gives ``d`` and ``k``)."""
    if isinstance(target, ast.Name):  # most loop and `with` targets: no walk
        yield target
        return
    stack = [target]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            yield node
            continue
        for name in _CHILD_FIELDS[node.__class__]:
            value = getattr(node, name, None)
            if value.__class__ is list:
                stack.extend(v for v in value if v is not None)
            elif value is not None:
                stack.append(value)


def _passes_through(value: ast.expr, name: str) -> bool:
    """``name = fill_vars(agent, name)`` or ``name = name.strip()``: the text of ``name`` itself, handed
    to a call that gives it back (filled or trimmed). Not ``name.format(...)``, whose arguments are
    new text, and not a call that only uses a part of it (``name[:10]``, ``len(name)``)."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == name:
        return func.attr in ("strip", "lstrip", "rstrip")
    if isinstance(func, ast.Name) and func.id in ("len", "str", "repr", "sorted", "list", "hash"):
        return False
    passed = (*value.args, *(k.value for k in value.keywords))
    return any(isinstance(a, ast.Name) and a.id == name for a in passed)


def _chain(bindings: list[Binding]) -> list[Binding]:
    """From the last plain binding on: ``prompt = "..."; prompt += more`` → both, in order."""
    last = max((i for i, b in enumerate(bindings) if b.op not in CONTINUING), default=0)
    return bindings[last:]


def list_elements(module: PyModule, iterated: ast.Name) -> list[ast.expr] | None:
    """What ``for item in parts:`` iterates when ``parts`` is a list its scope writes: ``parts =
    [...]`` and the ``parts.append(x)`` / ``parts.extend([...])`` calls before it is iterated (or
    passed on: ``iterated`` may be the argument of a call that is followed), in source order. None
    when the list comes from elsewhere or is changed in a way not read here."""
    chain = module.resolve(iterated)
    if not chain or len(chain) != 1 or chain[0].op != "=" or not isinstance(chain[0].value, ast.List):
        return None
    start, name = chain[0].at, iterated.id
    used = (iterated.lineno, iterated.col_offset)
    scope = module.scope_of(chain[0].stmt)
    added: list[tuple[tuple[int, int], list[ast.expr]]] = []
    for call in module.of_type(ast.Call):
        func = call.func
        if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
            continue
        if func.value.id != name:
            continue
        at = (call.lineno, call.col_offset)
        if not start < at < used or module.scope_of(call) is not scope:
            continue
        if func.attr == "append" and len(call.args) == 1:
            added.append((at, [call.args[0]]))
        elif func.attr == "extend" and len(call.args) == 1 and isinstance(call.args[0], ast.List | ast.Tuple):
            added.append((at, list(call.args[0].elts)))
        elif func.attr in ("append", "extend", "insert", "sort", "reverse"):
            return None  # an order or an element this cannot read
    elements = list(chain[0].value.elts)
    for _, found in sorted(added, key=lambda a: a[0]):
        elements.extend(found)
    return [e for e in elements if not isinstance(e, ast.Starred)]


def dotted(node: ast.AST) -> str | None:
    """``self.client.messages`` for Name / Attribute chains, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def callee(node: ast.Call) -> str:
    """The called name: ``now`` for ``datetime.now()``, ``dumps`` for ``json.dumps(x)``."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def keyword(node: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in node.keywords if k.arg == name), None)


Function = ast.FunctionDef | ast.AsyncFunctionDef


def local_function(module: PyModule, call: ast.Call) -> Function | None:
    """The function of this module that ``f(...)`` (module level) or ``self.f(...)`` / ``cls.f(...)``
    (a method of the class the call is written in) runs, else None."""
    func = call.func
    if isinstance(func, ast.Name):
        if func.id not in module.functions:
            return None
        chain = module.resolve(func)
        # A parameter or local name of the same spelling shadows the module's function.
        if chain and not isinstance(chain[0].stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        return module.functions[func.id]
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    if func.value.id not in ("self", "cls"):
        return None
    owner = next((a for a in module.ancestors(call) if isinstance(a, ast.ClassDef)), None)
    if owner is None:
        return None
    for stmt in owner.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == func.attr:
            return stmt
    return None


def return_value(func: Function) -> ast.expr | None:
    """The value of a function's last ``return`` in the source (not counting nested functions)."""
    returns: list[ast.Return] = []
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            returns.append(node)
        stack.extend(ast.iter_child_nodes(node))
    last = max(returns, key=lambda r: (r.lineno, r.col_offset), default=None)
    return last.value if last is not None else None


def call_arguments(func: Function, call: ast.Call) -> dict[str, ast.expr]:
    """Parameter name → the argument a call passes for it (``self`` / ``cls`` of a method called
    through an attribute are not passed; ``*args`` / ``**kwargs`` are not followed)."""
    params = [*func.args.posonlyargs, *func.args.args]
    if isinstance(call.func, ast.Attribute) and params and params[0].arg in ("self", "cls"):
        params = params[1:]
    passed: dict[str, ast.expr] = {}
    for param, arg in zip(params, call.args, strict=False):
        if isinstance(arg, ast.Starred):
            break
        passed[param.arg] = arg
    names = {p.arg for p in (*params, *func.args.kwonlyargs)}
    for k in call.keywords:
        if k.arg in names:
            passed[k.arg] = k.value
    return passed


@contextmanager
def following(
    func: Function, call: ast.Call, expanding: set[int], params: dict[int, dict[str, ast.expr]]
) -> Iterator[None]:
    """While a call into ``func`` is followed: ``func`` is not followed again inside itself, and its
    parameters read as what ``call`` passes (restored after, for a recursive or nested follow)."""
    key = id(func)
    expanding.add(key)
    saved = params.get(key)
    params[key] = call_arguments(func, call)
    try:
        yield
    finally:
        expanding.discard(key)
        if saved is None:
            del params[key]
        else:
            params[key] = saved


def dict_entry(node: ast.Dict, key: str) -> ast.expr | None:
    """The value of a string key written in a dict display, else None."""
    for k, v in zip(node.keys, node.values, strict=True):
        if isinstance(k, ast.Constant) and k.value == key:
            return v
    return None
