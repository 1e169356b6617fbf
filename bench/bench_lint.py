"""Linter speed: files per second on real repositories, against a bare ``ast.parse`` in the same run.

``python bench/bench_lint.py [REPO_DIR ...]`` (or ``CACHEWARDEN_LINT_CORPUS=dir1:dir2``) lints each
directory the way ``cachewarden lint --format json DIR`` does (walk, read, every rule, JSON output)
and prints its files, seconds, files/s, the Python files/s, and the ratio of the whole lint to a
bare ``ast.parse`` of the same Python files: the floor any AST linter pays. Directories are trees
extracted from public repositories, kept outside this repository (e.g.
``git --git-dir=... archive HEAD | tar -x -C /tmp/corpus/NAME``). Without any, it falls back to 1,000
generated templates. Always: the whole rule set on a 400 KB request body.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

from cachewarden.linter.cli import main
from cachewarden.linter.engine import Options, lint_source
from cachewarden.linter.sources import kind_of, walk

TEMPLATE = """You are assistant number {n} for ACME. Answer questions about orders, refunds and shipping.
Cite the policy section you rely on and never invent order numbers.
{{% for tool in tools|sort(attribute='name') %}}- {{{{ tool.name }}}}: {{{{ tool.description }}}}
{{% endfor %}}
Today is {{{{ now() }}}}. Session {{{{ session_id }}}}.
Question: {{{{ question }}}}
"""


def bench_files(count: int = 1000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(count):
            Path(tmp, f"p{n:04d}.j2").write_text(
                TEMPLATE.format(n=n) + "Be brief. " * (n % 7), encoding="utf-8"
            )
        main(["--format", "json", tmp])  # warm up: rule files, tokenizer
        start = time.perf_counter()
        main(["--format", "json", tmp])
        return count / (time.perf_counter() - start)


def _python_texts(root: str) -> list[tuple[str, str]]:
    texts = []
    for path in walk([root]):
        if kind_of(path) == "python":
            try:
                texts.append((path, Path(path).read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError):
                continue
    return texts


def bare_parse(texts: list[tuple[str, str]]) -> float:
    """Seconds to ``ast.parse`` every file (the baseline: no linter can read Python for less)."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences in third-party code
        for path, text in texts:
            try:
                ast.parse(text, filename=path)
            except (SyntaxError, ValueError):
                continue
    return time.perf_counter() - start


def python_lint(texts: list[tuple[str, str]]) -> float:
    """Seconds to lint the Python files alone (read already), all rules."""
    options = replace(Options(), lenient=True)
    start = time.perf_counter()
    for path, text in texts:
        lint_source(path, text, options)
    return time.perf_counter() - start


def bench_repo(root: str) -> dict[str, float]:
    """One repository: the Python files alone, then whole runs in one process and with workers."""
    texts = _python_texts(root)
    base = bare_parse(texts)
    py = python_lint(texts)
    runs = {}
    for jobs in ("1", "0"):  # one process (the default); one worker per CPU
        out = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(out):
            main(["--format", "json", "--exit-zero", "--jobs", jobs, root])
        runs[jobs] = (time.perf_counter() - start, out.getvalue())
    assert runs["1"][1] == runs["0"][1], f"{root}: workers changed the findings"
    summary = json.loads(runs["1"][1])["summary"]
    return {
        "files": summary["files"],
        "py": len(texts),
        "seconds": runs["1"][0],
        "parallel_seconds": runs["0"][0],
        "python_seconds": py,
        "parse_seconds": base,
        "findings": summary["findings"],
    }


def big_body(target: int = 400_000) -> str:
    tools = [
        {
            "name": f"tool_{i}",
            "description": "Look things up. " * 20,
            "input_schema": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            },
        }
        for i in range(40)
    ]
    messages = []
    i = 0
    while len(json.dumps(messages)) < target:
        messages.append(
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": [{"type": "text", "text": f"Turn {i}. " + "Some conversation text. " * 40}],
            }
        )
        i += 1
    return json.dumps(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": "You are helpful. " * 200,
            "tools": tools,
            "messages": messages,
        },
        indent=2,
    )


def bench_body() -> tuple[int, float]:
    body = big_body()
    lint_source("request.json", body)
    start = time.perf_counter()
    lint_source("request.json", body)
    return len(body), time.perf_counter() - start


def corpus(argv: list[str]) -> list[str]:
    roots = argv or [p for p in os.environ.get("CACHEWARDEN_LINT_CORPUS", "").split(":") if p]
    return [r for r in roots if os.path.isdir(r)]


if __name__ == "__main__":
    roots = corpus(sys.argv[1:])
    if roots:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["--format", "json", "--exit-zero", roots[0]])  # warm up: rules, tokenizer, imports
        totals = dict.fromkeys(
            ("files", "py", "seconds", "parallel_seconds", "python_seconds", "parse_seconds"), 0.0
        )
        print(
            "| repository | files | .py | s (1 process) | files/s | s (workers) | files/s "
            "| .py files/s (1 process) | lint / ast.parse (.py) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for root in roots:
            r = bench_repo(root)
            for key in totals:
                totals[key] += r[key]
            print(
                f"| {Path(root).name} | {r['files']:,.0f} | {r['py']:,.0f} | {r['seconds']:.2f} "
                f"| {r['files'] / r['seconds']:,.0f} | {r['parallel_seconds']:.2f} "
                f"| {r['files'] / r['parallel_seconds']:,.0f} | {r['py'] / r['python_seconds']:,.0f} "
                f"| {r['python_seconds'] / r['parse_seconds']:.2f}× |"
            )
        t = totals
        print(
            f"| all | {t['files']:,.0f} | {t['py']:,.0f} | {t['seconds']:.2f} "
            f"| {t['files'] / t['seconds']:,.0f} | {t['parallel_seconds']:.2f} "
            f"| {t['files'] / t['parallel_seconds']:,.0f} "
            f"| {t['py'] / t['python_seconds']:,.0f} | {t['python_seconds'] / t['parse_seconds']:.2f}× |"
        )
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            rate = bench_files()
        print(f"lint: {rate:,.0f} template files/s (1,000 generated templates, all rules, json output)")
    size, seconds = bench_body()
    print(f"lint: {size / 1000:,.0f} KB request body, all rules: {seconds * 1000:,.0f} ms")
