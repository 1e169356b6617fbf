"""The `cachewarden lint` contract: output formats, exit codes, selection, configuration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lint_support import LONG, Run, as_json

BAD = "Today is {{ now() }}.\n" + LONG


def test_text_output_has_location_source_line_and_caret(project: Path, run: Run) -> None:
    (project / "system.j2").write_text(BAD)
    code, out, _ = run("system.j2")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("system.j2:1:13: CW101 `now()` changes on every request")
    assert lines[1] == "    Today is {{ now() }}."
    assert lines[2] == "    " + " " * 12 + "^^^"
    assert lines[-1].startswith("1 finding, 1 error in 1 file")


def test_json_contract(project: Path, run: Run) -> None:
    (project / "system.j2").write_text(BAD)
    code, out, _ = run("--format", "json", ".")
    data = as_json(out)
    assert code == 1
    (finding,) = data["findings"]
    assert set(finding) == {
        "code",
        "name",
        "reason",
        "severity",
        "path",
        "line",
        "column",
        "end_line",
        "end_column",
        "message",
        "fix",
    }
    assert (finding["code"], finding["reason"], finding["path"]) == ("CW101", "timestamp", "system.j2")
    assert (finding["line"], finding["column"], finding["end_line"], finding["end_column"]) == (1, 13, 1, 16)
    assert finding["fix"] is None
    assert data["summary"]["error"] == 1 and data["summary"]["files"] == 1


def test_clean_and_info_only_exit_zero(project: Path, run: Run) -> None:
    (project / "good.j2").write_text(LONG + "Today is {{ now() }}.\n")
    assert run("good.j2")[0] == 0
    (project / "stamp.prompt.txt").write_text("Generated at 2025-03-04T10:15:30Z.\n")  # CW104 is info
    code, out, _ = run("--format", "json", "stamp.prompt.txt")
    assert code == 0 and as_json(out)["findings"][0]["severity"] == "info"


def test_github_format(project: Path, run: Run) -> None:
    (project / "a.j2").write_text(BAD)
    _, out, _ = run("--format", "github", "a.j2")
    assert out.strip() == (
        "::error file=a.j2,line=1,col=13,endLine=1,endColumn=16,title=CW101 timestamp-in-cached-prefix::"
        "`now()` changes on every request and comes before 57 tokens of static text, which can then never "
        "be read from the cache"
    )


def test_select_and_ignore(project: Path, run: Run) -> None:
    (project / "a.j2").write_text(BAD + "{% for t in tools %}{{ t.name }}{% endfor %}\n")
    codes = lambda *a: [f["code"] for f in as_json(run("--format", "json", *a, "a.j2")[1])["findings"]]  # noqa: E731
    assert codes() == ["CW101", "CW203"]
    assert codes("--select", "CW2") == ["CW203"]
    assert codes("--ignore", "CW101,CW203") == []
    code, _, err = run("--select", "CW999", "a.j2")
    assert code == 2 and err.count("\n") == 1 and "CW999" in err


def test_config_in_pyproject(project: Path, run: Run) -> None:
    (project / "pyproject.toml").write_text(
        "[tool.cachewarden]\nignore = ['CW203']\nexclude = ['vendor']\n"
        "[tool.cachewarden.per-file-ignores]\n'legacy/*.j2' = ['CW1']\n"
    )
    (project / "legacy").mkdir()
    (project / "vendor").mkdir()
    (project / "legacy" / "old.j2").write_text(BAD)
    (project / "vendor" / "x.j2").write_text(BAD)
    (project / "t.j2").write_text("{% for t in tools %}{{ t.name }}{% endfor %}\n")
    assert run(".")[0] == 0
    (project / "pyproject.toml").write_text("[tool.cachewarden]\nbogus = 1\n")
    code, _, err = run(".")
    assert code == 2 and "bogus" in err


def test_bad_files_exit_2_with_one_line(project: Path, run: Run) -> None:
    (project / "broken.json").write_text('{"model": "gpt-4o",')
    code, _out, err = run("broken.json")
    assert code == 2 and err.startswith("cachewarden: error: broken.json:1:") and err.count("\n") == 1
    (project / "broken.j2").write_text("{% for x in y %}\n")
    code, _, err = run("broken.j2")
    assert code == 2 and "template syntax error" in err and "Traceback" not in err
    code, _, err = run("missing.j2")
    assert code == 2 and "no such file" in err


def test_plain_text_with_jinja_lookalikes_is_read_as_text(project: Path, run: Run) -> None:
    (project / "notes.md").write_text("Use `{% raw` in examples.\n")
    assert run("notes.md")[0] == 0


def test_rules_command(run: Run, capsys: object) -> None:
    from cachewarden.linter.rules_cmd import main as rules_main

    assert rules_main([]) == 0
    assert rules_main(["CW101"]) == 0
    assert rules_main(["timestamp-in-cached-prefix"]) == 0
    assert rules_main(["CW999"]) == 2


def test_lint_runs_without_fastapi() -> None:
    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in ('fastapi', 'httpx', 'prometheus_client', 'starlette', 'uvicorn'):\n"
        "        raise ImportError(name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "from cachewarden.proxy.cli import main\n"
        "sys.exit(main(['lint', '--format', 'json', sys.argv[1]]))\n"
    )
    sample = Path(__file__).with_name("test_lint_cli.py")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(sample)], capture_output=True, text=True, check=False
    )
    assert proc.returncode in (0, 1), proc.stderr


def test_unreadable_files_found_in_a_directory_are_notes(project: Path, run: Run) -> None:
    (project / ".devcontainer").mkdir()
    (project / ".devcontainer" / "devcontainer.json").write_text('// editor\n{"name": "dev"}\n')
    (project / "py2.py").write_text("SYSTEM_PROMPT = 'x'\nprint 'hello'\n")
    code, out, _ = run("--format", "json", ".")
    found = sorted((f["path"], f["code"], f["line"], f["severity"]) for f in as_json(out)["findings"])
    assert code == 0 and found == [
        (".devcontainer/devcontainer.json", "CW502", 1, "info"),
        ("py2.py", "CW502", 2, "info"),
    ]
    assert run(".devcontainer/devcontainer.json")[0] == 2  # named on the command line: an error


def test_a_named_python_script_without_extension_is_read(project: Path, run: Run) -> None:
    (project / "agent").write_text(
        "#!/usr/bin/env python3\nimport uuid\ndef system_prompt():\n"
        "    return f'Run {uuid.uuid4()}. ' + '''" + LONG + "'''\n"
    )
    (project / "notes").write_text("Run {{ now() }}.\n" + LONG)
    code, out, _ = run("--format", "json", "agent", "notes")
    assert code == 1 and [(f["path"], f["code"]) for f in as_json(out)["findings"]] == [("agent", "CW102")]
    assert run("--format", "json", ".")[1].count('"CW102"') == 0  # a directory walk goes by extension


def test_workers_give_the_same_report_in_the_same_order(project: Path, run: Run) -> None:
    for n in range(24):
        (project / f"p{n:02d}.j2").write_text(f"Session {{{{ session_id }}}} #{n}.\n" + LONG)
        (project / f"a{n:02d}.py").write_text(
            f"import time\nSYSTEM_PROMPT = f'Epoch {{time.time()}} #{n}. ' + '''{LONG}'''\n"
        )
    (project / "bad.json").write_text('{"model": ')  # found by the walk: a note, from a worker
    one = run("--format", "json", "--jobs", "1", ".")
    two = run("--format", "json", "--jobs", "2", ".")
    assert one == two and one[0] == 1
    report = as_json(one[1])
    summary = report["summary"]  # module-level clocks are per process (info); bad.json is a CW502 note
    assert (summary["files"], summary["error"], summary["info"]) == (49, 24, 25)
    (project / "unreadable.json").write_bytes(b"\xff\xfe{")  # cannot be read at all: exit 2 either way
    assert run("--jobs", "2", ".")[0] == run("--jobs", "1", ".")[0] == 2
