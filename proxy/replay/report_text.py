"""The replay report as text a person reads at a glance: hit rate, money by reason, worst offenders.

Human-facing line numbers are 1-based (the JSON ``index`` is 0-based): ``line 12`` is what an
editor or ``sed -n 12p`` shows.
"""

from __future__ import annotations

from cachewarden.proxy.explain.attribution import FIXES

from .replayer import LOW_STABLE_SHARE
from .report import DivergenceView, Miss, Report

WORST = 3


def usd(value: float) -> str:
    if value == 0:
        return "$0"
    return f"${value:,.4f}" if abs(value) >= 0.0001 else f"${value:.2g}"


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _models(report: Report) -> str:
    ranked = sorted(report.models.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{provider} {model}" for (provider, model), _ in ranked[:3])
    more = len(ranked) - 3
    return shown + (f" and {more} more" if more > 0 else "")


def _header(report: Report, label: str) -> list[str]:
    skipped = []
    if report.bad_lines:
        skipped.append(f"{_plural(report.bad_lines, 'bad line')} skipped")
    if report.skipped_lines:
        skipped.append(f"{_plural(report.skipped_lines, 'line')} not cached prompts")
    tail = f"; {', '.join(skipped)}" if skipped else ""
    lines = [f"{label}: {_plural(report.requests, 'request')} ({_models(report)}){tail}"]
    if not report.timestamped:
        lines.append("  no timestamps: requests taken as back to back, one second apart")
    elif report.first_at is not None and report.last_at is not None:
        lines.append(f"  spanning {report.last_at - report.first_at:,.0f} s of traffic")
    return lines


def _summary(report: Report) -> list[str]:
    p = report.predicted
    rows = [
        ("input tokens", f"{report.input_tokens:,}"),
        (
            "predicted",
            f"{percent(report.hit_rate(p))} cached ({p.cached:,} cached, {p.cache_write:,} written, "
            f"{p.uncached:,} uncached)",
        ),
    ]
    if report.reported is not None:
        r, where = report.reported, report.predicted_where_reported
        rows.append(
            (
                "reported",
                f"{percent(report.hit_rate(r))} cached on the {_plural(report.reported_requests, 'request')} "
                f"with usage (predicted {percent(report.hit_rate(where))} on the same)",
            )
        )
        e = report.errors
        rows.append(
            (
                "prediction error",
                f"cached tokens off by {e.cached_abs / e.requests:,.1f} on average, "
                f"exact on {e.exact / e.requests:.0%} of requests",
            )
        )
    share = report.stable_prefix_share
    low = report.low_share_requests
    verdict = "caching pays" if share >= LOW_STABLE_SHARE else "caching buys little"
    rows.append(
        (
            "stable prefix",
            f"{share:.1%} of input tokens reusable from an earlier request ({verdict}; "
            f"{_plural(low, 'request')} below {LOW_STABLE_SHARE:.0%})",
        )
    )
    rows.append(("input cost", f"{usd(report.cost_usd)} predicted" + _unpriced(report)))
    rows.append(("caching", _repays(report)))
    rows.append(("missed savings", f"{usd(report.missed_savings_usd)} lost to the misses below"))
    width = max(len(k) for k, _ in rows)
    return [f"  {k.ljust(width)}  {v}" for k, v in rows]


def _unpriced(report: Report) -> str:
    if not report.unpriced_requests:
        return ""
    return f" ({_plural(report.unpriced_requests, 'request')} of unknown models not priced)"


def _repays(report: Report) -> str:
    reads, premium = report.read_savings_usd, report.write_premium_usd
    net = report.savings_usd
    if premium == 0:
        return f"reads saved {usd(reads)}; writes cost no premium on these models"
    verdict = "repays its write premium" if net > 0 else "does NOT repay its write premium"
    return f"reads saved {usd(reads)}, writes cost {usd(premium)} extra: net {usd(net)}, caching {verdict}"


def _reasons(report: Report) -> list[str]:
    ranked = report.reasons_by_cost()
    if not ranked:
        return ["no misses to explain"]
    lines = ["misses by reason (most dollars first):"]
    width = max(len(code) for code, _ in ranked)
    for code, t in ranked:
        lines.append(
            f"  {code.ljust(width)}  {_plural(t.requests, 'request'):>14}  {t.tokens_lost:>12,} tokens  "
            f"{usd(t.usd_lost):>10}"
        )
    fixes = [f"  {code}: {FIXES[code]}" for code, t in ranked if t.tokens_lost and code in FIXES]
    if fixes:
        lines += ["", "fixes:", *fixes]
    return lines


def divergence_lines(view: DivergenceView, indent: str = "      ") -> list[str]:
    """Both lines around the divergence, a caret under each change (one caret when they align)."""
    lines = [
        f"{indent}previous | {view.previous_line}",
        f"{indent}         | {' ' * view.previous_column}^",
        f"{indent}    next | {view.next_line}",
        f"{indent}         | {' ' * view.next_column}^",
    ]
    if view.previous_column == view.next_column:
        del lines[1]
    return lines


def _offender(n: int, miss: Miss) -> list[str]:
    first = miss.reasons[0] if miss.reasons else None
    codes = ", ".join(dict.fromkeys(r.code for r in miss.reasons if r.tokens_lost))
    lines = [
        f"  {n}. line {miss.index + 1} ({miss.provider}, {miss.model}): {miss.tokens_lost:,} of "
        f"{miss.tokens:,} tokens lost, {usd(miss.usd_lost)} — {codes}"
    ]
    for reason in miss.reasons:
        if not reason.tokens_lost:
            continue
        where = "" if reason.segment is None else f" at {reason.segment}"
        where += "" if reason.segment is None or reason.offset is None else f":{reason.offset}"
        lines.append(f"     {reason.code}{where}: {reason.detail}")
    if miss.divergence is not None:
        view = miss.divergence
        lines.append(f"     diverged at {view.segment}, offset {view.offset}:")
        lines += divergence_lines(view)
    elif first is not None and first.segment is None:
        lines.append("     (no content divergence: the prompt matches; see the reason above)")
    return lines


def render_text(report: Report, label: str) -> str:
    lines = _header(report, label)
    lines += _summary(report)
    lines.append("")
    lines += _reasons(report)
    worst = report.worst(WORST)
    if worst:
        lines.append("")
        lines.append(f"worst offenders (top {len(worst)} by dollars lost):")
        for n, miss in enumerate(worst, 1):
            lines += _offender(n, miss)
    return "\n".join(lines) + "\n"
