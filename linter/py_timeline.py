"""A Python expression that builds prompt text, read as a timeline of static text and values.

The timeline is the template reader's (``template_scan.Piece``), so the template rules run on it
unchanged. Text is followed through string literals, f-strings, ``+``, ``%``, ``str.format``,
``str.join``, ``textwrap.dedent`` / ``.strip()``, ``"text" * n``, local names (``prompt = ...;
prompt += ...``), and functions and methods (``self.compose(...)``) of the module that return text,
their parameters bound to what the call passes; anything else is one value, classified by what it
calls and the names it reads (``datetime.now()``, ``uuid4()``, ``request_id``, ``user.email``). A
template loaded at run time and filled with ``.format`` (``self.instruction_template.format(...)``)
is its arguments, each followed by template text of unknown length.

The module is long because each of these ways of building text is a short reader of its own, and
they call one another (an f-string's field can be a ``.format`` call of a function's return value).

Besides the timeline it reports what the template rules cannot see in Python: JSON serialised
without ``sort_keys`` (CW201, with a fix) and sets or dict views iterated into the text (CW202).
"""

from __future__ import annotations

import ast
import os
import re
import string
from collections.abc import Iterator, Sequence
from dataclasses import replace

from .findings import Hit
from .py_imports import imported_function
from .py_order import order_hits
from .py_source import (
    Binding,
    PyModule,
    callee,
    dotted,
    following,
    local_function,
    return_value,
)
from .py_values import Values, evaluated_at
from .template_scan import OPAQUE_TEMPLATE, Piece, Scan, field_piece
from .vocab import words

MAX_DEPTH = 8
MAX_NESTED_MODULES = 3  # a function of another module calling into a third, and a fourth
MAX_SUMMARIES = 8192
_TEXT_FUNCS = frozenset({"dedent", "cleandoc", "str"})
_TEXT_METHODS = frozenset({"strip", "lstrip", "rstrip"})
_PERCENT = re.compile(r"%(?:\((?P<key>\w+)\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[diouxXeEfFgGcrsa%]")


class Timeline:
    """Build with :meth:`text`; read ``scan.pieces`` and ``hits``."""

    def __init__(self, module: PyModule, placeholders: bool = False, system: bool = False) -> None:
        self.m = module
        # The instructions (a system site): a template loaded at run time is judged as text of
        # its own (`_opaque_format`) only there; in a user turn its fields are at the end anyway.
        self.system = system
        # `{name}` in literals is a field: filled by a `.format(...)` around them (its arguments
        # here), or later by a template library (LangChain).
        self.placeholders = placeholders
        self._args: list[ast.expr] = []
        self._kwargs: dict[str, ast.expr] = {}
        self._auto = 0
        self.scan = Scan()
        self.hits: list[Hit] = []
        self._depth = 0
        self._expanding: set[int] = set()
        # id(function) -> its parameters' arguments, while a call of a function of this module is
        # followed: a parameter is then the value the call passes (`compose(context=now_str())`).
        self._params: dict[int, dict[str, ast.expr]] = {}
        self._values = Values(module, self._expanding, self.hits, self._params)

    # --- text ------------------------------------------------------------------------------------

    def text(self, expr: ast.expr) -> None:
        """Append the pieces of an expression whose value is prompt text."""
        if self._depth > MAX_DEPTH:
            self.value(expr)
            return
        self._depth += 1
        try:
            self._text(expr)
        finally:
            self._depth -= 1

    def chain(self, bindings: Sequence[Binding]) -> None:
        """Append the pieces of ``name = ...`` and the ``name += ...`` after it."""
        for binding in bindings:
            if binding.op == "~" and isinstance(binding.value, ast.Call):
                self._passed_through(binding.value, binding.stmt)
            elif binding.value is not None:
                self.text(binding.value)
                for loop in self._loops(binding):
                    self.hits.extend(order_hits(self.m, loop.iter))

    def _passed_through(self, call: ast.Call, stmt: ast.AST) -> None:
        """``text = fill_vars(agent, text)``: the text so far stays where it is; what else the call is
        given is not text to follow, but a clock or id among it may be written into the text."""
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        own = {t.id for t in targets if isinstance(t, ast.Name)}
        for arg in (*call.args, *(k.value for k in call.keywords)):
            if isinstance(arg, ast.Constant) or (isinstance(arg, ast.Name) and arg.id in own):
                continue
            piece = self._values.piece(arg)
            if piece.volatile is not None:
                self.scan.pieces.append(piece)

    def _text(self, expr: ast.expr) -> None:
        if isinstance(expr, ast.Constant):
            if self.placeholders and isinstance(expr.value, str):
                self._format(expr)
            else:
                self._static(expr)
        elif isinstance(expr, ast.JoinedStr):
            self._fstring(expr)
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            self.text(expr.left)
            self.text(expr.right)
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and _is_str(expr.left):
            self._percent(expr)
        elif (repeated := _repeated(expr)) is not None:
            start, end = self.m.span(expr)
            self.scan.pieces.append(Piece(True, start, end, text=repeated[0] * repeated[1]))
        elif isinstance(expr, ast.Call):
            self._call(expr)
        elif isinstance(expr, ast.Name):
            self._name(expr)
        elif isinstance(expr, ast.List) and expr.elts and all(_is_text(e) for e in expr.elts):
            # `Agent(instructions=[RULES, f"Today is {now}."])`: the parts, joined in this order.
            for element in expr.elts:
                self.text(element)
        else:
            self.value(expr)

    def _static(self, node: ast.Constant, start: int | None = None) -> None:
        text = node.value if isinstance(node.value, str) else str(node.value)
        at = self.m.content_start(node) if start is None and isinstance(node.value, str) else start
        at = self.m.span(node)[0] if at is None else at
        self.scan.pieces.append(Piece(True, at, at + len(text), text=text))

    def _fstring(self, node: ast.JoinedStr) -> None:
        start, end = self.m.span(node)
        cursor = start
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                # Python 3.11 gives an f-string's literal parts the position of the whole f-string.
                found = self.m.source.text.find(part.value, cursor, end)
                at = found if found >= 0 else cursor
                self._static(part, at)
                cursor = at + len(part.value) if found >= 0 else cursor
            elif isinstance(part, ast.FormattedValue):
                self.value(part.value, part.format_spec)
                cursor = max(cursor, self.m.span(part.value)[1])

    def _percent(self, node: ast.BinOp) -> None:
        assert isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)
        fmt = node.left.value
        right = node.right
        items = right.elts if isinstance(right, ast.Tuple) else [right]
        keyed = dict(_dict_items(right)) if isinstance(right, ast.Dict) else {}
        base = self.m.content_start(node.left)
        position = last = 0
        for m in _PERCENT.finditer(fmt):
            self._literal(fmt[last : m.start()], base + last)
            last = m.end()
            if m.group() == "%%":
                continue
            arg = keyed.get(m.group("key") or "") if keyed else None
            if arg is None and not keyed and position < len(items):
                arg, position = items[position], position + 1
            self._field(arg, m.group("key") or "", base + m.start(), base + m.end())
        self._literal(fmt[last:], base + last)

    def _format(self, fmt: ast.Constant) -> None:
        """A literal with ``{name}`` fields: literal parts, then each field's argument."""
        assert isinstance(fmt.value, str)
        template, base = fmt.value, self.m.content_start(fmt)
        positional, kwargs = self._args, self._kwargs
        offset = 0
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError:
            self._static(fmt)
            return
        for literal, field, spec, _ in parsed:
            self._literal(literal, base + offset)
            offset += len(literal)
            if field is None:
                continue
            head = re.split(r"[.\[]", field, maxsplit=1)[0]
            arg: ast.expr | None
            if head.isdigit() or head == "":
                index = int(head) if head else self._auto
                self._auto += 1
                arg = positional[index] if index < len(positional) else None
            else:
                arg = kwargs.get(head)
            written = "{" + field + (":" + spec if spec else "") + "}"
            at = self.m.source.text.find("{" + field, base + offset)
            at = at if at >= 0 else base + offset
            self._field(arg, field, at, at + len(written), spec_text=spec or "")
            offset = at - base + len(written)

    def _literal(self, text: str, at: int) -> None:
        if text:
            self.scan.pieces.append(Piece(True, at, at + len(text), text=text))

    def _field(
        self, arg: ast.expr | None, name: str, start: int = -1, end: int = -1, spec_text: str = ""
    ) -> None:
        passed = isinstance(arg, ast.Name) and self._passed(arg, self.m.resolve(arg)) is not None
        if arg is not None and not spec_text and (passed or self._text_name(arg)):
            saved, self.placeholders = self.placeholders, False  # an argument is text, not a template
            try:
                self.text(arg)
            finally:
                self.placeholders = saved
            return
        if arg is not None:
            self.value(arg, spec_text=spec_text)
            return
        end = max(start, end if end >= 0 else start + len(name) + 2)
        self.scan.pieces.append(field_piece(name, spec_text, start, end))

    def _call(self, node: ast.Call) -> None:
        func, name = node.func, callee(node)
        if isinstance(func, ast.Attribute) and name == "format" and self._text_name(func.value):
            saved = self.placeholders, self._args, self._kwargs, self._auto
            self.placeholders, self._args, self._auto = True, node.args, 0
            self._kwargs = {k.arg: k.value for k in node.keywords if k.arg}
            try:
                self.text(func.value)
            finally:
                self.placeholders, self._args, self._kwargs, self._auto = saved
            return
        if isinstance(func, ast.Attribute) and name == "join" and _is_str(func.value):
            self._join(node, func.value)
            return
        if name in _TEXT_FUNCS and len(node.args) == 1 and not node.keywords and _builds_text(node.args[0]):
            self.text(node.args[0])
            return
        if isinstance(func, ast.Attribute) and name in _TEXT_METHODS and _builds_text(func.value):
            self.text(func.value)
            return
        if self._local(node) or self._borrow(node):
            return
        if self.system and _template_format(node):
            self._opaque_format(node)
            return
        self.value(node)

    def _local(self, call: ast.Call) -> bool:
        """A function or method of this module: the text it returns, its parameters bound to what
        this call passes."""
        func = local_function(self.m, call)
        returned = return_value(func) if func is not None else None
        if func is None or returned is None or id(func) in self._expanding:
            return False
        first = len(self.scan.pieces)
        with following(func, call, self._expanding, self._params):
            self.text(returned)
        frozen = evaluated_at(self.m, call)
        if frozen is not None:
            # Called while a module constant or an object is built: whatever clock the function
            # reads is read once then (`PROMPT = f"..{stamp()}.."`), as for a call in place.
            for piece in self.scan.pieces[first:]:
                if piece.volatile is not None:
                    piece.frequency = frozen
        return True

    def _opaque_format(self, call: ast.Call) -> None:
        """``self.instruction_template.format(CONTEXT=...)`` with the template loaded at run time (a
        YAML or text file): each argument fills a field somewhere in it, with template text after it
        unless it is the last field, which cannot be seen from here."""
        start = self.m.span(call)[1]
        for arg in (*call.args, *(k.value for k in call.keywords if k.arg)):
            self._field(arg, "")
            self.scan.pieces.append(Piece(True, start, start, include=OPAQUE_TEMPLATE))

    def _borrow(self, call: ast.Call) -> bool:
        """A function of another module of the tree: its text, placed at the call (the offsets of
        the other file mean nothing here), its volatile values named with where they are made."""
        pieces = borrowed_text(self.m, call)
        if not pieces or not any(p.volatile for p in pieces):
            return False  # nothing volatile in it: the call is judged here, by what it is passed
        start, end = self.m.span(call)
        head = _label(self.m.segment(call))
        frozen = evaluated_at(self.m, call)  # see _local
        for piece in pieces:
            if piece.static:
                self.scan.pieces.append(replace(piece, start=start, end=start))
            else:
                label = f"{head} → {piece.label}" if piece.volatile else head
                frequency = frozen if frozen is not None and piece.volatile else piece.frequency
                self.scan.pieces.append(
                    replace(piece, start=start, end=end, label=label, frequency=frequency)
                )
        return True

    def _text_name(self, node: ast.expr) -> bool:
        """Text we can follow, directly or through a name bound to it."""
        if isinstance(node, ast.Name):
            chain = self.m.resolve(node)
            return bool(chain) and chain[0].op == "=" and _builds_text(chain[0].value)  # type: ignore[index]
        return _builds_text(node)

    def _join(self, node: ast.Call, sep: ast.expr) -> None:
        if len(node.args) != 1:
            self.value(node)
            return
        (arg,) = node.args
        if isinstance(arg, ast.List | ast.Tuple) and not any(isinstance(e, ast.Starred) for e in arg.elts):
            for i, element in enumerate(arg.elts):
                if i:
                    self.text(sep)
                self.text(element)
            return
        self.hits.extend(order_hits(self.m, arg))
        self.value(arg)

    def _name(self, node: ast.Name) -> None:
        chain = self.m.resolve(node)
        passed = self._passed(node, chain)
        if passed is not None:
            saved, self.placeholders = self.placeholders, False  # an argument is text, not a template
            self._expanding.add(id(passed))
            try:
                self.text(passed)
            finally:
                self._expanding.discard(id(passed))
                self.placeholders = saved
            return
        if (
            chain
            and chain[0].op == "="
            and all(b.value is not None for b in chain)
            and (_builds_text(chain[0].value) or (self.system and _template_format(chain[0].value)))
            and id(chain[0]) not in self._expanding
        ):
            self._expanding.update(id(b) for b in chain)
            try:
                self.chain(chain)
            finally:
                self._expanding.difference_update(id(b) for b in chain)
            return
        self.value(node)

    def _passed(self, node: ast.Name, chain: list[Binding] | None) -> ast.expr | None:
        """The argument a followed call passes for parameter ``node``, else None."""
        if not chain or chain[0].op or not isinstance(chain[0].stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            return None
        passed = self._params.get(id(chain[0].stmt), {}).get(node.id)
        return passed if passed is not None and id(passed) not in self._expanding else None

    def _loops(self, binding: Binding) -> Iterator[ast.For | ast.AsyncFor]:
        """The loops a ``prompt += ...`` sits in, up to its function."""
        for parent in self.m.ancestors(binding.stmt):
            if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module | ast.ClassDef):
                return
            if isinstance(parent, ast.For | ast.AsyncFor):
                yield parent

    # --- values ----------------------------------------------------------------------------------

    def value(self, expr: ast.expr, spec: ast.expr | None = None, spec_text: str = "") -> None:
        """One value in the text (``py_values`` says whether it is volatile)."""
        plain = isinstance(expr, ast.Call) and spec is None and not spec_text
        if plain and (self._local(expr) or self._borrow(expr)):  # type: ignore[arg-type]
            return  # `f"{environment_block()}..."`: the text the function returns
        if spec is not None:
            spec_text = "".join(
                p.value
                for p in getattr(spec, "values", [])
                if isinstance(p, ast.Constant) and isinstance(p.value, str)
            )
        self.scan.pieces.append(self._values.piece(expr, spec_text))


def _is_text(node: ast.expr) -> bool:
    """A string literal, an f-string or a name: an element of a list of instruction texts."""
    return isinstance(node, ast.Name | ast.JoinedStr) or _is_str(node)


def _is_str(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _repeated(node: ast.expr) -> tuple[str, int] | None:
    """``"text " * 3``: a literal repeated a literal number of times."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return None
    text, count = (node.left, node.right) if _is_str(node.left) else (node.right, node.left)
    if _is_str(text) and isinstance(count, ast.Constant) and type(count.value) is int:
        return str(text.value), min(max(count.value, 0), 10_000)  # type: ignore[attr-defined]
    return None


def _builds_text(node: ast.expr | None) -> bool:
    """Whether an expression's value is text we can follow (else it is one value)."""
    if node is None:
        return False
    if _repeated(node) is not None:
        return True
    if _is_str(node) or isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _builds_text(node.left) or (isinstance(node.op, ast.Add) and _builds_text(node.right))
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and callee(node) in ("format", "join", *_TEXT_METHODS):
            return _builds_text(func.value)
        return callee(node) in ("dedent", "cleandoc") and bool(node.args) and _builds_text(node.args[0])
    return False


_TEMPLATE_WORDS = frozenset({"template", "prompt", "instruction", "instructions"})


def _template_format(node: ast.expr | None) -> bool:
    """``self.instruction_template.format(...)``: a template loaded at run time, filled here."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and _template_name(node.func.value)
    )


def _template_name(node: ast.expr) -> bool:
    """``self.instruction_template``, ``PROMPT_TEMPLATE``: a name that says it holds a template."""
    name = dotted(node)
    last = name.rsplit(".", 1)[-1] if name else ""
    return bool(set(words(last)) & _TEMPLATE_WORDS)


def _dict_items(node: ast.Dict) -> Iterator[tuple[str, ast.expr]]:
    for key, value in zip(node.keys, node.values, strict=True):
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            yield key.value, value


# (file, function) -> the function's text as pieces without offsets; None when it returns no text.
_SUMMARIES: dict[tuple[str, str], tuple[Piece, ...] | None] = {}
_SUMMARIZING: list[tuple[str, str]] = []


def borrowed_text(module: PyModule, call: ast.Call) -> tuple[Piece, ...] | None:
    """The text a call into another module's function returns (once per function and process)."""
    found = imported_function(module, call)
    if found is None:
        return None
    target, func = found
    key = (target.source.path, func.name)
    if key in _SUMMARIES:
        return _SUMMARIES[key]
    if key in _SUMMARIZING or len(_SUMMARIZING) >= MAX_NESTED_MODULES:
        return None  # a cycle of imports, or too deep: an opaque call
    returned = return_value(func)
    summary: tuple[Piece, ...] | None = None
    if returned is not None:
        _SUMMARIZING.append(key)
        try:
            inner = Timeline(target)
            inner.text(returned)
        finally:
            _SUMMARIZING.pop()
        summary = tuple(_portable(target, p) for p in inner.scan.pieces) or None
    if len(_SUMMARIES) < MAX_SUMMARIES:
        _SUMMARIES[key] = summary
    return summary


def _portable(module: PyModule, piece: Piece) -> Piece:
    """A piece of another file's text, kept without its offsets: static text as text; a volatile
    value with its kind, frequency and where it is made; any other value as an opaque value (a
    parameter of the function is whatever the caller passes: not judged here)."""
    if piece.static:
        return Piece(
            True, 0, 0, text=piece.text, include=piece.include, conditional=piece.conditional, borrowed=True
        )
    if piece.volatile is None:
        return Piece(False, 0, 0, label=piece.label, borrowed=True)
    line = module.source.position(piece.start)[0]
    where = f"{piece.label} in {os.path.basename(module.source.path)}:{line}"
    return Piece(False, 0, 0, volatile=piece.volatile, label=where, frequency=piece.frequency, borrowed=True)


def _label(segment: str) -> str:
    return segment.split("\n")[0][:60]
