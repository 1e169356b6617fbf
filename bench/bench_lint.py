"""Linter speed: files per second on 1,000 generated templates; the whole rule set on a 400 KB body."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from cachewarden.linter.cli import main
from cachewarden.linter.engine import lint_source

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


if __name__ == "__main__":
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        rate = bench_files()
    size, seconds = bench_body()
    print(f"lint: {rate:,.0f} template files/s (1,000 generated templates, all rules, json output)")
    print(f"lint: {size / 1000:,.0f} KB request body, all rules: {seconds * 1000:,.0f} ms")
