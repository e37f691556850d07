"""Inline SVG metric charts."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from kpl_lab.widgets.svgplot import nice_ticks, render_svg

SVG = "{http://www.w3.org/2000/svg}"


def test_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(3, 97) == [20.0, 40.0, 60.0, 80.0]
    assert nice_ticks(0.25, 1.0) == [0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(5, 5) == [5]
    assert nice_ticks(0, math.inf) == []


def test_each_series_is_a_line_with_a_legend():
    svg = render_svg({"loss": [(0, 1.0), (1, 0.5), (2, 0.25)], "acc<&>": [(0, 0.1), (2, 0.9)]}, "training")
    root = ET.fromstring(svg)  # well-formed, names escaped
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2 and lines[0].get("stroke") != lines[1].get("stroke")
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "training" in texts and "loss 0.25" in texts and "acc<&> 0.9" in texts
    xs = [float(p.split(",")[0]) for p in lines[0].get("points").split()]
    assert xs == sorted(xs) and len(xs) == 3


def test_empty_single_and_non_finite_points():
    root = ET.fromstring(render_svg({}))
    assert [t.text for t in root.iter(f"{SVG}text")] == ["no metrics yet"]
    root = ET.fromstring(render_svg({"loss": [(0, 2.0)], "bad": [(1, math.nan), (2, math.inf)]}))
    assert len(root.findall(f"{SVG}circle")) == 1 and not root.findall(f"{SVG}polyline")
