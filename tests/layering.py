"""Checks of the package layout (tests/test_layout.py runs them on cachewarden, and on bad trees).

The layers of ``cachewarden.proxy`` follow the data flow of one request; an import only points
down: ``cli`` → ``server`` / ``replay`` → ``explain`` → ``engine``. ``emulator`` (the reference
provider) stands on ``engine`` alone, ``testing`` (the shipped harness) on nothing of ours, and the
linter, outside ``proxy/``, on ``engine`` and ``explain``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT_PACKAGE = "cachewarden.proxy"

# layer -> the layers it may import (itself always included). "root" is cachewarden.proxy's own
# __init__ (the version), "rules" the data package.
ALLOWED: dict[str, frozenset[str]] = {
    "root": frozenset(),
    "rules": frozenset(),
    "engine": frozenset({"root", "rules"}),
    "explain": frozenset({"root", "rules", "engine"}),
    "linter": frozenset({"root", "rules", "engine", "explain"}),
    "emulator": frozenset({"root", "rules", "engine"}),
    "replay": frozenset({"root", "rules", "engine", "explain"}),
    "server": frozenset({"root", "rules", "engine", "explain", "linter"}),
    "testing": frozenset({"root"}),
    "cli": frozenset(
        {"root", "rules", "engine", "explain", "linter", "emulator", "replay", "server", "testing"}
    ),
}

# Third-party modules that speak HTTP or serve metrics: the lower layers must import without them.
HTTP_MODULES = ("fastapi", "starlette", "httpx", "uvicorn", "prometheus_client")


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name of the project, None for anything else."""
    if module == "cachewarden.rules" or module.startswith("cachewarden.rules."):
        return "rules"
    if module == "cachewarden.linter" or module.startswith("cachewarden.linter."):
        return "linter"
    if module == ROOT_PACKAGE:
        return "root"
    if not module.startswith(ROOT_PACKAGE + "."):
        return None
    first = module[len(ROOT_PACKAGE) + 1 :].split(".")[0]
    return first if first in ALLOWED else None


@dataclass(frozen=True, slots=True)
class Arrow:
    path: Path
    line: int
    importer: str
    imported: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported}"


def module_name(path: Path, source_root: Path, package: str) -> str:
    """``proxy/engine/prompt.py`` under ``proxy/`` → ``cachewarden.proxy.engine.prompt``."""
    parts = list(path.relative_to(source_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def imports_of(source: str, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """Every module a source imports, anywhere in it (functions and TYPE_CHECKING blocks too),
    with relative imports resolved. ``from X import name`` yields ``X.name`` as well, since
    ``name`` may be a submodule; callers keep only names that are modules of the project."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:
                yield node.lineno, f"{target}.{alias.name}"


def upward_arrows(trees: Iterable[tuple[Path, str]]) -> list[Arrow]:
    """Every import that points into a layer its own may not use, in the given source trees.

    ``trees`` holds (folder, dotted package name of that folder). ``from X import name`` is judged
    by ``X.name`` too, so ``from cachewarden.proxy import server`` counts as an import of server.
    """
    arrows: list[Arrow] = []
    for folder, package in trees:
        for path in sorted(folder.rglob("*.py")):
            name = module_name(path, folder, package)
            source_layer = layer_of(name)
            if source_layer is None:
                continue
            source = path.read_text(encoding="utf-8")
            for line, target in imports_of(source, name, path.name == "__init__.py"):
                target_layer = layer_of(target)
                if target_layer is None or target_layer == source_layer:
                    continue
                if target_layer not in ALLOWED[source_layer]:
                    arrows.append(Arrow(path, line, name, target))
    return arrows


def import_with_blocked(
    packages: Iterable[str], blocked: Iterable[str], sys_path: Iterable[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Import every module of ``packages`` in a fresh interpreter where ``blocked`` (top-level
    names or dotted prefixes) raise ImportError. Exit 0 when all imported; else the first failure
    is on stderr."""
    code = "\n".join(
        [
            "import builtins, importlib, pkgutil, sys",
            f"sys.path[:0] = {list(sys_path)!r}",
            f"blocked = {tuple(blocked)!r}",
            "real = builtins.__import__",
            "def resolve(name, globals_, level):",
            "    if not level:",
            "        return name",
            "    package = (globals_ or {}).get('__package__') or ''",
            "    base = package.split('.')[: len(package.split('.')) - (level - 1)]",
            "    return '.'.join([*base, *([name] if name else [])])",
            "def guard(name, globals=None, locals=None, fromlist=(), level=0):",
            "    full = resolve(name, globals, level)",
            "    wanted = [full, *(full + '.' + f for f in (fromlist or ()) if f != '*')]",
            "    for w in wanted:",
            "        for b in blocked:",
            "            if w == b or w.startswith(b + '.'):",
            "                raise ImportError(f'blocked import {w!r}')",
            "    return real(name, globals, locals, fromlist, level)",
            "builtins.__import__ = guard",
            f"for package in {list(packages)!r}:",
            "    root = importlib.import_module(package)",
            "    for info in pkgutil.walk_packages(root.__path__, package + '.'):",
            "        try:",
            "            importlib.import_module(info.name)",
            "        except ImportError as exc:",
            "            sys.exit(f'{info.name}: {exc}')",
        ]
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
