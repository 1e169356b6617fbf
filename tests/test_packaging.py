"""The built wheel holds the code under one namespace and the data files the engine needs."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("cachewarden-*.whl")
    return zipfile.ZipFile(path)


def test_wheel_holds_code_and_data(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for required in (
        "cachewarden/proxy/cli/__init__.py",
        "cachewarden/proxy/engine/prompt.py",
        "cachewarden/proxy/engine/models.py",
        "cachewarden/proxy/engine/adapters/__init__.py",
        "cachewarden/linter/__init__.py",
        "cachewarden/rules/__init__.py",
        "cachewarden/rules/models.yaml",
        "cachewarden/rules/pricing.json",
        "cachewarden/proxy/examples/agent-turn.json",
        "cachewarden/proxy/py.typed",
    ):
        assert required in names, required
    assert any(n.startswith("cachewarden/rules/CW") and n.endswith(".yaml") for n in names), "no rule files"


def test_wheel_carries_every_module_of_the_source_tree(wheel: zipfile.ZipFile) -> None:
    # pyproject lists the packages one by one (setuptools maps folders into the namespace): a new
    # subpackage missing from that list would be left out of the wheel silently.
    names = set(wheel.namelist())
    for folder, namespace in (("proxy", "cachewarden/proxy"), ("linter", "cachewarden/linter")):
        for source in (ROOT / folder).rglob("*.py"):
            installed = f"{namespace}/{source.relative_to(ROOT / folder).as_posix()}"
            assert installed in names, installed


def test_wheel_installs_no_generic_top_level_names(wheel: zipfile.ZipFile) -> None:
    # A package called `proxy` exists on PyPI: nothing may land outside our namespace.
    tops = {n.split("/", 1)[0] for n in wheel.namelist()}
    assert tops == {"cachewarden", *(t for t in tops if t.endswith(".dist-info"))}


def test_entry_point_declared(wheel: zipfile.ZipFile) -> None:
    (ep,) = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    assert "cachewarden = cachewarden.proxy.cli:main" in wheel.read(ep).decode()
