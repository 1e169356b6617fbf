"""Accuracy of `count` against the input tokens providers reported (../shared/data/recorded).

Prints, per request format, how close PromptCounter comes to the recorded usage:
- OpenAI chat, plain text (no tools, images or structured-output schema): share counted exactly;
- OpenAI chat with tools, Responses, Anthropic: median relative error (|counted - reported| / reported).
Only records that are self-contained and not suspect count (README of the data). The data are
third-party: they are read in place and never copied into the repository.

    .venv/bin/python bench/bench_counting.py [PATH/interactions.jsonl] [--detail]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cachewarden.proxy import adapters
from cachewarden.proxy.counting import PromptCounter
from cachewarden.proxy.errors import CachewardenError
from cachewarden.proxy.models import load_model_table
from cachewarden.proxy.prompt import Prompt

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "data" / "recorded" / "interactions.jsonl"


def records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec.get("self_contained") and not rec.get("suspect") and not rec.get("duplicate_of"):
                yield rec


def bucket(rec: dict[str, Any], prompt: Prompt) -> str:
    provider: str = rec["provider"]
    if provider != "openai-chat":
        return provider
    kinds = {s.kind for s in prompt.segments}
    if kinds & {"tool", "tool_use"} or any(s.kind == "tool_result" for s in prompt.segments):
        return "openai-chat+tools"
    if kinds & {"image", "document", "schema", "other"}:
        return "openai-chat+other"
    return "openai-chat plain"


def model_of(rec: dict[str, Any]) -> str | None:
    # Azure / Bedrock bodies carry no model: the deployment in the path, else what the response named.
    req = rec["request"]
    if isinstance(req.get("model"), str):
        return None
    return rec.get("response_model") or rec.get("path") or None


def main(argv: list[str]) -> int:
    detail = "--detail" in argv
    args = [a for a in argv if not a.startswith("--")]
    path = Path(args[0]) if args else DEFAULT
    if not path.exists():
        print(f"bench_counting: skipped, no recorded data at {path}")
        return 0
    counter = PromptCounter(load_model_table())
    errors: dict[str, list[float]] = defaultdict(list)
    exact: dict[str, list[bool]] = defaultdict(list)
    skipped = 0
    worst: list[tuple[float, str, int, int]] = []
    for rec in records(path):
        reported = rec.get("total_input_tokens")
        if not isinstance(reported, int) or reported <= 0:
            skipped += 1
            continue
        try:
            prompt = adapters.parse_request(rec["request"], provider=rec["provider"])
            if (fallback := model_of(rec)) is not None:
                prompt = Prompt(prompt.provider, fallback, prompt.segments, prompt.params)
            counted = counter.tokenize(prompt).count
        except CachewardenError:
            skipped += 1
            continue
        name = bucket(rec, prompt)
        errors[name].append(abs(counted - reported) / reported)
        exact[name].append(counted == reported)
        worst.append((abs(counted - reported) / reported, rec["source"], counted, reported))
    counted_n = sum(len(v) for v in errors.values())
    print(f"recorded data: {path} ({counted_n} requests counted, {skipped} skipped)")
    for name in sorted(errors):
        errs = errors[name]
        share = sum(exact[name]) / len(errs)
        median = statistics.median(errs)
        p90 = statistics.quantiles(errs, n=10)[-1] if len(errs) > 1 else errs[0]
        n = len(errs)
        print(f"  {name:<18} n={n:>4}  exact {share:6.1%}  median rel err {median:6.2%}  p90 {p90:6.2%}")
    if detail:
        for err, source, counted, reported in sorted(worst, reverse=True)[:15]:
            print(f"    {err:7.2%} counted {counted:>6} reported {reported:>6}  {source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
