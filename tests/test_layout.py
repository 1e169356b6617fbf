"""The package layout holds: layers import only downwards, the engine needs no HTTP, no loose modules,
and a long module says why it is long. The checkers are tested on bad trees first, so a green run
here means something."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from layering import HTTP_MODULES, import_with_blocked, upward_arrows

ROOT = Path(__file__).resolve().parents[1]
TREES = [(ROOT / "proxy", "cachewarden.proxy"), (ROOT / "linter", "cachewarden.linter")]
LONG = 400


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --- the checkers themselves -------------------------------------------------------------------


def test_layering_checker_flags_an_arrow_that_points_up(tmp_path: Path) -> None:
    _write(
        tmp_path / "proxy",
        {
            "__init__.py": "",
            "engine/__init__.py": "",
            "engine/ok.py": "from .other import x\nfrom cachewarden.rules import y\n",
            "engine/up_relative.py": "from ..explain import attribution\n",
            "engine/up_in_function.py": "def f():\n    from cachewarden.proxy.server.app import Proxy\n",
            "engine/up_from_root.py": "from cachewarden.proxy import cli\n",
            "explain/__init__.py": "",
            "explain/down.py": "from ..engine import prompt\n",
            "explain/sideways.py": "import cachewarden.proxy.replay.logs\n",
            "replay/__init__.py": "",
            "replay/into_server.py": "from cachewarden.proxy.server import usage\n",
            "cli/__init__.py": "from ..server import app\nfrom .. import testing\n",
        },
    )
    arrows = upward_arrows([(tmp_path / "proxy", "cachewarden.proxy")])
    flagged = {(a.importer, a.imported) for a in arrows}
    assert ("cachewarden.proxy.engine.up_relative", "cachewarden.proxy.explain") in flagged
    assert ("cachewarden.proxy.engine.up_in_function", "cachewarden.proxy.server.app") in flagged
    assert ("cachewarden.proxy.engine.up_from_root", "cachewarden.proxy.cli") in flagged
    assert ("cachewarden.proxy.explain.sideways", "cachewarden.proxy.replay.logs") in flagged
    assert ("cachewarden.proxy.replay.into_server", "cachewarden.proxy.server") in flagged
    importers = {a.importer for a in arrows}
    assert not importers & {
        "cachewarden.proxy.engine.ok",
        "cachewarden.proxy.explain.down",
        "cachewarden.proxy.cli",
    }


def test_blocked_import_checker_fails_on_a_forbidden_import(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "fakecw/__init__.py": "",
            "fakecw/server/__init__.py": "",
            "fakecw/engine/__init__.py": "",
            "fakecw/engine/clean.py": "import json\n",
            "fakecw/engine/lazy_http.py": "def f():\n    import httpx\n",
        },
    )
    clean = import_with_blocked(["fakecw.engine"], HTTP_MODULES, [str(tmp_path)])
    assert clean.returncode == 0, clean.stderr  # an import inside a function is not run

    (tmp_path / "fakecw/engine/http.py").write_text("import httpx\n")
    proc = import_with_blocked(["fakecw.engine"], HTTP_MODULES, [str(tmp_path)])
    assert proc.returncode != 0 and "httpx" in proc.stderr

    (tmp_path / "fakecw/engine/http.py").unlink()
    (tmp_path / "fakecw/engine/up.py").write_text("from ..server import anything\n")
    proc = import_with_blocked(["fakecw.engine"], ["fakecw.server"], [str(tmp_path)])
    assert proc.returncode != 0 and "fakecw.server" in proc.stderr


# --- the project ---------------------------------------------------------------------------------


def test_imports_only_point_down_the_layers() -> None:
    arrows = upward_arrows(TREES)
    assert not arrows, "\n".join(map(str, arrows))


def test_engine_and_explain_import_without_http_or_the_upper_layers() -> None:
    blocked = [*HTTP_MODULES, "cachewarden.proxy.server", "cachewarden.proxy.cli"]
    proc = import_with_blocked(["cachewarden.proxy.engine", "cachewarden.proxy.explain"], blocked)
    assert proc.returncode == 0, proc.stderr


def test_no_module_outside_a_subpackage() -> None:
    loose = sorted(p.name for p in (ROOT / "proxy").glob("*.py"))
    assert loose == ["__init__.py", "testing.py"]


@pytest.mark.parametrize("folder", ["proxy", "linter"])
def test_a_long_module_says_why_at_its_top(folder: str) -> None:
    unexplained = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if source.count("\n") <= LONG:
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        if "is long because" not in doc:
            unexplained.append(f"{path.relative_to(ROOT)} ({source.count(chr(10))} lines)")
    assert not unexplained, "over 400 lines without 'is long because' in the docstring: " + ", ".join(
        unexplained
    )
