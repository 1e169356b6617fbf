"""The real `pre-commit try-repo` against a temporary copy of this repository's working tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lint_support import LONG

ROOT = Path(__file__).resolve().parents[2]
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not PRE_COMMIT.exists() or shutil.which("git") is None, reason="needs pre-commit and git"
    ),
]


def _git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _hook_repo(tmp: Path) -> Path:
    """A commit holding the installable project (try-repo installs the repository at HEAD)."""
    repo = tmp / "hook-repo"
    repo.mkdir()
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, repo / name)
    for folder in ("proxy", "linter", "rules"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "hook")
    return repo


def _try_repo(hook_repo: Path, work: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    # The hook's own virtualenv installs the project (and its dependencies) from the package index.
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp / "pc-home")}
    return subprocess.run(
        [str(PRE_COMMIT), "try-repo", str(hook_repo), "cachewarden-lint", "--all-files"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


PY_AGENT = """import time

POLICY = (
    "You are the support assistant for ACME Corporation. Answer questions about orders, refunds, "
    "shipping and warranties. Be concise, cite the policy section you rely on, and never invent "
    "order numbers or tracking codes. Escalate to a human agent when the customer asks for one."
)


def ask(client, question):
    stamp = time.strftime("%H:%M")
    system = {system}
    return client.messages.create(
        model="claude-sonnet-4-5", max_tokens=512, system=system,
        messages=[{{"role": "user", "content": question}}],
    )
"""


def test_pre_commit_hook_fails_on_bad_and_passes_on_good(tmp_path: Path) -> None:
    hook_repo = _hook_repo(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q")
    (work / "bad.j2").write_text("Today is {{ now() }}.\n" + LONG)
    # The hook also reads the Python that builds prompts: a time to the minute before static text.
    (work / "agent.py").write_text(PY_AGENT.format(system='f"Time: {stamp}. " + POLICY'))
    _git(work, "add", "-A")
    bad = _try_repo(hook_repo, work, tmp_path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "CW101" in bad.stdout
    assert "agent.py" in bad.stdout and "bad.j2" in bad.stdout, bad.stdout
    (work / "bad.j2").write_text(LONG + "Today is {{ now() }}.\n")
    (work / "agent.py").write_text(PY_AGENT.format(system='POLICY + f" Time: {stamp}."'))
    _git(work, "add", "-A")
    good = _try_repo(hook_repo, work, tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
