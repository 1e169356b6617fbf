"""Functions imported from other modules of the linted tree: ``from .prompts import build_system``.

A called name bound by an import is looked up the way Python would find it, in files only (nothing
is imported or run): a relative import from the importing file's package, an absolute one from
the folders above the importing file (a package root, ``src/``). The module is parsed once per
process and kept (at most ``MAX_MODULES``); a name it only re-exports (``from .build import f`` in
an ``__init__.py``) is followed up to ``MAX_HOPS`` times. What is not found is an opaque call, as
before.
"""

from __future__ import annotations

import ast
import functools
import os

from .py_source import PyModule
from .sources import Source

MAX_MODULES = 64  # parsed trees are large; what is kept of a function is its summary (py_timeline)
MAX_HOPS = 3
MAX_BYTES = 1 << 20  # a generated 5 MB module is not where prompts are written
MAX_ROOTS = 6  # folders above the importing file tried for an absolute import

Function = ast.FunctionDef | ast.AsyncFunctionDef


def imported_function(module: PyModule, call: ast.Call) -> tuple[PyModule, Function] | None:
    """The module-level function another module of the tree defines for ``f(...)`` (``f`` from an
    import) or ``mod.f(...)`` (``mod`` an imported module), else None."""
    func = call.func
    if isinstance(func, ast.Name):
        bound = module.imports.get(func.id)
        if bound is None or bound[2] is None or func.id in module.functions:
            return None
        if module.resolve(func) is not None:
            return None  # a parameter or a local name of the same spelling: not the import
        return _function(module.source.path, bound[0], bound[1], bound[2], 0)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        bound = module.imports.get(func.value.id)
        if bound is None or module.resolve(func.value) is not None:
            return None
        name, level, attr = bound
        # `import pkg.prompts as p` (attr None) or `from pkg import prompts` (a submodule).
        dotted = name if attr is None else (f"{name}.{attr}" if name else attr)
        path = module_file(module.source.path, dotted, level)
        target = parsed(path) if path is not None else None
        return _defined(target, func.attr, 0) if target is not None else None
    return None


def _function(importer: str, name: str, level: int, attr: str, hops: int) -> tuple[PyModule, Function] | None:
    path = module_file(importer, name, level)
    target = parsed(path) if path is not None else None
    return _defined(target, attr, hops) if target is not None else None


def _defined(target: PyModule, attr: str, hops: int) -> tuple[PyModule, Function] | None:
    found = target.functions.get(attr)
    if found is not None:
        return target, found
    bound = target.imports.get(attr)
    if bound is None or bound[2] is None or hops >= MAX_HOPS:
        return None
    return _function(target.source.path, bound[0], bound[1], bound[2], hops + 1)


def imported_constant(module: PyModule, name: str) -> tuple[PyModule, ast.expr] | None:
    """The value another module of the tree binds, once and at its top level, to a name this module
    imports from it (``from .tool_defs import SEARCH_TOOLS``), else None."""
    bound = module.imports.get(name)
    if bound is None or bound[2] is None:
        return None
    for _ in range(MAX_HOPS):
        path = module_file(module.source.path, bound[0], bound[1])
        target = parsed(path) if path is not None else None
        if target is None:
            return None
        chain = target.bindings.get((id(target.tree), bound[2]))
        if chain:
            if len(chain) == 1 and chain[0].op == "=" and chain[0].value is not None:
                return target, chain[0].value
            return None
        bound = target.imports.get(bound[2])  # re-exported: one more hop
        if bound is None or bound[2] is None:
            return None
        module = target
    return None


@functools.lru_cache(maxsize=4096)
def module_file(importer: str, name: str, level: int) -> str | None:
    """The file of module ``name`` imported from file ``importer`` (``level`` leading dots)."""
    folder = os.path.dirname(os.path.abspath(importer))
    if level:
        for _ in range(level - 1):
            folder = os.path.dirname(folder)
        roots = [folder]
    else:
        roots = []
        for _ in range(MAX_ROOTS):
            roots.append(folder)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    parts = [p for p in name.split(".") if p]
    for root in roots:
        base = os.path.join(root, *parts)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")) if parts else ():
            if os.path.isfile(candidate):
                return candidate
        if not parts and os.path.isfile(os.path.join(root, "__init__.py")):
            return os.path.join(root, "__init__.py")  # `from . import x`: x is a name of the package
    return None


@functools.lru_cache(maxsize=MAX_MODULES)
def parsed(path: str) -> PyModule | None:
    """A module of the tree, parsed once (None when it cannot be read or parsed)."""
    try:
        if os.path.getsize(path) > MAX_BYTES:
            return None
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        return PyModule.parse(Source(path, text, "python"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
