"""`cachewarden lint [PATH…] [--format …] [--fix] [--unsafe-fixes] [--select …] [--ignore …]`.

Exit 0: no failing findings (info never fails); 1: findings; 2: a bad file, configuration or rule
code, always as one line on stderr.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from collections.abc import Sequence
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
from .rulebook import load_rules
from .selection import Selection, check_codes
from .sources import kind_of, sniff, walk

MAX_FIX_PASSES = 10


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
    args = _parser().parse_args(list(argv))
    config = load_config()
    options = _options(args, config)
    paths = args.paths or ["."]
    for p in paths:
        if not os.path.exists(p):
            raise CachewardenError(f"{p}: no such file or directory")
    findings: list[Finding] = []
    files = fixed = 0
    bases = (os.path.abspath(config.root), os.path.abspath(Path.cwd()))
    named = {str(Path(p)) for p in paths if not os.path.isdir(p)}
    lenient = replace(options, lenient=True)
    for path in walk(paths):
        shown = _display(path, bases)
        if (kind_of(path) is None and not (path in named and _script(path))) or any(
            fnmatch.fnmatch(shown, g) or fnmatch.fnmatch(shown, f"{g}/*") for g in config.exclude
        ):
            continue  # pre-commit passes every staged file of the listed types; others are not ours
        found, n = _lint_file(path, shown, options if path in named else lenient, args.fix, args.unsafe_fixes)
        findings.extend(found)
        files += 1
        fixed += n
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
    except Exception as exc:  # never a traceback from a pre-commit hook: one line, exit 2
        print(f"cachewarden: internal error: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
