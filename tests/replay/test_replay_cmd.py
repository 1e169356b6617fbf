"""``cachewarden replay``: the JSON contract, the text report, bad lines, exit codes, streaming output."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from cachewarden.proxy import cli
from cachewarden.proxy.cli import replay as replay_cmd
from cachewarden.proxy.cli.replay import main, spool_rows, write_json
from cachewarden.proxy.replay.replayer import replay
from cachewarden.proxy.replay.report import Report
from replay_fixtures import SYSTEM, anthropic, chat, line, write_log

T0 = 1_750_000_000  # June 2025: after OpenAI prompt caching began (CacheRules.since)
ROW_KEYS = ["index", "provider", "model", "tokens", "predicted", "reported", "reasons"]
SPLIT_KEYS = {"cached_tokens", "cache_write_tokens", "uncached_tokens"}


def conversation_log(tmp_path: Path) -> str:
    """A growing conversation with usage on some lines, a timestamp injected mid-log and one bad line."""
    stamped = [f"Current time: 2026-03-01 10:{m:02d}:15\n\n{SYSTEM}" for m in (1, 2)]
    usage = {"prompt_tokens": 1756, "prompt_tokens_details": {"cached_tokens": 1664}}
    objs: list[Any] = [
        {"request": chat(1), "timestamp": T0},
        {"request": chat(3), "timestamp": T0 + 20, "usage": usage},
        "this is not json\n",
        {"request": chat(5), "timestamp": T0 + 40},
        {"request": chat(7, system=stamped[0]), "timestamp": T0 + 60},
        {"request": chat(9, system=stamped[1]), "timestamp": T0 + 80},
    ]
    return write_log(tmp_path / "log.jsonl", objs)


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict[str, Any], str]:
    assert main([*args, "--format", "json"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, err = run_json(capsys, conversation_log(tmp_path))
    assert list(out) == ["totals", "reasons", "rows"]
    totals = out["totals"]
    for key in ("requests", "input_tokens", "predicted", "reported", "cost_usd", "missed_savings_usd"):
        assert key in totals
    assert totals["requests"] == 5 and totals["bad_lines"] == 1
    rows = out["rows"]
    assert [r["index"] for r in rows] == [0, 1, 3, 4, 5]
    for row in rows:
        assert list(row) == ROW_KEYS
        assert set(row["predicted"]) == SPLIT_KEYS
        assert sum(row["predicted"].values()) == row["tokens"]
        assert row["provider"] == "openai-chat" and row["model"] == "gpt-4o"
        for reason in row["reasons"]:
            assert {"code", "segment", "tokens_lost"} <= set(reason)
    assert totals["input_tokens"] == sum(r["tokens"] for r in rows)
    for key in SPLIT_KEYS:
        assert totals["predicted"][key] == sum(r["predicted"][key] for r in rows)
    # The conversation grows: later rows read the cache.
    assert rows[1]["predicted"]["cached_tokens"] > 0 and rows[2]["predicted"]["cached_tokens"] > 0
    # Reported where recorded, null elsewhere; the totals carry the subset and the error.
    assert rows[1]["reported"] == {"cached_tokens": 1664, "cache_write_tokens": 0, "uncached_tokens": 92}
    assert rows[0]["reported"] is None
    assert totals["reported"]["cached_tokens"] == 1664 and totals["reported"]["requests"] == 1
    error = totals["prediction_error"]
    assert error["cached_tokens_mean_abs"] == abs(1664 - rows[1]["predicted"]["cached_tokens"])
    # The timestamp injected into the system prompt: the last row misses on it.
    assert rows[4]["reasons"][0]["code"] == "timestamp"
    assert rows[4]["reasons"][0]["segment"] == "messages[0]"
    assert rows[0]["reasons"][0]["code"] == "cold"
    # Per-reason totals add up over the rows and are sorted by dollars.
    reasons = out["reasons"]
    assert reasons["timestamp"]["requests"] == 1
    for code, agg in reasons.items():
        assert set(agg) == {"requests", "tokens_lost", "usd_lost"}
        assert agg["tokens_lost"] == sum(
            x["tokens_lost"] for r in rows for x in r["reasons"] if x["code"] == code
        )
    usd = [agg["usd_lost"] for agg in reasons.values()]
    assert usd == sorted(usd, reverse=True)
    assert totals["missed_savings_usd"] == pytest.approx(sum(usd))
    assert totals["cost_usd"] > 0
    assert err.startswith("line 3: not valid JSON")


def test_json_goes_to_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.json"
    assert main([conversation_log(tmp_path), "--format", "json", "--output", str(target)]) == 0
    assert capsys.readouterr().out == ""
    assert json.loads(target.read_text(encoding="utf-8"))["totals"]["requests"] == 5


def test_text_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([conversation_log(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "5 requests (openai-chat gpt-4o); 1 bad line skipped" in out
    assert "predicted" in out and "% cached" in out
    assert "reported" in out and "prediction error" in out
    assert "stable prefix" in out and "of input tokens reusable" in out
    assert "reads saved $" in out
    assert "misses by reason (most dollars first):" in out
    assert "worst offenders" in out
    assert "timestamp at messages[0]" in out
    lines = out.splitlines()
    prev_line = next(ln for ln in lines if "previous |" in ln)
    next_line = next(ln for ln in lines if "next |" in ln)
    caret = next(ln for ln in lines if ln.rstrip().endswith("^"))
    column = caret.index("^")
    assert prev_line[column] == "1" and next_line[column] == "2"


def test_text_report_on_an_anthropic_log_weighs_the_write_premium(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = write_log(tmp_path / "a.jsonl", [anthropic(n) for n in (1, 3, 5, 7)])
    assert main([log]) == 0
    out = capsys.readouterr().out
    assert "writes cost $" in out and "repays its write premium" in out
    assert "no timestamps: requests taken as back to back" in out


def test_batch_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objs = [
        {"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions", "body": chat(n)}
        for n in (1, 3)
    ]
    objs += [{"custom_id": f"a{n}", "params": anthropic(n)} for n in (1, 3)]
    out, _ = run_json(capsys, write_log(tmp_path / "batch.jsonl", objs))
    assert [r["provider"] for r in out["rows"]] == ["openai-chat", "openai-chat", "anthropic", "anthropic"]
    assert out["rows"][1]["predicted"]["cached_tokens"] > 0
    assert out["rows"][3]["predicted"]["cached_tokens"] > 0


def test_model_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = run_json(capsys, write_log(tmp_path / "l.jsonl", [chat(1)]), "--model", "gpt-4.1-mini")
    assert out["rows"][0]["model"] == "gpt-4.1-mini"


def test_bad_lines_are_counted_and_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(
        tmp_path / "l.jsonl", ["{oops\n", chat(1), "[]\n", {"request": chat(3), "timestamp": "x"}]
    )
    out, err = run_json(capsys, log)
    assert out["totals"]["requests"] == 1 and out["totals"]["bad_lines"] == 3
    lines = err.splitlines()
    assert lines[0].startswith("line 1: not valid JSON")
    assert lines[1].startswith("line 3: a LOG line must be a JSON object")
    assert lines[2].startswith("line 4: timestamp 'x'")
    assert lines[3] == "cachewarden replay: 3 bad line(s) skipped"


def test_a_flood_of_bad_lines_is_capped_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = write_log(tmp_path / "l.jsonl", [chat(1)] + ["nope\n"] * 200)
    assert main([log]) == 0
    err = capsys.readouterr().err
    assert err.count("not valid JSON") == replay_cmd.MAX_PROBLEM_LINES
    assert "200 bad line(s) skipped" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), ("", "no replayable request"), ("bad\n[1]\n", "no replayable request (2 bad")],
)
def test_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "log.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    target = tmp_path / "out.json"
    assert main([str(path), "--format", "json", "--output", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("cachewarden replay: error: ")
    assert message in err
    assert not target.exists()


def test_exit_2_on_a_directory_and_through_the_dispatcher(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["replay", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data = (line(chat(1)) + line(chat(3))).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    out, _ = run_json(capsys, "-")
    assert out["totals"]["requests"] == 2


def test_the_json_writer_streams_rows_through_a_spool() -> None:
    """Rows are written one by one as they are replayed; none is kept once written."""
    written: list[int] = []

    class Spool(io.StringIO):
        def write(self, s: str) -> int:
            written.append(report.requests)
            return super().write(s)

    def log() -> Any:
        for n in range(1, 200, 2):
            # The spool has received every earlier row before the next line is even read.
            assert len(written) == n // 2
            yield line(chat(n % 9))

    report = Report()
    spool = Spool()
    spool_rows(report, replay(log()), spool)
    out = io.StringIO()
    write_json(report, spool, out)
    parsed = json.loads(out.getvalue())
    assert len(parsed["rows"]) == 100 == report.requests
    assert [r["index"] for r in parsed["rows"]] == list(range(100))


def test_progress_only_on_a_terminal(tmp_path: Path) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet = replay_cmd.Progress(io.StringIO(), 100)
    quiet.tick(1, force=True)
    assert not quiet.enabled and quiet.stream.getvalue() == ""  # type: ignore[attr-defined]
    tty = Tty()
    bar = replay_cmd.Progress(tty, 100)
    bar.bytes_read[0] = 50
    bar.tick(7, force=True)
    bar.close()
    assert "\r" in tty.getvalue() and "50.0%" in tty.getvalue() and "7 requests" in tty.getvalue()
