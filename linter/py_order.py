"""Order and serialisation in Python prompt text: ``json.dumps`` without ``sort_keys`` (CW201) and
iteration without a stable order (CW202).

A set of strings iterates in hash order, which changes from one process to the next (string hashing
is randomised), and a directory listing in the file system's order: both are warnings, with
``sorted(...)`` as the fix. A dict iterates in insertion order: when the dict is a literal (or a
comprehension over one) in the same module, that order is the source's and nothing is reported;
when its origin is not visible here, the finding is ``info``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .findings import Edit, Hit, Severity
from .py_source import PyModule, callee, dotted, keyword
from .vocab import words

_JSON_CALLS = frozenset({"dumps", "json_dumps", "to_json"})
_VIEWS = {"items": "sorted({0})", "keys": "sorted({0})", "values": ""}
_LISTINGS = frozenset({"listdir", "scandir", "glob", "iglob", "rglob", "iterdir"})
_ORDERS = {
    "set": ("set", "hash order, which changes from one process to the next"),
    "listing": ("directory listing", "the file system's order, which differs between machines"),
    "mapping": ("mapping", "insertion order"),
}


def json_hits(module: PyModule, node: ast.Call) -> Iterator[Hit]:
    """CW201 for ``json.dumps(x)`` / ``orjson.dumps(x)`` without sorted keys; the fix adds them."""
    name = callee(node)
    if name not in _JSON_CALLS or not node.args or any(k.arg is None for k in node.keywords):
        return
    if _literal_ordered(module, node.args[0]) or _from_model(module, node.args[0]):
        return  # a dict written in the source, or a pydantic schema / dump: the same order every time
    label = f"{dotted(node.func) or name}()"
    # Built by the same code each time, a dict keeps its order: a warning only when the data is
    # visibly from elsewhere or iterated from an unordered source, else a note.
    # `json.dumps(json.loads(text), indent=2)` pretty-prints text: the keys keep the text's order.
    varying = _varying(module, node.args[0]) and not _reformatted(module, node.args[0])
    level: Severity | None = None if varying else "info"
    if isinstance(node.func, ast.Attribute) and dotted(node.func.value) == "orjson":
        option = keyword(node, "option")
        if option is None or "OPT_SORT_KEYS" not in module.segment(option.value):
            yield Hit("CW201", *module.span(node.func), {"value": label}, severity=level)
        return
    sort_keys = keyword(node, "sort_keys")
    if sort_keys is not None and not (
        isinstance(sort_keys.value, ast.Constant) and not sort_keys.value.value
    ):
        return  # sort_keys=True, or a value we cannot judge
    if sort_keys is not None:
        edit = Edit(*module.span(sort_keys.value), "True")
    else:
        last = max(module.span(a)[1] for a in [*node.args, *(k.value for k in node.keywords)])
        edit = Edit(last, last, ", sort_keys=True")
    yield Hit("CW201", *module.span(node.func), {"value": label}, (edit,), severity=level)


def _reformatted(module: PyModule, node: ast.expr) -> bool:
    """The value is ``json.loads(...)`` itself (written in the call, or bound to the name just before)."""
    value: ast.expr | None = node
    if isinstance(node, ast.Name):
        chain = module.resolve(node)
        value = chain[0].value if chain and chain[0].op == "=" else None
    return isinstance(value, ast.Call) and callee(value) == "loads"


def _varying(module: PyModule, node: ast.expr, depth: int = 0) -> bool:
    """Data whose key order is not this code's: parsed from another service (``resp.json()``,
    ``json.loads``), merged (``{**a, **b}``), or built by iterating a set, a listing or a dict view."""
    if isinstance(node, ast.Name) and depth < 3:
        chain = module.resolve(node)
        value = chain[0].value if chain and chain[0].op == "=" else None
        return value is not None and _varying(module, value, depth + 1)
    if isinstance(node, ast.Call):
        return callee(node) in ("loads", "safe_load") or (callee(node) == "json" and not node.args)
    if isinstance(node, ast.Dict):
        return any(k is None for k in node.keys)
    if isinstance(node, ast.DictComp | ast.ListComp | ast.GeneratorExp):
        return any(_unordered_source(module, g.iter, depth) for g in node.generators)
    return False


def _unordered_source(module: PyModule, iterable: ast.expr, depth: int) -> bool:
    """A set or a listing; a dict view only when the dict itself is from elsewhere (a view of a
    dict this code fills, such as one built from a model's schema, keeps the order it was filled in)."""
    found = _unordered(module, iterable)
    if found is None:
        return False
    if found[0] != "mapping":
        return True
    assert isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute)
    return _varying(module, iterable.func.value, depth + 1)


def order_hits(module: PyModule, iterable: ast.expr) -> Iterator[Hit]:
    """CW202 for a set, a directory listing or a dict view iterated into the text."""
    found = _unordered(module, iterable)
    if found is None:
        return
    kind, view = found
    start, end = module.span(iterable)
    label = module.segment(iterable)
    what, order = _ORDERS["mapping" if view else kind]
    args = {"value": label, "method": view or kind, "what": what, "order": order, "remedy": "`sorted(...)`"}
    if view:
        fix = _VIEWS[view]
        edits = (Edit(start, end, fix.format(label)),) if fix else ()
        # Insertion order is stable for a mapping built the same way each time: without its origin
        # in sight this is a question, not a verdict.
        yield Hit("CW202", start, end, args, edits, severity="info")
        return
    yield Hit("CW202", start, end, args, (Edit(start, end, f"sorted({label})"),))


def _unordered(module: PyModule, node: ast.expr) -> tuple[str, str] | None:
    """("set" | "listing", "") or ("mapping", view method) when iterating ``node`` has no fixed order."""
    if isinstance(node, ast.Set | ast.SetComp):
        return "set", ""
    if isinstance(node, ast.Call):
        name = callee(node)
        if isinstance(node.func, ast.Name) and name in ("set", "frozenset"):
            return "set", ""
        if name in _LISTINGS:
            return "listing", ""
        if isinstance(node.func, ast.Attribute) and name in _VIEWS and not node.args:
            return None if _literal_ordered(module, node.func.value) else ("mapping", name)
        return None
    if isinstance(node, ast.Name):
        value = module.value_of(node)
        if value is not node and not isinstance(value, ast.Name):
            found = _unordered(module, value)
            return found if found is not None and found[0] != "mapping" else None
    return None


_MODEL_METHODS = frozenset({"model_json_schema", "model_dump", "json_schema", "schema", "dict"})


def _from_model(module: PyModule, node: ast.expr, depth: int = 0) -> bool:
    """A JSON schema or a model dump: generated from a class, so in the same order every time."""
    if isinstance(node, ast.Call) and callee(node) in _MODEL_METHODS and isinstance(node.func, ast.Attribute):
        return True
    name = dotted(node.func) if isinstance(node, ast.Call) else dotted(node)
    ws = set(words(name or ""))
    if ws & {"schema", "schemas"} or {"model", "description"} <= ws:
        return True  # `resolved_schema`, `self._schema`, `generate_model_description(Model)`
    value = module.value_of(node)
    return value is not node and depth < 3 and _from_model(module, value, depth + 1)


def _literal_ordered(module: PyModule, node: ast.expr, depth: int = 0) -> bool:
    """A dict / list literal (or a name bound once to one): its order is the source's."""
    if isinstance(node, ast.Dict | ast.List | ast.Tuple):
        return all(k is not None for k in getattr(node, "keys", ()))  # `**other` merges an unknown order
    value = module.value_of(node)
    return value is not node and depth < 3 and _literal_ordered(module, value, depth + 1)
