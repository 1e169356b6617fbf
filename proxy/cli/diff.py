"""``cachewarden diff PREVIOUS NEXT``: why NEXT misses the cache after PREVIOUS, where, and what it costs.

Both bodies go through a fresh Engine in one tenant (PREVIOUS at t=0, NEXT at t=1, so nothing has
expired), and attribution explains NEXT against PREVIOUS. The JSON output is the stable contract
of DESIGN.md; the text output reads like a compiler error: where the prompts diverge, both lines
with a caret under the first differing character, then one block per reason with its cost and fix.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cachewarden.proxy.engine.engine import Analysis, Engine
from cachewarden.proxy.engine.errors import CachewardenError, RequestError
from cachewarden.proxy.engine.prompt import PROVIDERS, Prompt, Provider
from cachewarden.proxy.explain.attribution import FIXES, Divergence, Reason, attribute, find_divergence
from cachewarden.proxy.explain.textdiff import caret_view

from .files import read_text

PROG = "cachewarden diff"
TENANT = "diff"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Explain why a request misses the prompt cache after an earlier one.",
    )
    parser.add_argument("previous", metavar="PREVIOUS", help="the earlier request body (JSON file)")
    parser.add_argument("next", metavar="NEXT", help="the later request body (JSON file)")
    parser.add_argument(
        "--provider", choices=PROVIDERS, help="request format (inferred from each body when omitted)"
    )
    parser.add_argument("--model", help="model name for both requests (overrides the bodies' model)")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    return parser


@dataclass(frozen=True, slots=True)
class DiffReport:
    """The two analyses, where the prompts diverge, and the reasons NEXT misses after PREVIOUS."""

    previous: Analysis
    next: Analysis
    divergence: Divergence | None
    reasons: list[Reason]

    @property
    def common_prefix_tokens(self) -> int:
        """The prefix NEXT shares with PREVIOUS in the cache's scope, in provider tokens."""
        tp = self.next.tokenized
        common = self.next.match.common_prefix_tokens
        units = common if tp.ratio == 1.0 else round(common * tp.ratio)
        return min(units, tp.count)


def parse_body(text: str, label: str, provider: Provider | None, model: str | None) -> Prompt:
    from cachewarden.proxy.engine.adapters import load_body, parse_request

    try:
        prompt = parse_request(load_body(text), provider=provider)
        return prompt.with_model(model) if model else prompt
    except RequestError as exc:
        raise RequestError(f"{label}: {exc}") from None


def diff_prompts(previous: Prompt, next: Prompt, engine: Engine | None = None) -> DiffReport:
    """Analyse PREVIOUS then NEXT in a fresh engine (one tenant, one second apart) and attribute."""
    engine = engine or Engine()
    before = engine.analyse(previous, tenant=TENANT, now=0.0)
    after = engine.analyse(next, tenant=TENANT, now=1.0)
    reasons = attribute(after, engine.prices)
    divergence = find_divergence(previous, next, before.tokenized, after.tokenized)
    return DiffReport(before, after, divergence, reasons)


# ---------------------------------------------------------------------------------------------------
# Output


def as_json(report: DiffReport) -> dict[str, Any]:
    after, prediction = report.next, report.next.prediction
    div = report.divergence
    return {
        "provider": after.prompt.provider,
        "model": after.prompt.model,
        "previous_tokens": report.previous.tokenized.count,
        "tokens": after.tokenized.count,
        "common_prefix_tokens": report.common_prefix_tokens,
        "predicted": {
            "cached_tokens": prediction.cached_tokens,
            "cache_write_tokens": prediction.cache_write_tokens,
            "uncached_tokens": prediction.uncached_tokens,
        },
        "divergence": None if div is None else {"segment": div.segment, "offset": div.offset},
        "reasons": [
            {"code": r.code, "segment": r.segment, "tokens_lost": r.tokens_lost, "detail": r.detail}
            for r in report.reasons
        ],
    }


def _usd(value: float) -> str:
    return f"${value:,.4f}" if value >= 0.0001 or value == 0 else f"${value:.2g}"


def _shown_text(prompt: Prompt, index: int) -> tuple[str, bool]:
    """The text to show for a segment, and whether it is a stand-in (a missing or non-text segment)."""
    if index >= len(prompt.segments):
        return "(no segment here)", True
    seg = prompt.segments[index]
    if not seg.text:
        return f"({seg.kind})", True
    return seg.text, False


def _divergence_lines(report: DiffReport) -> list[str]:
    div = report.divergence
    if div is None:
        return ["no divergence: the content of PREVIOUS is a prefix of NEXT (or equal to it)"]
    prev_text, prev_stub = _shown_text(report.previous.prompt, div.index)
    next_text, next_stub = _shown_text(report.next.prompt, div.index)
    where = f"{div.segment}, offset {div.offset}"
    lines = [f"diverged at {where}:"]
    lines += caret_view(
        prev_text, next_text, 0 if prev_stub else div.previous_offset, 0 if next_stub else div.offset
    )
    return lines


def as_text(report: DiffReport, previous_label: str, next_label: str) -> str:
    after, prediction = report.next, report.next.prediction
    prompt = after.prompt
    lines = [
        f"{previous_label} → {next_label} ({prompt.provider}, {prompt.model})",
        f"  tokens: {report.previous.tokenized.count:,} → {after.tokenized.count:,}; "
        f"common prefix {report.common_prefix_tokens:,}",
        f"  predicted: {prediction.cached_tokens:,} cached, {prediction.cache_write_tokens:,} cache write, "
        f"{prediction.uncached_tokens:,} uncached",
        "",
    ]
    lines += _divergence_lines(report)
    lines.append("")
    if not report.reasons:
        lines.append("no cache miss to explain: NEXT reuses everything it shares with PREVIOUS")
        return "\n".join(lines)
    tokens = sum(r.tokens_lost for r in report.reasons)
    usd = sum(r.usd_lost for r in report.reasons)
    lines.append(f"reasons ({tokens:,} tokens, {_usd(usd)} lost):")
    for r in report.reasons:
        where = "" if r.segment is None else f" at {r.segment}" + ("" if r.offset is None else f":{r.offset}")
        lines.append(f"  {r.code}{where}: {r.tokens_lost:,} tokens, {_usd(r.usd_lost)}")
        lines.append(f"      {r.detail}")
        fix = FIXES.get(r.code)
        if fix:
            lines.append(f"      fix: {fix}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        previous = parse_body(read_text(args.previous), args.previous, args.provider, args.model)
        nxt = parse_body(read_text(args.next), args.next, args.provider, args.model)
        report = diff_prompts(previous, nxt)
    except CachewardenError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(as_json(report), ensure_ascii=False, indent=2))
    else:
        print(as_text(report, args.previous, args.next))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
