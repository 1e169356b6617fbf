"""bench/cassette_sources.py: the held-out cassette sources unpacked again from git, by their rules.

A small git repository made here (real ``git``; no third-party data) holds a file of each kind the
two selection rules tell apart; unpacking it at its commit takes exactly the ones each rule names.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

VCR_OPENAI = b"interactions:\n- request:\n    uri: https://api.openai.com/v1/chat/completions\n"
VCR_AZURE = b"http_interactions:\n- request:\n    uri: https://x.openai.azure.com/openai/deployments/d\n"
VCR_OTHER = b"interactions:\n- request:\n    uri: https://api.anthropic.com/v1/messages\n"


@cache
def _sources() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cassette_sources", BENCH / "cassette_sources.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _repo(tmp_path: Path) -> tuple[Path, str]:
    work = tmp_path / "acme+agents"
    files = {
        "tests/cassettes/chat.yaml": VCR_OTHER,  # under a cassette directory: any content
        "spec/fixtures/VCR_Cassettes/deep/x.yml": b"x: 1\n",
        "tests/data/openai.yaml": VCR_OPENAI,  # an OpenAI cassette outside such a directory
        "tests/data/azure.yml.gz": gzip.compress(VCR_AZURE),
        "tests/data/anthropic.yaml": VCR_OTHER,
        "tests/data/broken.yaml.gz": b"not gzip",
        "tests/cassettes/notes.json": VCR_OPENAI,  # not YAML
        "cassettes.yaml": VCR_OPENAI,  # "cassette" only in the file's own name
    }
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "cassettes"], check=True)
    # A later commit changes a file: the listed commit is what is read, not HEAD.
    (work / "tests/cassettes/chat.yaml").write_bytes(b"changed\n")
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
    subprocess.run([*git, "commit", "-qam", "later"], check=True)
    return work, commit.strip()


def _taken(tmp_path: Path, rule: str) -> tuple[set[str], Path]:
    s = _sources()
    _, commit = _repo(tmp_path)
    root = tmp_path / f"out-{rule}"
    source = s.Source("acme/agents", commit, "MIT", rule)
    return set(s.unpack(source, s._git_dir(str(tmp_path / "{owner}+{name}"), source.repo), root)), root


def test_cassette_dir_rule_takes_yaml_under_a_cassette_directory(tmp_path: Path) -> None:
    taken, root = _taken(tmp_path, "cassette-dir")
    assert taken == {"tests/cassettes/chat.yaml", "spec/fixtures/VCR_Cassettes/deep/x.yml"}
    assert (root / "acme+agents/tests/cassettes/chat.yaml").read_bytes() == VCR_OTHER  # at the commit


def test_openai_vcr_rule_takes_cassettes_naming_an_openai_host(tmp_path: Path) -> None:
    taken, root = _taken(tmp_path, "openai-vcr")
    assert taken == {"tests/data/openai.yaml", "tests/data/azure.yml.gz", "cassettes.yaml"}
    # Written as they are stored (gzipped stays gzipped: cassette_records reads both).
    assert gzip.decompress((root / "acme+agents/tests/data/azure.yml.gz").read_bytes()) == VCR_AZURE


def test_a_missing_repository_or_commit_is_reported_and_the_rest_unpacked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _sources()
    _, commit = _repo(tmp_path)
    good = s.Source("acme/agents", commit, "MIT", "cassette-dir")
    gone = s.Source("acme/agents", "0" * 40, "MIT", "cassette-dir")
    absent = s.Source("nobody/here", commit, "MIT", "cassette-dir")
    root = tmp_path / "out"
    monkeypatch.setattr(s, "SETS", (s.CassetteSet("t", root, (gone, absent, good)),))
    assert s.main(["unpack", str(tmp_path / "{owner}+{name}")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "t acme/agents",
        "t nobody/here",
        "t acme/agents@" + commit[:8],
    ]
    assert "skipped (" in lines[0] and "skipped (" in lines[1] and lines[2].endswith(f"2 files -> {root}")
    assert (root / "acme+agents/tests/cassettes/chat.yaml").exists()


def test_every_source_names_a_full_commit_and_a_known_rule() -> None:
    s = _sources()
    seen = [src.repo for cset in s.SETS for src in cset.sources]
    assert len(seen) == len(set(seen)) == 47
    for cset in s.SETS:
        for src in cset.sources:
            assert len(src.commit) == 40 and set(src.commit) <= set("0123456789abcdef")
            assert src.rule in ("cassette-dir", "openai-vcr") and src.licence


def test_a_pattern_with_an_unknown_field_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _sources().main(["unpack", "/src/{org}/{name}"])
    assert exit_info.value.code == 2
    assert "only {owner} and {name}" in capsys.readouterr().err


def test_a_body_edited_after_recording_is_flagged_from_the_history(tmp_path: Path) -> None:
    s = _sources()
    work = tmp_path / "acme+edits"
    cassette = work / "tests/cassettes/chat.yaml"
    cassette.parent.mkdir(parents=True)
    answer = '{"id": "chatcmpl-AbCdEfGhIjKlMnOpQrStUv", "model": "gpt-4o", "usage": {"prompt_tokens": 8}}'

    def version(prompt: str) -> bytes:
        body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": prompt}]})
        return (
            "interactions:\n- request:\n    method: POST\n"
            "    uri: https://api.openai.com/v1/chat/completions\n"
            f"    body: '{body}'\n"
            f"  response:\n    status: {{code: 200}}\n    body: {{string: '{answer}'}}\n"
        ).encode()

    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    commits = []
    for prompt in ("hi", "hi there"):  # recorded, then the prompt edited by hand
        cassette.write_bytes(version(prompt))
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", prompt], check=True)
        rev = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        commits.append(rev.stdout.strip())
    root = tmp_path / "out"
    source = s.Source("acme/edits", commits[1], "MIT", "cassette-dir")
    assert list(s.unpack(source, s._git_dir(str(tmp_path / "{owner}+{name}"), source.repo), root)) == [
        "tests/cassettes/chat.yaml"
    ]
    (rec,) = list(s._reader().records(root))
    assert rec["request"]["messages"][0]["content"] == "hi there"
    assert rec["edited_after"] == commits[0] and rec["suspect"]
    # Read at the first commit, the same cassette is a clean record.
    again = s.Source("acme/edits", commits[0], "MIT", "cassette-dir")
    list(s.unpack(again, s._git_dir(str(tmp_path / "{owner}+{name}"), again.repo), tmp_path / "first"))
    (first,) = list(s._reader().records(tmp_path / "first"))
    assert first["edited_after"] is None and not first["suspect"]
