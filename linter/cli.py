"""`cachewarden lint [PATH…] [--format …] [--fix] [--unsafe-fixes] [--select …] [--ignore …]`.

Exit 0: no failing findings (info never fails); 1: findings; 2: a bad file, configuration or rule
code, always as one line on stderr.
"""

from __future__ import annotations

import argparse
import fnmatch
import multiprocessing
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from cachewarden.proxy.engine.errors import CachewardenError, ConfigError

from . import report_github, report_json, report_sarif, report_text
from .config import FileConfig, load_config
from .context import Settings
from .engine import Options, lint_source
from .findings import Finding
from .fixes import apply_fixes
from .idle_cpus import CpuSample, cpu_sample, idle_cpus
from .rulebook import load_rules
from .selection import Selection, check_codes
from .sources import kind_of, sniff, walk
from .tokens import count_tokens, model_info

MAX_FIX_PASSES = 10
# A walk with fewer files than this is linted in this process: starting workers would cost more.
PARALLEL_MIN_FILES = 200
MAX_JOBS = 8


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"lint: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="cachewarden lint", description="Find prompt-cache busters in templates and request files."
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or directories (default: .)")
    p.add_argument("--format", choices=("text", "json", "sarif", "github"), default="text")
    p.add_argument("--fix", action="store_true", help="apply safe fixes")
    p.add_argument(
        "--unsafe-fixes", action="store_true", help="also apply unsafe fixes (with --fix or alone)"
    )
    p.add_argument(
        "--select", action="append", default=[], help="codes or prefixes to enable (comma-separated)"
    )
    p.add_argument(
        "--ignore", action="append", default=[], help="codes or prefixes to disable (comma-separated)"
    )
    p.add_argument("--model", help="model whose tokenizer and cache minimum apply (default: gpt-4o)")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes for a large walk (default: the idle CPUs, for 200 files or more; "
        "1: none; 0: one per CPU)",
    )
    return p


def _split(values: Sequence[str]) -> list[str]:
    return [c for v in values for c in v.split(",") if c.strip()]


def _display(path: str, bases: Sequence[str]) -> str:
    """Repository-relative POSIX path when the file is under the project root, else as given."""
    absolute = os.path.abspath(path)
    for base in bases:
        if absolute == base or absolute.startswith(base.rstrip(os.sep) + os.sep):
            return Path(os.path.relpath(absolute, base)).as_posix()
    return Path(path).as_posix()


def _options(args: argparse.Namespace, config: FileConfig) -> Options:
    known = list(load_rules())
    where = str(config.path) if config.path else "lint"
    select = check_codes(_split(args.select), known, "--select") if args.select else None
    if select is None:
        select = check_codes(config.select, known, where) if config.select is not None else ("CW",)
    ignore = check_codes(config.ignore, known, where) + check_codes(_split(args.ignore), known, "--ignore")
    pfi = {glob: check_codes(codes, known, where) for glob, codes in config.per_file_ignores.items()}
    settings = Settings(model=args.model or config.model, tojson_sort_keys=config.tojson_sort_keys)
    return Options(Selection(select, ignore, pfi), settings)


def _script(path: str) -> bool:
    """A file named on the command line without a known extension: read if it is a Python script."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return sniff(fh.read(200)) is not None
    except OSError:
        return False


def _lint_file(path: str, shown: str, options: Options, fix: bool, unsafe: bool) -> tuple[list[Finding], int]:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CachewardenError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from exc
    findings = lint_source(path, text, options, shown)
    fixed_total = 0
    if fix or unsafe:
        current = text
        for _ in range(MAX_FIX_PASSES):
            current, fixed = apply_fixes(current, findings, unsafe)
            if not fixed:
                break
            fixed_total += fixed
            findings = lint_source(path, current, options, shown)
        if current != text:
            with open(path, "w", encoding="utf-8", newline="") as fh:
                fh.write(current)
    return findings, fixed_total


def _lint_one(job: tuple[str, str, Options, bool, bool]) -> tuple[list[Finding], int]:
    path, shown, options, fix, unsafe = job
    return _lint_file(path, shown, options, fix, unsafe)


def _jobs(requested: int | None, files: int, fix: bool, started: CpuSample | None = None) -> int:
    """Worker processes for this run: ``--jobs N``; with 0 one per CPU this process may use; by
    default (None) one per CPU that is idle, for a large walk. One when fixing (files are rewritten
    in place) or where processes cannot be forked.

    Idle, because workers pay only when they get a core: on two idle cores two workers lint a
    2,000-file repository in about 0.7 of the time of one process, but on cores that other jobs
    keep busy they were measured slower than one process, which is then the default. ``started``
    is the CPU sample taken when the run began (see ``idle_cpus``)."""
    small = files < PARALLEL_MIN_FILES
    if requested == 1 or fix or (requested in (0, None) and small):
        return 1
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if requested is None:
        requested = max(1, min(available, round(idle_cpus(started, available))))
    return max(1, min(requested or available, MAX_JOBS, files))


def _lint_all(
    todo: Sequence[tuple[str, str, Options]],
    fix: bool,
    unsafe: bool,
    requested: int | None,
    started: CpuSample | None,
) -> Iterator[tuple[list[Finding], int]]:
    """Each file's findings, in walk order. Files are independent (a file another one refers to is
    read by the worker that needs it), so a large walk is split over forked workers; the rules,
    the model table and the tokenizer are loaded before the fork and shared."""
    jobs = [(path, shown, options, fix, unsafe) for path, shown, options in todo]
    workers = _jobs(requested, len(jobs), fix or unsafe, started)
    if workers == 1:
        yield from map(_lint_one, jobs)
        return
    load_rules()
    count_tokens("warm up", model_info(todo[0][2].settings.model))  # the tokenizer, loaded once
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from pool.imap(_lint_one, jobs, chunksize=8)


def _summary(findings: Sequence[Finding], files: int, fixed: int) -> dict[str, int]:
    summary = {"files": files, "findings": len(findings), "error": 0, "warning": 0, "info": 0, "fixed": fixed}
    for f in findings:
        summary[f.severity] += 1
    summary["fixable"] = sum(1 for f in findings if f.fix and f.fix.edits and f.fix.applicability == "safe")
    summary["unsafe_fixable"] = sum(
        1 for f in findings if f.fix and f.fix.edits and f.fix.applicability == "unsafe"
    )
    return summary


def run(argv: Sequence[str]) -> int:
    started = cpu_sample()  # the idle CPUs are measured over the walk (see _jobs)
    args = _parser().parse_args(list(argv))
    config = load_config()
    options = _options(args, config)
    paths = args.paths or ["."]
    for p in paths:
        if not os.path.exists(p):
            raise CachewardenError(f"{p}: no such file or directory")
    bases = (os.path.abspath(config.root), os.path.abspath(Path.cwd()))
    named = {str(Path(p)) for p in paths if not os.path.isdir(p)}
    lenient = replace(options, lenient=True)
    todo: list[tuple[str, str, Options]] = []
    for path in walk(paths):
        shown = _display(path, bases)
        if (kind_of(path) is None and not (path in named and _script(path))) or any(
            fnmatch.fnmatch(shown, g) or fnmatch.fnmatch(shown, f"{g}/*") for g in config.exclude
        ):
            continue  # pre-commit passes every staged file of the listed types; others are not ours
        todo.append((path, shown, options if path in named else lenient))
    findings: list[Finding] = []
    fixed = 0
    for found, n in _lint_all(todo, args.fix, args.unsafe_fixes, args.jobs, started):
        findings.extend(found)
        fixed += n
    files = len(todo)
    summary = _summary(findings, files, fixed)
    if args.format == "json":
        print(report_json.render(findings, summary))
    elif args.format == "sarif":
        print(report_sarif.render(findings, load_rules()))
    elif args.format == "github":
        text = report_github.render(findings)
        if text:
            print(text)
    else:
        print(report_text.render(findings, summary, fixed))
    failing = summary["error"] + summary["warning"]
    return 1 if failing and not args.exit_zero else 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except CachewardenError as exc:
        print(f"cachewarden: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # the reader of the output left (`| head`): the command line's entry point stops quietly
    except Exception as exc:  # never a traceback from a pre-commit hook: one line, exit 2
        print(f"cachewarden: internal error: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
