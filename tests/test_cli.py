"""The top-level dispatcher: help, version, unknown commands, a closed output pipe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cachewarden.proxy import cli


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert f"  {name}" in out


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2


def test_unknown_command_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown command 'frobnicate'" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("cachewarden ")


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    # `cachewarden lint . | head -2`: more output than a pipe holds, and the reader closes after a line.
    lines = [
        f"{{{{ now() }}}} Step {n}: you are a careful assistant; answer the user briefly." for n in range(600)
    ]
    (tmp_path / "prompt.j2").write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [sys.executable, "-c", "from cachewarden.proxy.cli import main; raise SystemExit(main())"]
    with subprocess.Popen(
        [*command, "lint", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert b"CW101" in proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "Broken pipe" not in err and "internal error" not in err, err
