"""Python into the Jinja template it renders: ``tpl.render(now=datetime.now())``.

The template is the one named by ``env.get_template("x.j2")`` (looked up beside the module and in
the folders above it, also under ``templates/`` and ``prompts/``), or written inline in
``Template("...")`` / ``env.from_string("...")``. Each volatile keyword is judged where the
template puts it: before static text it is a finding, reported where the value is produced (the
keyword in the Python call) and naming the template line; at the very end it is not.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator

import jinja2

from .checks_template import check_template, system_ranges
from .context import Context
from .findings import Hit
from .frequency import Frequency
from .py_sites import resolved
from .py_source import PyModule, callee
from .py_values import Values
from .sources import Source, find_beside
from .template_scan import scan_template
from .vocab import Volatile

_FOLDERS = ("", "templates", "prompts")
_VOLATILE_CODES = frozenset({"CW101", "CW102", "CW103"})


def render_hits(ctx: Context, module: PyModule) -> Iterator[Hit]:
    for node in module.of_type(ast.Call):
        if callee(node) == "render" and isinstance(node.func, ast.Attribute):
            yield from _render(ctx, module, node)


def _render(ctx: Context, module: PyModule, call: ast.Call) -> Iterator[Hit]:
    values = Values(module, set(), [])
    volatile: dict[str, tuple[ast.expr, Volatile, Frequency]] = {}
    for k in call.keywords:
        if k.arg is None:
            continue
        piece = values.piece(k.value)
        if piece.volatile is not None:
            volatile[k.arg] = (k.value, piece.volatile, piece.frequency)
    if not volatile:
        return
    assert isinstance(call.func, ast.Attribute)
    found = _template(ctx.source.path, module, call.func.value)
    if found is None:
        return
    where, text = found
    try:
        scan = scan_template(text, {name: kind for name, (_, kind, _) in volatile.items()})
    except jinja2.TemplateSyntaxError:
        return
    for piece in scan.pieces:
        if piece.label in volatile and piece.frequency == "request":  # no format in the template
            piece.frequency = volatile[piece.label][2]
    here = Context(Source(where, text, "template"), ctx.settings, model=ctx.model)
    for hit in check_template(here, text, scan, system_ranges(text, False, scan)):
        if hit.code not in _VOLATILE_CODES or hit.args.get("value") not in volatile:
            continue
        expr = volatile[hit.args["value"]][0]
        line = text.count("\n", 0, hit.start) + 1
        label = f"{module.segment(expr).splitlines()[0][:60]} (as {hit.args['value']} in {where}:{line})"
        yield Hit(hit.code, *module.span(expr), {**hit.args, "value": label}, severity=hit.severity)


def _template(path: str, module: PyModule, receiver: ast.expr) -> tuple[str, str] | None:
    """(where, text) of the template a ``.render`` is called on, when it can be found."""
    value = resolved(module, receiver)
    if not isinstance(value, ast.Call) or not value.args:
        return None
    arg = value.args[0]
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return None
    name = callee(value)
    if name in ("Template", "from_string"):
        return f"{os.path.basename(path)} (inline template)", arg.value
    if name != "get_template":
        return None
    found = find_beside(os.path.dirname(os.path.abspath(path)), arg.value, _FOLDERS)
    return (os.path.relpath(found[0]), found[1]) if found is not None else None
