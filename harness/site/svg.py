"""Static SVG line charts (readable without JavaScript); site.js adds hover values and series toggles.

Each chart is a ``<figure class="chart">`` holding the drawn ``<svg>`` and, in a JSON script tag, the same points
and the axes' mapping, so the script reads the numbers the figure was drawn from (no second copy to drift).
"""

from __future__ import annotations

import html
import json
import math

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
W, H = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 62, 14, 14, 42
MAX_POINTS = 600  # per series; longer series are thinned evenly (first and last point kept)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        return f"{v:.2g}"
    return f"{v:.4g}"


def _thin(points: list) -> list:
    if len(points) <= MAX_POINTS:
        return points
    idx = sorted({round(i * (len(points) - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)})
    return [points[i] for i in idx]


def line_chart(series: list[dict], title: str, xlabel: str, ylabel: str, chart_id: str) -> str:
    """``series``: [{"name": str, "points": [(x, y), ...]}]; non-finite points are dropped. Returns the HTML of
    one figure, or "" when no series has a point."""
    clean = []
    for s in series:
        pts = [(float(x), float(y)) for x, y in s["points"] if _ok(x) and _ok(y)]
        if pts:
            clean.append({"name": str(s["name"]), "points": _thin(sorted(pts))})
    if not clean:
        return ""
    xs = [x for s in clean for x, _ in s["points"]]
    ys = [y for s in clean for _, y in s["points"]]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        pad = abs(y0) * 0.1 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    else:
        pad = (y1 - y0) * 0.05
        y0, y1 = y0 - pad, y1 + pad
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x):
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y):
        return TOP + (1 - (y - y0) / (y1 - y0)) * ph

    out = [f'<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{html.escape(title)}">']
    out.append(f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/>')
    for t in nice_ticks(y0, y1):
        if y0 <= t <= y1:
            y = py(t)
            out.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}"/>')
            out.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in nice_ticks(x0, x1, 6):
        if x0 <= t <= x1:
            x = px(t)
            out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + ph}"/>')
            out.append(f'<text class="tick" x="{x:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{_fmt(t)}</text>')
    out.append(
        f'<text class="axis" x="{LEFT + pw / 2:.1f}" y="{H - 6}" text-anchor="middle">{html.escape(xlabel)}</text>'
    )
    out.append(
        f'<text class="axis" transform="translate(14 {TOP + ph / 2:.1f}) rotate(-90)" text-anchor="middle">'
        f"{html.escape(ylabel)}</text>"
    )
    for i, s in enumerate(clean):
        color = PALETTE[i % len(PALETTE)]
        d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s["points"])
        marker = (
            "".join(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5"/>' for x, y in s["points"])
            if len(s["points"]) <= 40
            else ""
        )
        out.append(
            f'<g class="series" data-series="{i}" stroke="{color}" fill="{color}">'
            f'<polyline fill="none" stroke-width="1.8" points="{d}"/>{marker}</g>'
        )
    out.append("</svg>")
    legend = "".join(
        f'<li><button type="button" class="legend-item" data-series="{i}" aria-pressed="true">'
        f'<span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>{html.escape(s["name"])}'
        f"</button></li>"
        for i, s in enumerate(clean)
    )
    data = {
        "x0": x0,
        "x1": x1,
        "y0": y0,
        "y1": y1,
        "left": LEFT,
        "top": TOP,
        "width": pw,
        "height": ph,
        "xlabel": xlabel,
        "ylabel": ylabel,
        "series": [
            {"name": s["name"], "color": PALETTE[i % len(PALETTE)], "points": s["points"]} for i, s in enumerate(clean)
        ],
    }
    return (
        f'<figure class="chart" id="{html.escape(chart_id)}"><figcaption>{html.escape(title)}</figcaption>'
        f'<div class="chart-box">{"".join(out)}<div class="tooltip" hidden></div></div>'
        f'<ul class="legend">{legend}</ul>'
        f'<script type="application/json" class="chart-data">{json_for_html(data)}</script></figure>'
    )


def _ok(v) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def json_for_html(obj) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>``, no HTML comment openers)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
