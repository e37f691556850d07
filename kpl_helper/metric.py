"""Metric curves shown live in the job page: a figure, then one point per push."""

from __future__ import annotations

import json
import math
import operator
import time

from kpl_helper import distributed, events

PLOT_LINE = "line"


def number(value, name: str) -> float:
    """Return `value` as a float (numpy and torch scalars too); refuse what is not a number."""
    if type(value) is float:
        return value
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r:.60}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError) as error:
        raise TypeError(
            f"{name} must be a number, got {type(value).__name__} {value!r:.60}: {error}"
        ) from None


def _x(value):
    if type(value) is int:
        return value
    try:
        return operator.index(value)  # integer steps stay integers (numpy, torch included)
    except TypeError:
        return number(value, "metric x")


def _name(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"MetricFigure {what} must be a non-empty string, got {value!r}")
    return value


class MetricFigure:
    """One figure with up to two series (y1, y2) over `x_name`.

    In a job of several workers only rank 0 sends (see kpl_helper.distributed).
    """

    def __init__(
        self,
        title: str,
        y1_name: str,
        y1_type: str = PLOT_LINE,
        y2_name: str | None = None,
        y2_type: str | None = None,
        x_name: str = "step",
    ):
        self.title = _name(title, "title")
        self.y1_name = _name(y1_name, "y1_name")
        self.y1_type = _name(y1_type, "y1_type")
        self.y2_name = None if y2_name is None else _name(y2_name, "y2_name")
        if self.y2_name == self.y1_name:
            raise ValueError(f"MetricFigure {title!r}: y1_name and y2_name are both {y1_name!r}")
        self.y2_type = None if self.y2_name is None else _name(y2_type or PLOT_LINE, "y2_type")
        self.x_name = _name(x_name, "x_name")
        self._rank = distributed.get_rank()
        self._all_ranks = distributed.all_ranks()
        # another rank's points are series of their own, never mixed into rank 0's curve
        suffix = f" (rank {self._rank})" if self._rank else ""
        self._y1_series = self.y1_name + suffix
        self._y2_series = None if self.y2_name is None else self.y2_name + suffix
        self._title_json = json.dumps(self.title)
        self._y1_json = json.dumps(self._y1_series)
        self._y2_json = json.dumps(self._y2_series)
        self._writer = events.get_writer()
        if self._writer is not None and not self._rank:
            self._writer.push(
                {
                    "type": "figure",
                    "time": time.time(),
                    "title": self.title,
                    "x_name": self.x_name,
                    "y1_name": self.y1_name,
                    "y1_type": self.y1_type,
                    "y2_name": self.y2_name,
                    "y2_type": self.y2_type,
                }
            )

    def push_metric(self, x, y1, y2=None, all_ranks: bool = False) -> None:
        """Add one point: cheap enough for every step (queued, sent at most every 0.5 s).

        On a rank other than 0 nothing is sent, unless `all_ranks` (or KPL_ALL_RANKS=1).
        """
        if self._rank and not (all_ranks or self._all_ranks):
            return
        if type(y1) is not float:
            y1 = number(y1, self.y1_name)
        if y2 is not None:
            if self.y2_name is None:
                raise ValueError(f"MetricFigure {self.title!r} has no y2_name: pass y2_name=... to push y2")
            if type(y2) is not float:
                y2 = number(y2, self.y2_name)
        if type(x) is not int:
            x = _x(x)
        if self._writer is not None:
            self._writer.push((self._line, time.time(), x, y1, y2))

    def _line(self, when: float, x, y1: float, y2: float | None) -> str:
        """Return the metric event's JSON line; formatted by hand because it is the hot path."""
        if math.isfinite(y1) and (y2 is None or math.isfinite(y2)) and (type(x) is int or math.isfinite(x)):
            if y2 is None:
                values = f"{self._y1_json}:{y1!r}"
            else:
                values = f"{self._y1_json}:{y1!r},{self._y2_json}:{y2!r}"
            return f'{{"type":"metric","time":{when!r},"title":{self._title_json},"x":{x!r},"values":{{{values}}}}}'
        values = {self._y1_series: y1} if y2 is None else {self._y1_series: y1, self._y2_series: y2}
        return events.encode({"type": "metric", "time": when, "title": self.title, "x": x, "values": values})
