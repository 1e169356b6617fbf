"""``cachewarden replay LOG``: replay a traffic log through the cache model into a report.

The log is streamed (one line in memory at a time), and so is the JSON report: rows go to a spool
file as they are replayed (in memory up to a few MiB, then on disk), and the report is written in
the contract's key order (totals, reasons, rows) once the totals are known. Text and HTML reports
only need the bounded ``Report``.

A bad line is reported as ``line N: <reason>`` (N 1-based, as editors count) on stderr, counted
and skipped. Exit 0 when at least one request was replayed, 2 when LOG cannot be read or holds
nothing replayable.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import IO, Any

from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.prompt import PROVIDERS
from cachewarden.proxy.replay.logs import read_lines
from cachewarden.proxy.replay.replayer import Problem, Row, replay
from cachewarden.proxy.replay.report import Report

PROG = "cachewarden replay"
# Rows spill from memory to a temporary file beyond this size.
SPOOL_BYTES = 8 * 2**20
# Bad lines reported one by one before the rest are only counted (a wrong file must not flood stderr).
MAX_PROBLEM_LINES = 50


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Replay a traffic log (JSONL: request bodies, {request, timestamp, usage} records, the proxy's "
            "--capture file, or OpenAI / Anthropic batch input) through the prompt-cache model and report "
            "hit rate, cost and why requests missed."
        ),
    )
    parser.add_argument("log", metavar="LOG", help="the JSONL traffic log ('-' for stdin)")
    parser.add_argument(
        "--provider", choices=PROVIDERS, help="request format (inferred per line from the body or route)"
    )
    parser.add_argument("--model", help="model name for every request (overrides the bodies' model)")
    parser.add_argument(
        "--format", choices=("text", "json", "html"), default="text", help="report format (default: text)"
    )
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE (default: stdout)")
    return parser


class Progress:
    """A one-line progress bar on stderr (``\\r``-rewritten), only when stderr is a terminal."""

    def __init__(self, stream: IO[str], total_bytes: int | None) -> None:
        self.stream = stream
        self.total = total_bytes
        self.enabled = stream.isatty()
        self.bytes_read = [0]  # shared with read_lines
        self._shown = 0.0

    def tick(self, requests: int, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._shown < 0.1:
            return
        self._shown = now
        done = self.bytes_read[0]
        if self.total:
            share = min(1.0, done / self.total)
            bar = "#" * int(share * 30)
            text = f"replay [{bar:<30}] {share:6.1%} {requests:,} requests"
        else:
            text = f"replay {done / 2**20:,.1f} MiB {requests:,} requests"
        self.stream.write("\r" + text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _open_log(path: str, stack: ExitStack) -> tuple[IO[bytes], int | None]:
    if path == "-":
        return sys.stdin.buffer, None
    try:
        if os.path.isdir(path):
            raise CachewardenError(f"{path}: is a directory")
        stream = stack.enter_context(open(path, "rb"))  # noqa: SIM115 - the ExitStack closes it
    except FileNotFoundError:
        raise CachewardenError(f"{path}: no such file") from None
    except OSError as exc:
        raise CachewardenError(f"{path}: cannot read ({exc.strerror})") from None
    size = os.fstat(stream.fileno()).st_size
    return stream, size or None


def _open_output(path: str | None, stack: ExitStack) -> IO[str]:
    if path is None or path == "-":
        return sys.stdout
    try:
        return stack.enter_context(open(path, "w", encoding="utf-8"))
    except OSError as exc:
        raise CachewardenError(f"{path}: cannot write ({exc.strerror})") from None


class _Problems:
    """Prints the first bad lines, counts all of them into the report."""

    def __init__(self, report: Report, stream: IO[str], progress: Progress) -> None:
        self.report, self.stream, self.progress = report, stream, progress
        self.shown = 0

    def __call__(self, problem: Problem) -> None:
        self.report.problem(problem)
        if problem.skipped:
            return
        if self.shown < MAX_PROBLEM_LINES:
            if self.progress.enabled:
                self.stream.write("\r\x1b[K")
            self.stream.write(f"line {problem.index + 1}: {problem.message}\n")
        elif self.shown == MAX_PROBLEM_LINES:
            self.stream.write("(further bad lines are counted, not shown)\n")
        self.shown += 1


def spool_rows(report: Report, rows: Iterator[Row], spool: IO[str]) -> None:
    """Aggregate the rows and write each one's JSON to ``spool`` as it comes (one row per line)."""
    for row in rows:
        spool.write((",\n" if report.requests else "\n") + json.dumps(row.as_json(), ensure_ascii=False))
        report.add(row)


def write_json(report: Report, spool: IO[str], out: IO[str]) -> None:
    """The contract's JSON in its key order: totals, reasons, then the spooled rows."""
    head: dict[str, Any] = {"totals": report.totals_json(), "reasons": report.reasons_json()}
    text = json.dumps(head, ensure_ascii=False, indent=2)
    out.write(text[: text.rfind("}")].rstrip() + ',\n  "rows": [')
    spool.seek(0)
    shutil.copyfileobj(spool, out)
    out.write(("\n  " if report.requests else "") + "]\n}\n")


def _consume(report: Report, rows: Iterator[Row]) -> None:
    for row in rows:
        report.add(row)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with ExitStack() as stack:
        try:
            stream, size = _open_log(args.log, stack)
            engine = Engine()
        except CachewardenError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 2
        report = Report()
        progress = Progress(sys.stderr, size)
        problems = _Problems(report, sys.stderr, progress)

        def rows() -> Iterator[Row]:
            try:
                for row in replay(
                    read_lines(stream, progress.bytes_read),
                    provider=args.provider,
                    model=args.model,
                    engine=engine,
                    on_problem=problems,
                ):
                    yield row
                    progress.tick(report.requests)
            finally:
                progress.close()

        try:
            if args.format == "json":
                spool = stack.enter_context(
                    tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES, mode="w+", encoding="utf-8")
                )
                spool_rows(report, rows(), spool)
                # The output opens only now: a log with nothing valid leaves no output file behind.
                if not report.requests:
                    return _nothing(args.log, report)
                write_json(report, spool, _open_output(args.output, stack))
            else:
                _consume(report, rows())
                if not report.requests:
                    return _nothing(args.log, report)
                out = _open_output(args.output, stack)
                out.write(render(report, args.format, args.log))
        except OSError as exc:
            print(f"{PROG}: error: {args.log}: cannot read ({exc.strerror})", file=sys.stderr)
            return 2
        except CachewardenError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 2
        if report.bad_lines:
            print(f"{PROG}: {report.bad_lines:,} bad line(s) skipped", file=sys.stderr)
    return 0


def render(report: Report, fmt: str, label: str) -> str:
    if fmt == "html":
        from cachewarden.proxy.replay.report_html import render_html

        return render_html(report, label)
    from cachewarden.proxy.replay.report_text import render_text

    return render_text(report, label)


def _nothing(label: str, report: Report) -> int:
    why = f" ({report.bad_lines:,} bad line(s))" if report.bad_lines else ""
    print(f"{PROG}: error: {label}: no replayable request{why}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
