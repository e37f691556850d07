"""MetricChart: one figure of metric curves drawn by uPlot (as in the job view), extended live."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

import anywidget
import traitlets

from ...charts import UPLOT_CSS, UPLOT_SCRIPT, asset

FRONT_END = Path(__file__).with_name("chart.js")


@cache
def module() -> str:
    """Return the chart's front end: uPlot's script and chart.js as one self-contained ES module."""
    return asset(UPLOT_SCRIPT) + "\n" + FRONT_END.read_text(encoding="utf-8")


def _value(y: float) -> float | None:
    # JSON has no NaN or infinity: a missing value is a gap in the line
    return float(y) if math.isfinite(y) else None


def align(curves: Mapping[str, Sequence[Sequence[float]]]) -> list[list]:
    """Return uPlot's columns: the sorted x values, then each series' y at them (None where it has none)."""
    xs = sorted({float(x) for points in curves.values() for x, _ in points})
    index = {x: i for i, x in enumerate(xs)}
    columns: list[list] = [xs]
    for points in curves.values():
        column: list[float | None] = [None] * len(xs)
        for x, y in points:
            column[index[float(x)]] = _value(y)
        columns.append(column)
    return columns


class MetricChart(anywidget.AnyWidget):
    """One figure: a line per series against the x axis, new points appended without a redraw."""

    _esm = traitlets.Unicode().tag(sync=True)
    _css = traitlets.Unicode().tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    x_label = traitlets.Unicode("step").tag(sync=True)
    height = traitlets.Int(260).tag(sync=True)
    series = traitlets.List(traitlets.Unicode()).tag(sync=True)
    # the x column, then one y column per series; sent whole only when reset, else extended in place
    data = traitlets.List([[]]).tag(sync=True)

    @traitlets.default("_esm")
    def _default_esm(self) -> str:
        return module()

    @traitlets.default("_css")
    def _default_css(self) -> str:
        return asset(UPLOT_CSS)

    def update(self, curves: Mapping[str, Sequence[Sequence[float]]]) -> None:
        """Show these series' [x, y] points.

        When the rows already shown are unchanged, only the new ones go to the browser, which
        appends them with uPlot's setData; anything else (a new series, thinned points) resets the chart.
        """
        columns = align(curves)
        shown = len(self.data[0])
        if list(curves) == self.series and all(
            new[:shown] == old for new, old in zip(columns, self.data, strict=True)
        ):
            rows = [list(row) for row in zip(*(column[shown:] for column in columns), strict=True)]
            if rows:
                # in place: traitlets sees no change, so the columns are not sent again, yet a
                # browser that reloads the page reads them whole
                for old, new in zip(self.data, columns, strict=True):
                    old.extend(new[shown:])
                self.send({"type": "append", "rows": rows})
            return
        with self.hold_sync():
            self.series = list(curves)
            self.data = columns
