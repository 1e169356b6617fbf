"""``cachewarden diff``: the JSON contract, the caret view, and one-line errors with exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bodies import NEXT_TURNS, POLICY, TURNS, build, with_system
from cachewarden.proxy import cli
from cachewarden.proxy.cli.diff import main

LONGER = TURNS + NEXT_TURNS


def write(tmp_path: Path, name: str, body: Any) -> str:
    path = tmp_path / name
    path.write_text(body if isinstance(body, str) else json.dumps(body, ensure_ascii=False), encoding="utf-8")
    return str(path)


def pair(tmp_path: Path, fmt: str = "anthropic") -> tuple[str, str]:
    old = with_system(fmt, f"Today is Monday, 3 March 2026 at 10:30:15.\n\n{POLICY}")
    new = with_system(fmt, f"Today is Monday, 3 March 2026 at 10:31:02.\n\n{POLICY}", LONGER)
    return write(tmp_path, "previous.json", old), write(tmp_path, "next.json", new)


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    previous, following = pair(tmp_path, fmt)
    assert main([previous, following, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == [
        "provider",
        "model",
        "previous_tokens",
        "tokens",
        "common_prefix_tokens",
        "predicted",
        "divergence",
        "reasons",
    ]
    assert out["provider"] == fmt
    assert out["tokens"] > out["previous_tokens"] > 2000
    assert 0 < out["common_prefix_tokens"] < out["previous_tokens"]
    predicted = out["predicted"]
    assert (
        predicted["cached_tokens"] + predicted["cache_write_tokens"] + predicted["uncached_tokens"]
        == out["tokens"]
    )
    assert out["divergence"]["offset"] == len("Today is Monday, 3 March 2026 at 10:3")
    first = out["reasons"][0]
    assert first["code"] == "timestamp"
    assert first["segment"] == out["divergence"]["segment"]
    assert first["tokens_lost"] > 0


def test_text_format_has_caret_cost_and_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    previous, following = pair(tmp_path)
    assert main([previous, following]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    prev_line = next(ln for ln in lines if "previous |" in ln)
    next_line = next(ln for ln in lines if ln.strip().startswith("next |"))
    caret_line = next(ln for ln in lines if ln.rstrip().endswith("^") and "|" in ln)
    column = caret_line.index("^")
    assert prev_line[column] == "0" and next_line[column] == "1"
    assert "10:30:15" in prev_line and "10:31:02" in next_line
    assert "diverged at system[0], offset 37" in out
    assert "timestamp at system[0]:37" in out
    assert "$" in out and "tokens" in out
    assert "fix: move the timestamp after the last cached block or drop its seconds" in out


def test_text_format_for_an_appended_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    previous = write(tmp_path, "a.json", build("openai-chat"))
    following = write(tmp_path, "b.json", build("openai-chat", LONGER))
    assert main([previous, following]) == 0
    out = capsys.readouterr().out
    assert "no divergence" in out and "no cache miss" in out


def test_model_override_applies_to_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    previous = write(tmp_path, "a.json", build("openai-chat"))
    following = write(tmp_path, "b.json", build("openai-chat", LONGER, model="gpt-4.1"))
    assert main([previous, following, "--format", "json"]) == 0
    assert [r["code"] for r in json.loads(capsys.readouterr().out)["reasons"]] == ["model-changed"]
    assert main([previous, following, "--format", "json", "--model", "gpt-4o-mini"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "gpt-4o-mini" and out["reasons"] == []


def test_provider_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    previous, following = pair(tmp_path, "anthropic")
    assert main([previous, following, "--provider", "anthropic", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["provider"] == "anthropic"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"model": "gpt-4o"}', "cannot tell the request format"),
        ('{"model": "gpt-4o", "messages": "hi"}', "messages"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    good = write(tmp_path, "good.json", build("openai-chat"))
    bad = str(tmp_path / "missing.json") if content is None else write(tmp_path, "bad.json", content)
    assert main([good, bad]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("cachewarden diff: error: ")
    assert message in lines[0]
    assert "Traceback" not in captured.err


def test_invalid_utf8_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "good.json", build("openai-chat"))
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\xff"}]}')
    assert main([good, str(bad)]) == 2
    assert "UTF-8" in capsys.readouterr().err


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["only-one.json"])
    assert exc.value.code == 2


def test_dispatched_by_the_top_level_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    previous, following = pair(tmp_path)
    assert cli.main(["diff", previous, following, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["reasons"][0]["code"] == "timestamp"
