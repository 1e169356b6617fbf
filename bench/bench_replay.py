"""`cachewarden replay`: requests per second on real agent traces, and prediction error on recorded usage.

Two figures, both on third-party data read from ../shared/data (skipped with a note where absent):

- throughput: the 16 traces in ../shared/data/traces replayed end to end (line parsing, adapters,
  tokenizer, prefix index, cache model, attribution, report aggregation), first with a cold
  tokenizer memo, then again in the same process (a long log's steady state, where most segments
  recur);
- accuracy: the recorded interactions in ../shared/data/recorded grouped into their sequences
  (cassettes, in ``seq_index`` order), keeping the sequences in which the provider reported a cache
  read; each sequence replays in a tenant of its own and the predicted cached tokens are compared
  with those the provider reported. Caveats (README there): a cassette's first request may read a
  cache warmed by an earlier test, and OpenAI caching is best effort.
- agreement per test suite: the same records grouped by suite (the cassette's directory: one test
  module or one test's provider variants) and replayed in recording order in one tenant per suite,
  as a proxy in front of that suite would have seen them (a cache warmed by an earlier test of the
  suite is then visible). Printed: the share of requests where predicted and reported cached tokens
  agree on hit / miss, and where they are equal, on the training projects and on the held-out one
  (pydantic-ai, as in bench_counting.py).

``--cassettes[=DIR]`` runs only the agreement on the second held-out source, the VCR cassettes of
other public projects under DIR (default /tmp/acc4/raw; bench_counting.py's module doc): all of it
held out, by half with the same cassette hash.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_counting import cassettes_root, held_out, load_cassettes, part
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.replay.logs import LogLineError, parse_timestamp
from cachewarden.proxy.replay.replayer import Row, replay
from cachewarden.proxy.replay.report import Report

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TRACES = DATA / "traces"
RECORDED = DATA / "recorded" / "interactions.jsonl"


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as f:
        yield from f


def throughput() -> None:
    files = sorted(TRACES.glob("*.requests.jsonl"))
    if not files:
        print(f"throughput: skipped ({TRACES} not present)")
        return
    size = sum(f.stat().st_size for f in files)
    engine = Engine()
    for label in ("cold memo", "warm memo"):
        report = Report()
        started = time.perf_counter()
        for n, path in enumerate(files):
            # One tenant per trace: they are separate conversations and must not share a cache.
            for row in replay(_lines(path), engine=engine, tenant=f"{label}-{n}"):
                report.add(row)
        seconds = time.perf_counter() - started
        print(
            f"throughput ({label}): {len(files)} traces, {report.requests} requests, {size / 2**20:.1f} MiB "
            f"in {seconds:.2f} s = {report.requests / seconds:,.0f} requests/s, "
            f"{size / 2**20 / seconds:.1f} MiB/s, {1000 * seconds / report.requests:.2f} ms/request"
        )
    hit = report.hit_rate(report.predicted) or 0.0
    print(
        f"  traces: predicted {hit:.1%} cached, stable prefix {report.stable_prefix_share:.1%}, "
        f"reasons {dict((c, t.requests) for c, t in report.reasons_by_cost())}"
    )


def _sequences() -> dict[str, list[dict[str, Any]]]:
    sequences: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with RECORDED.open(encoding="utf-8") as f:
        for text in f:
            record = json.loads(text)
            sequences[record["sequence_id"]].append(record)
    return {
        sid: sorted(records, key=lambda r: r["seq_index"])
        for sid, records in sequences.items()
        if any((r.get("cache_read_tokens") or 0) > 0 for r in records)
    }


def _line(record: dict[str, Any]) -> str:
    """A replay LOG record: the body, its usage and format, the recording time, a model fallback."""
    return json.dumps(
        {
            "request": record["request"],
            "usage": record["usage"],
            "provider": record["provider"],
            "timestamp": record.get("recorded_at"),
            # Azure deployments and Bedrock put the model in the URL, not the body.
            "model": record.get("response_model") or record.get("path"),
        }
    )


def _print_error(label: str, report: Report) -> None:
    stats = report.errors
    if not stats.requests:
        print(f"  {label}: no request with usage")
        return
    print(
        f"  {label}: {stats.requests} requests, cached tokens mean |error| "
        f"{stats.cached_abs / stats.requests:,.1f}, exactly right {stats.exact / stats.requests:.1%}, "
        f"mean (reported - predicted) {stats.cached_signed / stats.requests:+,.1f}; "
        f"input tokens mean |error| {stats.input_abs / stats.requests:,.1f}"
    )
    for provider, by in sorted(report.errors_by_provider.items()):
        n = by.requests
        print(
            f"    {provider:<17} {n:>4} requests  mean |error| {by.cached_abs / n:>8,.1f}  "
            f"exact {by.exact / n:6.1%}  mean signed {by.cached_signed / n:+9,.1f}"
        )


def accuracy() -> None:
    if not RECORDED.is_file():
        print(f"accuracy: skipped ({RECORDED} not present)")
        return
    sequences = _sequences()
    engine = Engine()
    everything, clean = Report(), Report()
    bad = 0
    clean_ids = set()

    def count_bad(_: object) -> None:
        nonlocal bad
        bad += 1

    for sid, records in sequences.items():
        clean_ids.update(
            (sid, i) for i, r in enumerate(records) if r.get("self_contained") and not r.get("suspect")
        )
        rows: Iterator[Row] = replay(
            (_line(r) for r in records), engine=engine, tenant=sid, on_problem=count_bad
        )
        for row in rows:
            everything.add(row)
            if (sid, row.index) in clean_ids:
                clean.add(row)
    print(
        f"accuracy: {len(sequences)} recorded sequences with cache reads, "
        f"{sum(map(len, sequences.values()))} interactions ({bad} not replayable)"
    )
    _print_error("all", everything)
    _print_error("self-contained, not suspect", clean)
    reported = everything.hit_rate(everything.reported) or 0.0
    predicted = everything.hit_rate(everything.predicted_where_reported) or 0.0
    print(f"  hit rate: reported {reported:.1%}, predicted {predicted:.1%} on the same requests")


def _recorded(record: dict[str, Any]) -> float:
    try:
        return parse_timestamp(record.get("recorded_at")) or 0.0
    except LogLineError:
        return 0.0


def _suite(sequence_id: str) -> str:
    repo, _, path = sequence_id.partition(":")
    return f"{repo}:{path.rsplit('/', 1)[0]}"


def _recorded_lines() -> Iterator[dict[str, Any]]:
    with RECORDED.open(encoding="utf-8") as f:
        for text in f:
            yield json.loads(text)


def agreement(source: Iterator[dict[str, Any]] | None = None) -> None:
    """Hit / miss and exact agreement of cached tokens, per suite replay (see the module doc)."""
    if source is None:
        if not RECORDED.is_file():
            return
        source = _recorded_lines()
    suites: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in source:
        suites[_suite(record["sequence_id"])].append(record)
    engine = Engine()
    # (held out, self-contained) -> [requests, hit/miss agree, exact, with a read, exact among them]
    tally: dict[tuple[bool, bool], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    # Self-contained disagreements on hit / miss, in aggregate: (held out, provider, direction) -> n.
    disagree: dict[tuple[bool, str, str], int] = defaultdict(int)
    # Self-contained held-out requests by half (bench_counting.part: the final half only in aggregate).
    halves: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for suite, records in suites.items():
        if not any((r.get("cache_read_tokens") or 0) > 0 for r in records):
            continue
        # In recording order: by the recorded time (an HTTP date, so parsed: its text does not sort
        # by time), then cassette and position; records without a time keep cassette order.
        records.sort(key=lambda r: (_recorded(r), r["sequence_id"], r["seq_index"]))
        for row in replay(
            (_line(r) for r in records), engine=engine, tenant=suite, on_problem=lambda _: None
        ):
            if row.reported is None:
                continue
            rec = records[row.index]
            # The cassettes' records also drop hand-written ones (suspect); the recorded data's
            # figures stay as they were first printed.
            clean = bool(rec.get("self_contained")) and not (rec.get("cassette") and rec.get("suspect"))
            key = (held_out(rec), clean)
            t = tally[key]
            t[0] += 1
            agrees = (row.predicted.cached > 0) == (row.reported.cached > 0)
            t[1] += agrees
            if not agrees and key[1]:
                way = "predicted a read, none reported" if row.predicted.cached else "a read not predicted"
                disagree[(key[0], row.provider, way)] += 1
            if key == (True, True):
                halves[part(rec)][0] += 1
                halves[part(rec)][1] += agrees
            t[2] += row.predicted.cached == row.reported.cached
            if row.predicted.cached > 0 or row.reported.cached > 0:
                t[3] += 1
                t[4] += row.predicted.cached == row.reported.cached
    print("agreement per test-suite replay (cached tokens, predicted vs reported):")
    for held in (False, True):
        for clean in (True, False):
            n, agree, exact, reads, exact_reads = tally[(held, clean)]
            if n:
                name = ("held-out" if held else "training") + (", self-contained" if clean else ", other")
                print(
                    f"  {name:<28} {n:>4} requests  hit/miss agree {agree / n:6.1%}  exact {exact / n:6.1%}"
                    f"  | {reads:>4} with a read on either side: exact {exact_reads / max(reads, 1):6.1%}"
                )
    split = ", ".join(
        f"{half} {agree}/{n} ({agree / n:.1%})" for half, (n, agree) in sorted(halves.items()) if n
    )
    print(f"  held-out, self-contained, by half: hit/miss agree on {split}")
    print("  hit / miss disagreements of the self-contained requests (aggregate counts):")
    for (held, provider, way), n in sorted(disagree.items()):
        print(f"    {'held-out' if held else 'training':<9} {provider:<17} {way:<33} {n:>4}")


def main(argv: list[str]) -> int:
    root = cassettes_root(argv)
    if root is not None:
        if not root.is_dir():
            print(f"skipped: {root} not present (third-party cassettes, never copied into the repository)")
            return 0
        # Duplicates stay in: a replay sees every request the suite sent, repeats included.
        print(f"cassettes: {root}")
        agreement(iter(load_cassettes(root)))
        return 0
    if not DATA.is_dir():
        print(f"skipped: {DATA} not present (third-party data, never copied into the repository)")
        return 0
    throughput()
    accuracy()
    agreement()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
