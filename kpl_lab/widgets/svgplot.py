"""Line charts as inline SVG: metric curves drawn with no plotting library."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

# Tableau 10: distinguishable colours that read on light and dark themes
COLOURS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 12, 28, 40


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Return about `count` round tick values covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        return [low]
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def tick_label(value: float) -> str:
    """Return a short axis label."""
    return f"{value:.4g}"


def render_svg(
    series: Mapping[str, Sequence[Sequence[float]]],
    title: str = "",
    width: int = 560,
    height: int = 280,
    x_label: str = "step",
) -> str:
    """Return an SVG chart of each series' (x, y) points, one coloured line each, with a legend."""
    points = {
        name: [(float(x), float(y)) for x, y in pts if math.isfinite(x) and math.isfinite(y)]
        for name, pts in series.items()
    }
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    if title:
        parts.append(
            f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>'
        )
    every = [p for pts in points.values() for p in pts]
    if not every:
        parts.append(
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#888">no metrics yet</text>'
        )
        parts.append("</svg>")
        return "".join(parts)
    x_low, x_high = min(p[0] for p in every), max(p[0] for p in every)
    y_low, y_high = min(p[1] for p in every), max(p[1] for p in every)
    if x_high == x_low:
        x_low, x_high = x_low - 0.5, x_high + 0.5
    if y_high == y_low:
        pad = abs(y_low) * 0.1 or 0.5
        y_low, y_high = y_low - pad, y_high + pad
    left, right = MARGIN_LEFT, width - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, height - MARGIN_BOTTOM

    def sx(x: float) -> float:
        return left + (x - x_low) / (x_high - x_low) * (right - left)

    def sy(y: float) -> float:
        return bottom - (y - y_low) / (y_high - y_low) * (bottom - top)

    parts.append('<g stroke="#ddd" stroke-width="1">')
    for tick in nice_ticks(y_low, y_high):
        parts.append(f'<line x1="{left}" x2="{right}" y1="{sy(tick):.1f}" y2="{sy(tick):.1f}"/>')
    parts.append("</g>")
    parts.append('<g fill="#444">')
    for tick in nice_ticks(y_low, y_high):
        parts.append(
            f'<text x="{left - 4}" y="{sy(tick) + 4:.1f}" text-anchor="end">{tick_label(tick)}</text>'
        )
    for tick in nice_ticks(x_low, x_high):
        parts.append(
            f'<text x="{sx(tick):.1f}" y="{bottom + 14}" text-anchor="middle">{tick_label(tick)}</text>'
        )
    parts.append(
        f'<text x="{(left + right) / 2}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append("</g>")
    parts.append(
        f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#888"/>'
    )
    for index, (name, pts) in enumerate(points.items()):
        colour = COLOURS[index % len(COLOURS)]
        if len(pts) == 1:
            (x, y) = pts[0]
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>')
        elif pts:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        legend_y = top + 14 + 14 * index
        last = f" {tick_label(pts[-1][1])}" if pts else ""
        parts.append(
            f'<rect x="{right - 150}" y="{legend_y - 8}" width="10" height="3" fill="{colour}"/>'
            f'<text x="{right - 136}" y="{legend_y - 3}" fill="#222">{escape(name)}{last}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
