"""``cachewarden count FILE``: the input tokens a provider would report for a request body, per segment."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cachewarden.proxy.engine.counting import PromptCounter, TokenizedPrompt, provider_count
from cachewarden.proxy.engine.errors import CachewardenError, RequestError
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import PROVIDERS, Prompt, Provider

from .files import read_text

PROG = "cachewarden count"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Count the input tokens of request bodies, per segment."
    )
    parser.add_argument("file", metavar="FILE", help="one JSON request body, or JSONL with one body per line")
    parser.add_argument("--model", help="model name (overrides the body's model)")
    parser.add_argument(
        "--provider", choices=PROVIDERS, help="request format (inferred from the body when omitted)"
    )
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    return parser


def read_bodies(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line, body text): the whole file when it is one JSON value, else one body per line."""
    text = read_text(path)
    try:
        json.loads(text)
    except ValueError:
        lines = text.splitlines()
        if len([ln for ln in lines if ln.strip()]) <= 1:
            # One body that does not parse: report it as such rather than as "line 1".
            yield 1, text
            return
        for number, line in enumerate(lines, 1):
            if line.strip():
                yield number, line
    else:
        yield 1, text


def parse(body_text: str, provider: Provider | None) -> Prompt:
    from cachewarden.proxy.engine.adapters import load_body, parse_request

    return parse_request(load_body(body_text), provider=provider)


def segment_rows(prompt: Prompt, tokenized: TokenizedPrompt) -> list[tuple[str, str, int]]:
    """(path, kind, provider tokens) per segment; the rows add up to the request's count.

    Each segment gets the difference of the rounded cumulative counts at its ends (so rounding never
    drifts), and what belongs to no segment (reply priming, tokens added by parameters) gets a row of its own.
    """

    def at(position: int) -> int:
        return provider_count(position, tokenized.ratio)

    rows: list[tuple[str, str, int]] = [
        (seg.path, seg.kind, at(end) - at(start))
        for seg, (start, end) in zip(prompt.segments, tokenized.spans, strict=True)
    ]
    framed = tokenized.spans[-1][1] if tokenized.spans else 0
    if tokenized.count - at(framed):
        rows.append(("(framing)", "framing", tokenized.count - at(framed)))
    return rows


def as_json(prompt: Prompt, tokenized: TokenizedPrompt) -> dict[str, Any]:
    return {
        "model": prompt.model,
        "tokenizer": tokenized.tokenizer,
        "tokens": tokenized.count,
        "segments": [{"path": p, "tokens": n} for p, _, n in segment_rows(prompt, tokenized)],
    }


def as_text(prompt: Prompt, tokenized: TokenizedPrompt, label: str) -> str:
    rows = segment_rows(prompt, tokenized)
    width = max([len("path"), *(len(p) for p, _, _ in rows)])
    estimate = "" if tokenized.ratio == 1.0 else f", estimate: o200k x {tokenized.ratio:g}"
    lines = [
        f"{label}: {prompt.provider} {prompt.model} (tokenizer {tokenized.tokenizer}{estimate})",
        f"  {'path':<{width}}  {'kind':<11}  {'tokens':>8}",
    ]
    lines += [f"  {p:<{width}}  {k:<11}  {n:>8}" for p, k, n in rows]
    lines.append(f"  {'total':<{width}}  {'':<11}  {tokenized.count:>8}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = Path(args.file)
    try:
        counter = PromptCounter(load_model_table())
        outputs: list[str] = []
        bodies = list(read_bodies(path))
        for line, body_text in bodies:
            try:
                prompt = parse(body_text, args.provider)
            except RequestError as exc:
                where = f"line {line}: " if len(bodies) > 1 else ""
                raise RequestError(f"{path}: {where}{exc}") from None
            if args.model:
                prompt = prompt.with_model(args.model)
            tokenized = counter.tokenize(prompt)
            if args.format == "json":
                outputs.append(json.dumps(as_json(prompt, tokenized), ensure_ascii=False))
            else:
                label = str(path) if len(bodies) == 1 else f"{path}:{line}"
                outputs.append(as_text(prompt, tokenized, label))
    except CachewardenError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    sep = "\n" if args.format == "json" else "\n\n"
    print(sep.join(outputs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
