"""Linter speed: files per second on real repositories, against a bare ``ast.parse`` in the same run.

``python bench/bench_lint.py [REPO_DIR ...]`` (or ``CACHEWARDEN_LINT_CORPUS=dir1:dir2``) runs
``cachewarden lint --format json DIR`` on each directory in a new process, as a user would (start-up,
rules, tokenizer, walk, read, every rule, JSON output): by default and with ``--jobs 1``, with the
wall-clock and CPU seconds of each (workers included), and the ratio of linting its Python files
in this process to a bare ``ast.parse`` of the same files in the same run: the floor any AST
linter pays. Directories are trees
extracted from public repositories, kept outside this repository (e.g.
``git --git-dir=... archive HEAD | tar -x -C /tmp/corpus/NAME``). Without any, it falls back to 1,000
generated templates. Always: the whole rule set on a 400 KB request body.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

from cachewarden.linter.cli import main
from cachewarden.linter.engine import Options, lint_source
from cachewarden.linter.py_imports import parsed
from cachewarden.linter.py_timeline import _SUMMARIES
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
    """Seconds to ``ast.parse`` every file (the baseline: no linter can read Python for less), with
    the cycle collector off during the parse as the linter has it (with it on, a parse of a large
    module spends about half of its time in collections)."""
    start = time.perf_counter()
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in third-party code
            for path, text in texts:
                try:
                    ast.parse(text, filename=path)
                except (SyntaxError, ValueError):
                    continue
    finally:
        gc.enable()
    return time.perf_counter() - start


def python_lint(texts: list[tuple[str, str]]) -> float:
    """Seconds to lint the Python files alone (read already), all rules, with the per-process
    caches of other modules' functions emptied first (a run of the command starts without them)."""
    _SUMMARIES.clear()
    parsed.cache_clear()
    options = replace(Options(), lenient=True)
    start = time.perf_counter()
    for path, text in texts:
        lint_source(path, text, options)
    return time.perf_counter() - start


def command(root: str, *flags: str) -> tuple[float, float, str]:
    """``cachewarden lint --format json ROOT`` as a user runs it, in a new process: (wall seconds,
    CPU seconds of it and its workers, output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cachewarden.linter.cli", "--format", "json", "--exit-zero", *flags, root],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def bench_repo(root: str) -> dict[str, float]:
    """One repository: the Python files alone in this process, then the command as a user runs it:
    by default (workers on idle CPUs for a large walk) and in one process (``--jobs 1``)."""
    load = os.getloadavg()[0]  # the machine is shared: the figures mean little without it
    texts = _python_texts(root)
    base = bare_parse(texts)
    py = python_lint(texts)
    wall, cpu, out = command(root)
    one_wall, one_cpu, one_out = command(root, "--jobs", "1")
    assert out == one_out, f"{root}: workers changed the findings"
    summary = json.loads(out)["summary"]
    return {
        "files": summary["files"],
        "py": len(texts),
        "seconds": wall,
        "cpu": cpu,
        "one_seconds": one_wall,
        "one_cpu": one_cpu,
        "python_seconds": py,
        "parse_seconds": base,
        "findings": summary["findings"],
        "load": load,
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
        keys = ("files", "py", "seconds", "cpu", "one_seconds", "one_cpu", "python_seconds", "parse_seconds")
        totals = dict.fromkeys(keys, 0.0)
        print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(
            "| repository | load | files | .py | default: s wall | files/s wall | files/s CPU "
            "| --jobs 1: s wall | files/s wall | files/s CPU | .py lint / ast.parse (same run) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        rows = [(Path(root).name, bench_repo(root)) for root in roots]
        for _, r in rows:
            for key in totals:
                totals[key] += r[key]
        for name, r in [*rows, ("all", totals)] if len(rows) > 1 else rows:
            load = f"{r['load']:.2f}" if name != "all" else "–"
            print(
                f"| {name} | {load} | {r['files']:,.0f} | {r['py']:,.0f} | {r['seconds']:.2f} "
                f"| {r['files'] / r['seconds']:,.0f} | {r['files'] / r['cpu']:,.0f} "
                f"| {r['one_seconds']:.2f} | {r['files'] / r['one_seconds']:,.0f} "
                f"| {r['files'] / r['one_cpu']:,.0f} | {r['python_seconds'] / r['parse_seconds']:.2f}× |"
            )
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            rate = bench_files()
        print(f"lint: {rate:,.0f} template files/s (1,000 generated templates, all rules, json output)")
    size, seconds = bench_body()
    print(f"lint: {size / 1000:,.0f} KB request body, all rules: {seconds * 1000:,.0f} ms")
