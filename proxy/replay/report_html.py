"""The replay report as ONE self-contained HTML file: inline CSS, inline SVG plots drawn here, no network.

The page must open offline and from an e-mail attachment, so nothing is fetched: no CDN, no fonts,
no images, and a Content-Security-Policy that forbids any load the page might grow by accident.
The only script is a guard that writes an error marker into the page when anything throws (the
browser test asserts it is absent) and a marker that the page finished loading.

Everything that comes from the log (prompt text, model names, segment paths, details) goes through
``html.escape``: prompts routinely contain ``<script>`` and the report must show, not run, them.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from string import Template

from cachewarden.proxy.explain.attribution import FIXES

from .report import Miss, Point, Report
from .report_text import percent, usd

# Plot geometry (SVG user units; the SVG scales to the page width).
WIDTH = 1200
TOKENS_HEIGHT = 280
MARGIN_LEFT = 70
MARGIN_BOTTOM = 36
MARGIN_TOP = 12
REASON_ROW = 26
REASON_LABEL = 170

COLOURS = {"cached": "#2e7d32", "written": "#f9a825", "uncached": "#c62828", "reported": "#111111"}

_PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
  content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cachewarden replay — $title</title>
<script>
window.onerror = function (message) {
  var box = document.createElement("div");
  box.id = "cw-js-error";
  box.textContent = "script error: " + message;
  (document.body || document.documentElement).appendChild(box);
};
document.addEventListener("DOMContentLoaded", function () {
  document.body.setAttribute("data-rendered", "ok");
});
</script>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1280px;
  padding: 0 16px; color: #1b1b1b; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; }
.sub { color: #555; margin: 0 0 16px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card b { display: block; font-size: 18px; }
.card span { color: #555; font-size: 12px; }
svg { width: 100%; height: auto; display: block; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 11px; height: 11px; margin-right: 4px; vertical-align: -1px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 5px 8px; border-bottom: 1px solid #e4e4e4; }
th { background: #f6f6f6; }
td.n { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
pre { margin: 4px 0 0; padding: 6px 8px; background: #f7f7f7; border-radius: 4px; overflow-x: auto;
  font: 12px/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
pre mark { background: #ffcc80; }
.code { font-family: ui-monospace, monospace; font-weight: 600; }
.detail { color: #444; }
#cw-js-error { background: #c62828; color: #fff; padding: 8px; }
</style>
</head>
<body>
<h1>cachewarden replay</h1>
<p class="sub">$subtitle</p>
<div class="cards">$cards</div>
<h2>Input tokens per request</h2>
<p class="legend">$legend</p>
$tokens_plot
<h2>$reasons_title</h2>
$reasons_plot
$reasons_table
<h2>Worst misses</h2>
$misses
</body>
</html>
""")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{_e(value)}</b><span>{_e(label)}</span></div>'


def _cards(report: Report) -> str:
    cards = [
        _card(f"{report.requests:,}", "requests"),
        _card(f"{report.input_tokens:,}", "input tokens"),
        _card(percent(report.hit_rate(report.predicted)), "predicted cached"),
    ]
    if report.reported is not None:
        cards.append(
            _card(
                percent(report.hit_rate(report.reported)),
                f"reported cached ({report.reported_requests:,} req.)",
            )
        )
        cards.append(
            _card(f"{report.errors.cached_abs / report.errors.requests:,.1f}", "mean |error| cached")
        )
    cards += [
        _card(percent(report.stable_prefix_share), "stable prefix share"),
        _card(usd(report.cost_usd), "predicted input cost"),
        _card(usd(report.savings_usd), "saved by caching (net of writes)"),
        _card(usd(report.missed_savings_usd), "missed savings"),
    ]
    return "".join(cards)


def _subtitle(report: Report, label: str) -> str:
    parts = [label]
    if report.timestamped and report.first_at is not None and report.last_at is not None:
        parts.append(f"{_when(report.first_at)} → {_when(report.last_at)}")
    else:
        parts.append("no timestamps: requests taken as back to back")
    if report.bad_lines:
        parts.append(f"{report.bad_lines:,} bad lines skipped")
    return _e(" · ".join(parts))


def _legend() -> str:
    items = [("cached", "cached (read)"), ("written", "cache write"), ("uncached", "uncached")]
    out = [f'<span><i style="background:{COLOURS[k]}"></i>{_e(v)}</span>' for k, v in items]
    out.append(f'<span><i style="background:{COLOURS["reported"]};height:3px"></i>reported cached</span>')
    return "".join(out)


def _point_label(point: Point, timestamped: bool) -> str:
    lines = f"line {point.first_index + 1}" + (
        f"–{point.last_index + 1} ({point.requests} requests, mean per request)" if point.requests > 1 else ""
    )
    when = f" at {_when(point.first_at)}" if timestamped else ""
    n = point.requests
    text = (
        f"{lines}{when}: {point.cached // n:,} cached, {point.cache_write // n:,} written, "
        f"{point.uncached // n:,} uncached"
    )
    if point.reported_requests:
        text += f"; reported {point.reported_cached // point.reported_requests:,} cached"
    return text


def tokens_plot(report: Report) -> str:
    """Stacked bars: cached / written / uncached tokens per request (mean per bar once downsampled)."""
    points = report.series.points
    plot_w = WIDTH - MARGIN_LEFT - 10
    plot_h = TOKENS_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    peak = max((max(p.cached + p.cache_write + p.uncached, 1) / p.requests for p in points), default=1.0)
    step = plot_w / max(1, len(points))
    bar_w = max(1.0, step * 0.8)
    base = MARGIN_TOP + plot_h

    def y(tokens: float) -> float:
        return base - plot_h * tokens / peak

    parts = [
        f'<svg id="tokens-plot" viewBox="0 0 {WIDTH} {TOKENS_HEIGHT}" role="img" '
        f'aria-label="input tokens per request">'
    ]
    for frac in (0.0, 0.5, 1.0):
        ty = y(peak * frac)
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - 10}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#e0e0e0"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end">{peak * frac:,.0f}</text>'
        )
    for i, p in enumerate(points):
        x = MARGIN_LEFT + i * step + (step - bar_w) / 2
        n = p.requests
        stack = [("cached", p.cached / n), ("written", p.cache_write / n), ("uncached", p.uncached / n)]
        parts.append(
            f'<g class="bar" data-line="{p.first_index + 1}">'
            f"<title>{_e(_point_label(p, report.timestamped))}</title>"
        )
        level = 0.0
        for kind, tokens in stack:
            top, bottom = y(level + tokens), y(level)
            parts.append(
                f'<rect class="{kind}" x="{x:.2f}" y="{top:.2f}" width="{bar_w:.2f}" '
                f'height="{max(0.0, bottom - top):.2f}" fill="{COLOURS[kind]}"/>'
            )
            level += tokens
        if p.reported_requests:
            ry = y(p.reported_cached / p.reported_requests)
            parts.append(
                f'<line class="reported" x1="{x:.2f}" x2="{x + bar_w:.2f}" y1="{ry:.2f}" y2="{ry:.2f}" '
                f'stroke="{COLOURS["reported"]}" stroke-width="2"/>'
            )
        parts.append("</g>")
    parts.append(_x_axis(report, base, step))
    parts.append("</svg>")
    return "".join(parts)


def _x_axis(report: Report, base: float, step: float) -> str:
    points = report.series.points
    if not points:
        return ""
    ticks = sorted({0, len(points) // 2, len(points) - 1})
    out = [f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - 10}" y1="{base}" y2="{base}" stroke="#888"/>']
    for i in ticks:
        p = points[i]
        x = MARGIN_LEFT + (i + 0.5) * step
        label = _when(p.first_at)[11:19] if report.timestamped else f"line {p.first_index + 1}"
        out.append(f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle">{_e(label)}</text>')
    caption = "time (UTC)" if report.timestamped else "request (LOG line)"
    out.append(f'<text x="{MARGIN_LEFT}" y="{base + 32}">{_e(caption)}</text>')
    return "".join(out)


def _by_dollars(report: Report) -> bool:
    """Plot dollars unless no reason cost any (unpriced models): then tokens."""
    return any(t.usd_lost > 0 for t in report.reasons.values())


def reasons_plot(report: Report) -> str:
    """Horizontal bars: dollars (or tokens) lost per reason code, largest first."""
    dollars = _by_dollars(report)
    ranked = [(c, t) for c, t in report.reasons_by_cost() if (t.usd_lost if dollars else t.tokens_lost) > 0]
    if not ranked:
        return '<p id="reasons-plot-empty">No cache misses with a cost: nothing to plot.</p>'
    height = REASON_ROW * len(ranked) + 10
    peak = max(t.usd_lost if dollars else t.tokens_lost for _, t in ranked) or 1
    width = WIDTH - REASON_LABEL - 120
    parts = [f'<svg id="reasons-plot" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="lost by reason">']
    for i, (code, t) in enumerate(ranked):
        value = t.usd_lost if dollars else t.tokens_lost
        y = 5 + i * REASON_ROW
        w = max(1.0, width * value / peak)
        shown = usd(t.usd_lost) if dollars else f"{t.tokens_lost:,} tokens"
        parts.append(
            f'<g class="reason-bar" data-code="{_e(code)}"><title>{_e(code)}: {t.requests:,} requests, '
            f"{t.tokens_lost:,} tokens, {_e(usd(t.usd_lost))}</title>"
            f'<text x="{REASON_LABEL - 8}" y="{y + 15}" text-anchor="end">{_e(code)}</text>'
            f'<rect x="{REASON_LABEL}" y="{y}" width="{w:.2f}" height="{REASON_ROW - 8}" fill="#c62828"/>'
            f'<text x="{REASON_LABEL + w + 6:.2f}" y="{y + 15}">{_e(shown)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _reasons_table(report: Report) -> str:
    ranked = report.reasons_by_cost()
    if not ranked:
        return ""
    rows = [
        f'<tr><td class="code">{_e(code)}</td><td class="n">{t.requests:,}</td><td class="n">'
        f'{t.tokens_lost:,}</td><td class="n">{_e(usd(t.usd_lost))}</td>'
        f"<td>{_e(FIXES.get(code, ''))}</td></tr>"
        for code, t in ranked
    ]
    return (
        '<table id="reasons-table"><tr><th>reason</th><th>requests</th><th>tokens lost</th>'
        f"<th>dollars lost</th><th>fix</th></tr>{''.join(rows)}</table>"
    )


def _marked(line: str, column: int) -> str:
    """A context line with the character at ``column`` highlighted (past the end: a marked space)."""
    head, char, tail = line[:column], line[column : column + 1], line[column + 1 :]
    return f"{_e(head)}<mark>{_e(char or ' ')}</mark>{_e(tail)}"


def _divergence(miss: Miss) -> str:
    view = miss.divergence
    if view is None:
        return '<span class="detail">no content divergence (see the reasons)</span>'
    return (
        f'<div class="where">{_e(view.segment)}, offset {view.offset:,}</div><pre>'
        f"previous | {_marked(view.previous_line, view.previous_column)}\n"
        f"    next | {_marked(view.next_line, view.next_column)}</pre>"
    )


def _misses(report: Report) -> str:
    worst = report.worst()
    if not worst:
        return '<p id="misses-empty">No request lost cached tokens.</p>'
    rows = []
    for miss in worst:
        reasons = "".join(
            f'<div><span class="code">{_e(r.code)}</span>'
            f"{_e(' at ' + r.segment) if r.segment else ''}: "
            f'<span class="detail">{_e(r.detail)}</span> ({r.tokens_lost:,} tokens)</div>'
            for r in miss.reasons
            if r.tokens_lost
        )
        rows.append(
            f'<tr class="miss"><td class="n">{miss.index + 1}</td><td>{_e(miss.model)}</td>'
            f'<td class="n">{miss.tokens_lost:,} / {miss.tokens:,}</td>'
            f'<td class="n">{_e(usd(miss.usd_lost))}</td>'
            f"<td>{reasons}{_divergence(miss)}</td></tr>"
        )
    return (
        '<table id="misses-table"><tr><th>line</th><th>model</th><th>tokens lost</th><th>dollars lost</th>'
        f"<th>why, and where the prompt diverged</th></tr>{''.join(rows)}</table>"
    )


def render_html(report: Report, label: str) -> str:
    dollars = _by_dollars(report)
    return _PAGE.substitute(
        title=_e(label),
        subtitle=_subtitle(report, label),
        cards=_cards(report),
        legend=_legend(),
        tokens_plot=tokens_plot(report),
        reasons_title="Dollars lost by reason" if dollars else "Tokens lost by reason (models not priced)",
        reasons_plot=reasons_plot(report),
        reasons_table=_reasons_table(report),
        misses=_misses(report),
    )
