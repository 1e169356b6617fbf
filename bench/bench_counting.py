"""Accuracy of `count` against the input tokens providers reported (../shared/data/recorded).

Prints, per request format, how close PromptCounter comes to the recorded usage:
- OpenAI chat, plain text (no tools, images or structured-output schema): share counted exactly;
- OpenAI chat with tools, Responses, Anthropic: median relative error (|counted - reported| / reported).
Anthropic rows are also given per model family. The Anthropic framing constants and ratios were fitted
on the "in-sample" records only; "held-out" records are those whose test (the cassette's test name, so
the sync / async / beta variants of one test stay together) hashes into one bucket in four, and are
reported separately so the fit can be judged honestly. Only records that are self-contained and not
suspect count (README of the data). The data are third-party: they are read in place and never copied
into the repository.

    .venv/bin/python bench/bench_counting.py [PATH/interactions.jsonl] [--detail]
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cachewarden.proxy.engine import adapters
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Prompt

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


# Anthropic model families (longest prefix wins), as in proxy/counting.py FRAMING and rules/models.yaml.
FAMILIES = {
    "claude-sonnet-4": "sonnet-4-0",
    "claude-sonnet-4-5": "sonnet-4-5",
    "claude-sonnet-4-6": "sonnet-4-6",
    "claude-haiku-4-5": "haiku-4-5",
    "claude-3-5-haiku": "3-5-haiku",
    "claude-3": "claude-3",
    "claude-opus-4": "opus-4",
    "claude-opus-4-7": "opus-4-7/4-8",
    "claude-opus-4-8": "opus-4-7/4-8",
    "claude-opus-5": "5.x",
    "claude-sonnet-5": "5.x",
}


def family(model: str) -> str:
    name = model.lower()
    keys = [k for k in FAMILIES if name.startswith(k)]
    return FAMILIES[max(keys, key=len)] if keys else "other"


def test_group(sequence_id: str) -> str:
    """The test a cassette belongs to: its last ``test_*`` path part without parameters, else the file."""
    repo, _, path = sequence_id.partition(":")
    parts = path.split("/")
    tests = [p for p in parts if p.startswith("test_")]
    name = re.sub(r"[.](yaml|har|json)$", "", re.sub(r"\[.*", "", tests[-1] if tests else parts[-1]))
    if not tests and len(parts) > 2:
        name = f"{parts[-3]}/{name}"
    return f"{repo}:{name}"


def held_out(rec: dict[str, Any]) -> bool:
    return hashlib.blake2b(test_group(rec["sequence_id"]).encode(), digest_size=8).digest()[0] % 4 == 0


def stats(errs: list[float]) -> str:
    if not errs:
        return f"{'-':>21}"
    p90 = statistics.quantiles(errs, n=10)[-1] if len(errs) > 1 else errs[0]
    return f"{statistics.median(errs):6.2%} p90 {p90:7.2%} n={len(errs):<3}"


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
    split: dict[tuple[str, bool], list[float]] = defaultdict(list)
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
        err = abs(counted - reported) / reported
        names = [bucket(rec, prompt)]
        if rec["provider"] == "anthropic":
            names.append(f"  {family(prompt.model)}")
        for name in names:
            errors[name].append(err)
            exact[name].append(counted == reported)
            split[(name, held_out(rec))].append(err)
        worst.append((abs(counted - reported) / reported, rec["source"], counted, reported))
    counted_n = sum(len(v) for k, v in errors.items() if not k.startswith(" "))
    print(f"recorded data: {path} ({counted_n} requests counted, {skipped} skipped)")
    print(f"  {'':<18} {'':>6}  {'':>12}  {'all: median rel err':<32} in-sample {'':<21} held-out")
    order = sorted((k for k in errors if not k.startswith(" ")), key=lambda k: (k != "anthropic", k))
    for top in order:
        subs = sorted(k for k in errors if k.startswith(" ")) if top == "anthropic" else []
        for name in (top, *subs):
            errs = errors[name]
            share = sum(exact[name]) / len(errs)
            print(
                f"  {name:<18} n={len(errs):>4}  exact {share:6.1%}  {stats(errs)}  "
                f"{stats(split[(name, False)])}  {stats(split[(name, True)])}"
            )
    if detail:
        for err, source, counted, reported in sorted(worst, reverse=True)[:15]:
            print(f"    {err:7.2%} counted {counted:>6} reported {reported:>6}  {source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
