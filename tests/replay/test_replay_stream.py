"""``replay`` and ``Report``: predictions over a log, TTL expiry from timestamps, reasons, laziness."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cachewarden.proxy.replay import replayer
from cachewarden.proxy.replay.replayer import Problem, Row, replay
from cachewarden.proxy.replay.report import Report
from replay_fixtures import BUILDERS, SHARED_DATA, SYSTEM, chat, line

T0 = 1_750_000_000  # June 2025: after OpenAI prompt caching began (CacheRules.since)


def rows_of(lines: list[str], **kwargs: object) -> tuple[list[Row], list[Problem]]:
    problems: list[Problem] = []
    rows = list(replay(lines, on_problem=problems.append, **kwargs))  # type: ignore[arg-type]
    return rows, problems


def codes(row: Row) -> list[str]:
    return [r.code for r in row.reasons]


@pytest.mark.parametrize("fmt", list(BUILDERS))
def test_a_growing_conversation_is_cached(fmt: str) -> None:
    build = BUILDERS[fmt]
    rows, problems = rows_of([line(build(n)) for n in (1, 3, 5, 7)])
    assert not problems
    assert [r.index for r in rows] == [0, 1, 2, 3]
    assert rows[0].predicted.cached == 0 and codes(rows[0]) == ["cold"]
    for row in rows[1:]:
        assert row.predicted.cached > 0.8 * row.tokens
        assert row.tokens_lost == 0
    for row in rows:
        assert row.predicted.total == row.tokens and row.provider == fmt


def test_index_is_the_line_of_the_request_in_the_log() -> None:
    lines = ["\n", line(chat(1)), "garbage\n", line(chat(3)), line({"route": "passthrough", "request": {}})]
    rows, problems = rows_of(lines)
    assert [r.index for r in rows] == [1, 3]
    assert [(p.index, p.skipped) for p in problems] == [(2, False), (4, True)]


def test_a_gap_longer_than_the_ttl_expires_the_prefix() -> None:
    # gpt-4o keeps a prefix 600 s (rules/models.yaml); the third request comes 20 min after the second.
    times = [T0, T0 + 60, T0 + 60 + 1200, T0 + 60 + 1200 + 30]
    lines = [line({"request": chat(n), "timestamp": t}) for n, t in zip((1, 3, 5, 7), times, strict=True)]
    rows, _ = rows_of(lines)
    assert rows[1].predicted.cached > 0 and "expired" not in codes(rows[1])
    assert rows[2].predicted.cached == 0
    assert "expired" in codes(rows[2])
    expired = next(r for r in rows[2].reasons if r.code == "expired")
    assert expired.tokens_lost > 1000 and expired.usd_lost > 0
    assert rows[3].predicted.cached > 0 and "expired" not in codes(rows[3])


def test_iso_timestamps_and_milliseconds_drive_the_clock_too() -> None:
    stamps = ["2024-05-01T10:00:00Z", "2024-05-01T10:30:00Z"]
    rows, _ = rows_of(
        [line({"request": chat(n), "timestamp": s}) for n, s in zip((1, 3), stamps, strict=True)]
    )
    assert "expired" in codes(rows[1])
    ms = [T0 * 1000, T0 * 1000 + 5_000]
    rows, _ = rows_of([line({"request": chat(n), "timestamp": s}) for n, s in zip((1, 3), ms, strict=True)])
    assert rows[1].at - rows[0].at == 5.0 and rows[1].predicted.cached > 0


def test_without_timestamps_requests_are_one_second_apart() -> None:
    rows, _ = rows_of([line(chat(n)) for n in (1, 3, 5)])
    assert [r.at for r in rows] == [0.0, 1.0, 2.0]
    assert not any(r.timestamped for r in rows)


def test_lines_written_as_responses_ended_are_replayed_in_request_order() -> None:
    # The proxy's capture: the request of line 1 started first, its response ended second.
    lines = [line({"request": chat(n), "timestamp": t}) for n, t in ((3, T0 + 10), (1, T0 + 5), (5, T0 + 20))]
    rows, _ = rows_of(lines)
    assert [r.index for r in rows] == [1, 0, 2]
    assert [r.at for r in rows] == [T0 + 5, T0 + 10, T0 + 20]
    # In request order the shorter prompt comes first: the longer one reads it from the cache.
    assert rows[1].predicted.cached > 0


def test_the_clock_never_runs_backwards(monkeypatch: pytest.MonkeyPatch) -> None:
    # Beyond the reorder window, a late line is replayed where it is, at the clock's time.
    monkeypatch.setattr(replayer, "REORDER_WINDOW", 0)
    lines = [line({"request": chat(n), "timestamp": t}) for n, t in ((1, T0 + 10), (3, T0 + 5), (5, T0 + 20))]
    rows, _ = rows_of(lines)
    assert [r.at for r in rows] == [T0 + 10, T0 + 10, T0 + 20]


def test_a_timestamp_injected_into_the_system_prompt_is_a_timestamp_reason() -> None:
    stamped = [f"Current time: 2026-03-0{n} 10:{n:02d}:15\n\n{SYSTEM}" for n in range(1, 4)]
    lines = [line(chat(1)), line(chat(3))]
    lines += [line(chat(5 + 2 * k, system=s)) for k, s in enumerate(stamped)]
    rows, _ = rows_of(lines)
    assert rows[1].tokens_lost == 0
    for row in rows[2:]:
        assert row.reasons[0].code in ("timestamp", "system-changed")
    # Once the stamp is in place, each new one differs from the last only by its value.
    for row in rows[3:]:
        assert row.reasons[0].code == "timestamp"
        assert row.reasons[0].segment == "messages[0]" and row.reasons[0].tokens_lost > 1000
        assert row.predicted.cached == 0


def test_tenants_do_not_share_a_cache() -> None:
    lines = [line({"request": chat(n), "tenant": t}) for n, t in ((1, "a"), (3, "b"), (5, "a"))]
    rows, _ = rows_of(lines)
    assert codes(rows[1]) == ["cold"] and rows[1].predicted.cached == 0
    assert rows[2].predicted.cached > 0


def test_model_and_provider_overrides() -> None:
    rows, _ = rows_of([line(chat(1))], model="gpt-4.1")
    assert rows[0].model == "gpt-4.1"
    # A Chat body read as Anthropic Messages: the adapter's error names the path, the line is skipped.
    rows, problems = rows_of([line(chat(1))], provider="anthropic")
    assert not rows and problems[0].message.startswith("tools[0].name")


def test_reported_usage_beside_the_prediction_and_unexplained_misses() -> None:
    def record(n: int, cached: int) -> str:
        usage = {"prompt_tokens": 10_000, "prompt_tokens_details": {"cached_tokens": cached}}
        return line({"request": chat(n), "timestamp": T0 + n, "usage": usage})

    rows, _ = rows_of([record(1, 0), record(3, 0), line(chat(5))])
    assert rows[0].reported is not None and rows[0].reported.uncached == 10_000
    assert rows[2].reported is None
    # Predicted a hit, the provider reported none: the cache was evicted or routed elsewhere.
    assert "unexplained" in codes(rows[1])
    report = Report()
    for row in rows:
        report.add(row)
    totals = report.totals_json()
    assert totals["reported"]["requests"] == 2
    error = totals["prediction_error"]
    assert error["requests"] == 2
    assert error["cached_tokens_mean_abs"] == rows[1].predicted.cached / 2
    assert error["cached_tokens_exact_share"] == 0.5
    assert set(error["by_provider"]) == {"openai-chat"}


def test_replay_is_a_lazy_iterator_over_a_large_generated_log() -> None:
    consumed = 0

    def log(n: int) -> Iterator[str]:
        nonlocal consumed
        for i in range(n):
            consumed += 1
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"hello {i % 40}"}]}
            yield json.dumps(body)

    rows = replay(log(10_000))
    first = next(rows)
    assert first.index == 0 and consumed == 1  # nothing read ahead, nothing held
    report = Report(max_misses=10, max_points=100)
    report.add(first)
    for row in rows:
        report.add(row)
    assert consumed == 10_000 and report.requests == 10_000
    # The aggregate stays bounded whatever the log size.
    assert len(report.series.points) <= 100 and len(report.worst()) <= 10
    assert sum(p.requests for p in report.series.points) == 10_000


def test_the_worst_misses_are_ranked_by_dollars_with_their_divergence() -> None:
    systems = [f"Current time: 2026-03-01 10:{m:02d}:15\n\n{SYSTEM}" for m in range(5)]
    rows, _ = rows_of([line(chat(1 + 2 * k, system=s)) for k, s in enumerate(systems)])
    report = Report(max_misses=2)
    for row in rows:
        report.add(row)
    worst = report.worst()
    assert len(worst) == 2
    assert worst[0].usd_lost >= worst[1].usd_lost > 0
    view = worst[0].divergence
    assert view is not None and view.segment == "messages[0]"
    assert view.previous_line[view.previous_column] != view.next_line[view.next_column]


@pytest.mark.skipif(not (SHARED_DATA / "traces").is_dir(), reason="../shared/data/traces is not present")
def test_a_real_agent_trace_replays_with_every_line() -> None:
    path = SHARED_DATA / "traces" / "swe-agent.marshmallow-1867.requests.jsonl"
    with path.open(encoding="utf-8") as f:
        rows, problems = rows_of(list(f))
    assert not problems and len(rows) == 11
    assert all(r.predicted.cached > 0 for r in rows[1:])
