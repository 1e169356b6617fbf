"""Python rules: the template rules on each prompt a module builds, plus tool order (CW203).

Each prompt site (``py_sites``) becomes a timeline (``py_timeline``) that ``check_template`` reads
as it reads a template: a system site is a system section (CW302), the call's literal ``model``
sets the tokenizer and the cache minimum (CW401 / CW402).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .checks_template import PREFIX_RULES, check_template
from .context import Context
from .findings import Hit
from .py_imports import imported_constant
from .py_render import render_hits
from .py_sites import prompt_sites, resolved, tool_sites
from .py_source import PyModule, callee, local_function, return_value
from .py_timeline import Timeline
from .template_scan import OPAQUE_TEMPLATE, Piece

MAX_TOOL_DEPTH = 4


def check_python(ctx: Context, module: PyModule) -> Iterator[Hit]:
    text = ctx.source.text
    for site in prompt_sites(module):
        timeline = Timeline(module, placeholders=site.placeholders, system=site.system)
        if site.expr is not None:
            timeline.text(site.expr)
        else:
            timeline.chain(site.chain)
        if site.history_after and site.expr is not None:  # a message written in place
            # The history after this message is cached text of unknown length.
            end = module.span(site.expr)[1]
            timeline.scan.pieces.append(Piece(True, end, end, include=OPAQUE_TEMPLATE))
        here = Context(ctx.source, ctx.settings, model=site.model, provider=site.provider)
        system = [(0, len(text))] if site.system else []
        if site.turn:
            # The newest user turn: a value in it busts only static text after it that could be
            # cached if the value moved (the model's minimum or more), and no prefix is asked of it.
            minimum = here.info.cache.min_tokens
            yield from (
                hit
                for hit in check_template(here, text, timeline.scan, system, volatile_tail=minimum)
                if hit.code not in PREFIX_RULES
            )
        else:
            yield from check_template(here, text, timeline.scan, system)
        yield from timeline.hits
    for expr in tool_sites(module):
        yield from _tool_order(module, expr, 0)
    yield from render_hits(ctx, module)


def _tool_order(module: PyModule, expr: ast.expr, depth: int) -> Iterator[Hit]:
    """CW203: a tool list built by iterating something without a fixed order."""
    if depth > MAX_TOOL_DEPTH:
        return
    value = resolved(module, expr)
    if value is not expr:
        yield from _tool_order(module, value, depth + 1)
    elif isinstance(value, ast.List | ast.Tuple):
        for element in value.elts:
            if isinstance(element, ast.Starred):
                yield from _tool_order(module, element.value, depth + 1)
    elif isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        yield from _tool_order(module, value.left, depth + 1)
        yield from _tool_order(module, value.right, depth + 1)
    elif isinstance(value, ast.ListComp | ast.GeneratorExp):
        yield from _iterated(module, value.generators[0].iter)
    elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.args:
        name = callee(value)
        if name in ("list", "tuple"):
            yield from _tool_order(module, value.args[0], depth + 1)
            if not isinstance(value.args[0], ast.ListComp | ast.GeneratorExp | ast.Name):
                yield from _iterated(module, value.args[0])
        elif name == "map" and len(value.args) == 2:
            yield from _iterated(module, value.args[1])


def _iterated(module: PyModule, iterable: ast.expr) -> Iterator[Hit]:
    if not _fixed_order(module, iterable, 0):
        yield Hit("CW203", *module.span(iterable), {"value": module.segment(iterable)})


def _fixed_order(module: PyModule, expr: ast.expr, depth: int) -> bool:
    """A literal list or a ``sorted(...)``: directly, through a name, a constant another module of
    the tree defines (``from .tool_defs import TOOLS``), or what a function of the module returns
    (``def get_tools(self): return TOOLS``)."""
    source = resolved(module, expr)
    if isinstance(source, ast.List | ast.Tuple):
        return True  # a literal list: its order is the source's
    if isinstance(source, ast.Call) and callee(source) == "sorted":
        return True
    if depth >= MAX_TOOL_DEPTH:
        return False
    if isinstance(source, ast.Name) and module.resolve(source) is None:
        found = imported_constant(module, source.id)
        return found is not None and _fixed_order(found[0], found[1], depth + 1)
    if isinstance(source, ast.Call) and not source.args:
        func = local_function(module, source)
        returned = return_value(func) if func is not None else None
        return returned is not None and _fixed_order(module, returned, depth + 1)
    return False
