"""Read a template with Jinja2's own parser into a timeline of static text and expressions.

Jinja nodes carry line numbers only; columns come from finding each piece in the source after the
previous one (static text verbatim, identifiers by word boundary), so positions follow source order.

The module is long because that one cursor through the source is shared by every kind of node the
scanner reads (output, branches, loops, assignments, blocks, includes): split, each part would have
to hand the cursor back and forth.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import jinja2
from jinja2 import nodes

from .frequency import Frequency, of_format, of_name
from .vocab import STRFTIME, Volatile, classify_call, classify_name, is_per_request, is_per_user, words

# The extensions real projects enable (`{% do %}`, `{% break %}`, `{% trans %}`) parse as Jinja.
_ENV = jinja2.Environment(
    keep_trailing_newline=True,
    autoescape=False,
    extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols", "jinja2.ext.i18n", "jinja2.ext.debug"],
)
SORT_FILTERS = frozenset({"sort", "dictsort"})
_FOR_TAG = re.compile(r"\{%[-+]?\s*for\b(?P<body>.*?)[-+]?%\}", re.S)
_FOR_ITER = re.compile(r"\bin\s+(?P<iter>.+?)\s*(?:\bif\b.*|\brecursive\s*)?$", re.S)

# The `include` of the text around a field of a template loaded at run time (Python's
# `self.instruction_template.format(...)`): static, of a length not known here.
OPAQUE_TEMPLATE = "?template"


@dataclass(slots=True)
class Piece:
    """Static text, or one expression the template prints (or branches / loops on)."""

    static: bool
    start: int
    end: int
    text: str = ""
    volatile: Volatile | None = None
    label: str = ""  # the identifier / call that makes the expression what it is
    per_request: bool = False
    per_user: str = ""
    conditional: bool = False  # static text whose presence depends on per-request data
    frequency: Frequency = "request"  # how often a volatile value changes
    include: str = ""  # `{% include "name" %}`: static text from another file ("?" when not a literal)
    borrowed: bool = False  # text of another Python module (a function it defines): no offsets here
    # The `{% if %}` / `{% elif %}` / `{% else %}` branches it is in, as (if number, branch number):
    # text in another branch of the same `if` is never rendered with it.
    branch: tuple[tuple[int, int], ...] = ()


@dataclass(slots=True)
class Loop:
    start: int  # the {% for %} tag
    end: int
    iter_start: int  # the iterable expression inside the tag (-1 when not located)
    iter_end: int
    iter_text: str
    node: nodes.For


@dataclass(slots=True)
class JsonUse:
    """A serialisation filter or call: ``|tojson``, ``json.dumps(x)``, ``|to_json``."""

    name: str
    start: int
    end: int
    sort_keys: bool | None  # the sort_keys argument when given literally


@dataclass(slots=True)
class Scan:
    pieces: list[Piece] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    json_uses: list[JsonUse] = field(default_factory=list)
    system_blocks: list[tuple[int, int]] = field(default_factory=list)
    literal_mappings: set[str] = field(default_factory=set)  # `{% set m = {...} %}`: ordered as written


def dotted(node: nodes.Node) -> str | None:
    """``user.profile.name`` for Name / Getattr chains, else None."""
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.Getattr):
        base = dotted(node.node)
        return f"{base}.{node.attr}" if base else None
    if (
        isinstance(node, nodes.Getitem)
        and isinstance(node.arg, nodes.Const)
        and isinstance(node.arg.value, str)
    ):
        base = dotted(node.node)
        return f"{base}.{node.arg.value}" if base else None
    return None


def callee(node: nodes.Call) -> str:
    target = node.node
    if isinstance(target, nodes.Name):
        return target.name
    if isinstance(target, nodes.Getattr):
        return target.attr
    return ""


def sorted_chain(node: nodes.Node) -> bool:
    """True when an iterable expression passes through ``|sort`` or ``|dictsort``."""
    while isinstance(node, nodes.Filter):
        if node.name in SORT_FILTERS:
            return True
        if node.node is None:
            return False
        node = node.node
    return False


class _Scanner:
    def __init__(self, text: str, aliases: dict[str, Volatile] | None = None) -> None:
        self.text = text
        self.cursor = 0
        self.scan = Scan()

        self.aliases: dict[str, Volatile] = dict(aliases or {})
        self.request_aliases: set[str] = set()
        # Loop variables over data that is not per request (`tool` in `tools`): `tool.input_schema`
        # is the tool's, not the request's input.
        self.static_aliases: set[str] = set()
        self._candidates: list[tuple[Volatile, str]] = []
        self._ifs = 0

    def locate(self, word: str, lineno: int) -> tuple[int, int]:
        """Offsets of ``word`` at or after the cursor (falling back to the node's line)."""
        pattern = re.compile(
            r"(?<!\w)" + re.escape(word) + r"(?!\w)" if word[:1].isalnum() else re.escape(word)
        )
        lines = self.text.split("\n", lineno - 1)
        line_start = len(self.text) - len(lines[-1]) if len(lines) >= lineno else 0
        for origin in (max(self.cursor, line_start), line_start, 0):
            m = pattern.search(self.text, origin)
            if m:
                return m.start(), m.end()
        return line_start, line_start

    def classify(self, expr: nodes.Node) -> Piece:
        piece = Piece(static=False, start=-1, end=-1)
        self._candidates = []
        stack: list[nodes.Node] = [expr]
        # The test of `{{ "three" if is_search else "two" }}` picks one of the branches: it is not
        # printed, so its names make the piece neither per-request nor per-user (a clock still counts).
        selectors: set[int] = set()
        while stack:
            node = stack.pop()
            stack.extend(reversed(list(node.iter_child_nodes())))
            if isinstance(node, nodes.CondExpr):
                selectors.update(id(n) for n in node.test.find_all(nodes.Node))
                selectors.add(id(node.test))
            found: Volatile | None = None
            label = ""
            if isinstance(node, nodes.Call):
                label = callee(node)
                found = classify_call(label)
                self._json_call(node, label)
            elif isinstance(node, nodes.Filter):
                label = node.name
                if node.name in ("random", "shuffle"):
                    found = "random"
                self._json_filter(node)
            elif (
                isinstance(node, nodes.Const) and isinstance(node.value, str) and STRFTIME.search(node.value)
            ):
                found, label = "timestamp", node.value
            elif isinstance(node, nodes.Name | nodes.Getattr) and node.ctx == "load":
                name = dotted(node)
                if name is None:
                    continue
                label = name
                found = self.aliases.get(name.split(".")[0]) or classify_name(name)
                printed = id(node) not in selectors
                if printed and is_per_user(name) and not piece.per_user:
                    piece.per_user = name
                head = name.split(".")[0]
                if printed and (
                    head in self.request_aliases or (is_per_request(name) and head not in self.static_aliases)
                ):
                    piece.per_request = True
                if isinstance(node, nodes.Getattr):
                    stack = [n for n in stack if not _inside(n, node)]
            if found:
                self._candidates.append((found, f"{label}()" if isinstance(node, nodes.Call) else label))
            if not piece.label and label:
                piece.label = label
        return piece

    def _json_filter(self, node: nodes.Filter) -> None:
        low = node.name.lower()
        if low == "tojson" or "json" in words(node.name) or low == "dumps":
            start, end = self.locate(node.name, node.lineno)
            self.scan.json_uses.append(JsonUse(node.name, start, end, _sort_keys_kwarg(node.kwargs)))

    def _json_call(self, node: nodes.Call, name: str) -> None:
        if name in ("dumps", "json_dumps", "to_json", "tojson"):
            start, end = self.locate(name, node.lineno)
            self.scan.json_uses.append(JsonUse(name, start, end, _sort_keys_kwarg(node.kwargs)))

    def expression(self, expr: nodes.Node, conditional: bool) -> Piece:
        piece = self.classify(expr)
        # Report the volatile value that comes first in the source: `now` in `now().strftime(...)`.
        located = sorted(
            (self.locate(label.removesuffix("()"), expr.lineno), -len(label), kind, label)
            for kind, label in self._candidates
        )
        if located:
            (piece.start, piece.end), _, piece.volatile, piece.label = located[0]
            if piece.volatile == "timestamp":
                piece.frequency = _frequency(expr, piece.label)
        elif piece.label:
            piece.start, piece.end = self.locate(piece.label, expr.lineno)
        else:
            piece.start = piece.end = self.cursor
        piece.conditional = conditional
        self.cursor = max(self.cursor, piece.start)
        return piece

    def skip_tag(self) -> None:
        end = self.text.find("%}", self.cursor)
        if end >= 0:
            self.cursor = end + 2

    def static(self, data: str, conditional: bool) -> None:
        at = self.text.find(data, self.cursor)
        if at < 0:  # whitespace control trimmed it differently: keep order, drop exact position
            at = self.cursor
        self.cursor = at + len(data)
        self.scan.pieces.append(Piece(True, at, at + len(data), text=data, conditional=conditional))

    def body(self, body: list[nodes.Node], conditional: bool) -> None:
        for node in body:
            self.statement(node, conditional)

    def statement(self, node: nodes.Node, conditional: bool) -> None:
        if isinstance(node, nodes.Output):
            for child in node.nodes:
                if isinstance(child, nodes.TemplateData):
                    self.static(child.data, conditional)
                else:
                    self.scan.pieces.append(self.expression(child, conditional))
        elif isinstance(node, nodes.For):
            self.loop(node, conditional)
        elif isinstance(node, nodes.If):
            test = self.expression(node.test, conditional)
            varies = conditional or test.volatile is not None or test.per_request
            if test.volatile:
                self.scan.pieces.append(test)
            self.skip_tag()
            if not node.elif_ and not node.else_:
                self.body(node.body, varies)
                return
            self._ifs += 1
            ident = self._ifs
            self._branch(ident, 0, lambda: self.body(node.body, varies))
            for k, branch in enumerate(node.elif_, 1):
                self._branch(ident, k, functools.partial(self.statement, branch, varies))
            self._branch(ident, len(node.elif_) + 1, lambda: self.body(node.else_, varies))
        elif isinstance(node, nodes.Assign):
            value = self.classify(node.node)
            volatile = self._candidates[0][0] if self._candidates else None
            self.skip_tag()
            for target in (
                node.target.find_all(nodes.Name) if not isinstance(node.target, nodes.Name) else [node.target]
            ):
                if volatile:
                    self.aliases[target.name] = volatile
                if value.per_request:
                    self.request_aliases.add(target.name)
                if isinstance(node.node, nodes.Dict):
                    self.scan.literal_mappings.add(target.name)
        elif isinstance(node, nodes.Block):
            start = self.cursor
            self.body(node.body, conditional)
            if "system" in words(node.name) or "instructions" in words(node.name):
                self.scan.system_blocks.append((start, self.cursor))
        elif isinstance(node, nodes.Include):
            # The included file is static text of this prompt (read where it can be found).
            name = node.template.value if isinstance(node.template, nodes.Const) else ""
            self.skip_tag()
            at = self.cursor
            self.scan.pieces.append(Piece(True, at, at, include=str(name) or "?", conditional=conditional))
        elif isinstance(node, nodes.Macro | nodes.Extends | nodes.Import | nodes.FromImport):
            return  # definitions and other files: linted where they live
        else:
            for attr in ("body", "else_"):
                inner = getattr(node, attr, None)
                if isinstance(inner, list):
                    self.body(inner, conditional)

    def _branch(self, ident: int, k: int, read: Callable[[], None]) -> None:
        first = len(self.scan.pieces)
        read()
        for piece in self.scan.pieces[first:]:
            piece.branch = ((ident, k), *piece.branch)

    def loop(self, node: nodes.For, conditional: bool) -> None:
        tag = _FOR_TAG.search(self.text, self.cursor)
        iter_start = iter_end = -1
        iter_text = ""
        if tag:
            m = _FOR_ITER.search(tag.group("body"))
            if m:
                iter_text = m.group("iter").strip()
                iter_start = tag.start("body") + m.start("iter")
                iter_end = iter_start + len(iter_text)
        start = tag.start() if tag else self.cursor
        end = tag.end() if tag else self.cursor
        self.scan.loops.append(Loop(start, end, iter_start, iter_end, iter_text, node))
        source = self.classify(node.iter)
        self.cursor = end
        if source.volatile:
            source.start, source.end = (iter_start, iter_end) if iter_start >= 0 else (start, end)
            self.scan.pieces.append(source)
        varies = conditional or source.per_request or source.volatile is not None
        for target in (
            node.target.find_all(nodes.Name) if not isinstance(node.target, nodes.Name) else [node.target]
        ):
            if source.per_request:
                self.request_aliases.add(target.name)
            else:
                self.static_aliases.add(target.name)
        self.body(node.body, varies)
        self.body(node.else_, varies)


def _frequency(expr: nodes.Node, label: str) -> Frequency:
    """How often a clock expression's text changes: by its strftime format, else by its name."""
    for const in expr.find_all(nodes.Const):
        if isinstance(const.value, str) and (found := of_format(const.value)):
            return found
    return of_name(label.removesuffix("()"))


def _inside(node: nodes.Node, parent: nodes.Node) -> bool:
    return any(child is node for child in parent.find_all(nodes.Node))


def _sort_keys_kwarg(kwargs: Sequence[nodes.Node]) -> bool | None:
    for kw in kwargs:
        if isinstance(kw, nodes.Keyword) and kw.key == "sort_keys" and isinstance(kw.value, nodes.Const):
            return bool(kw.value.value)
    return None


def field_piece(name: str, spec: str, start: int, end: int) -> Piece:
    """A ``str.format`` field filled later (``{question}``, ``{today:%Y-%m-%d}``), judged by its name
    and its format spec."""
    piece = Piece(False, start, end, label=name)
    frequency = of_format(spec) if STRFTIME.search(spec) else None
    piece.volatile = "timestamp" if frequency else classify_name(name) if name else None
    if piece.volatile == "timestamp":
        piece.frequency = frequency or of_name(name)
    piece.per_request = bool(name) and is_per_request(name)
    piece.per_user = name if name and is_per_user(name) else ""
    return piece


# `{now:%Y-%m-%d %H:%M}` in a template's text: a str.format template inside the file.
FORMAT_CLOCK = re.compile(r"\{(?P<name>[A-Za-z_][\w.]*)(?:![rsa])?:(?P<spec>[^{}\n]*%[A-Za-z][^{}\n]*)\}")


def _format_fields(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for piece in pieces:
        if not piece.static or piece.include or "%" not in piece.text:
            out.append(piece)
        else:
            out.extend(_split(piece, FORMAT_CLOCK, every=False))
    return out


def _split(piece: Piece, pattern: re.Pattern[str], every: bool) -> list[Piece]:
    """A static piece cut at ``pattern``'s fields (groups ``name`` and ``spec``): every field, or
    (``every`` false) only the volatile ones, the others staying text."""
    out: list[Piece] = []
    last = 0
    for m in pattern.finditer(piece.text):
        field = field_piece(
            m.group("name"), m.group("spec") or "", piece.start + m.start(), piece.start + m.end()
        )
        if field.volatile is None and not every:
            continue
        field.branch = piece.branch
        if m.start() > last:
            out.append(_static_part(piece, last, m.start()))
        out.append(field)
        last = m.end()
    if not last:
        out.append(piece)
    elif last < len(piece.text):
        out.append(_static_part(piece, last, len(piece.text)))
    return out


# `{context}`, `{user_input}`: the fields of a prompt file filled by `str.format` (AGiXT's prompt
# folders, LangChain's `PromptTemplate.from_file`), read in `.txt` / `.prompt` files only (Markdown
# shows `/tasks/{task_id}` routes). Two distinct names or more: one braced word in prose ("replace
# {name} with yours") is not a template.
_PLAIN_FIELD = re.compile(r"(?<![{\w])\{(?P<name>[A-Za-z_]\w*)(?:![rsa])?(?::(?P<spec>[^{}\n]*))?\}(?!\})")
PLAIN_FIELDS_MIN = 2
PLAIN_SUFFIXES = (".txt", ".prompt")


def _static_part(piece: Piece, a: int, b: int) -> Piece:
    part = Piece(True, piece.start + a, piece.start + b, text=piece.text[a:b], conditional=piece.conditional)
    part.branch = piece.branch
    return part


def scan_template(text: str, aliases: dict[str, Volatile] | None = None, plain_fields: bool = False) -> Scan:
    """Parse with Jinja2 (raises jinja2.TemplateSyntaxError) and build the timeline; ``aliases``
    names variables the caller knows to be volatile (a ``render(now=datetime.now())`` keyword)."""
    if "{{" not in text and "{%" not in text and "{#" not in text:
        whole = Piece(True, 0, len(text), text=text)
        if plain_fields and len({m.group("name") for m in _PLAIN_FIELD.finditer(text)}) >= PLAIN_FIELDS_MIN:
            return Scan(pieces=_split(whole, _PLAIN_FIELD, every=True))  # a str.format template file
        return Scan(pieces=_format_fields([whole]))  # text only
    tree = _ENV.parse(text)
    scanner = _Scanner(text, aliases)
    scanner.body(tree.body, False)
    scanner.scan.pieces = _format_fields(scanner.scan.pieces)
    return scanner.scan
