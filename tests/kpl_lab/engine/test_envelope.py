"""The min/max envelope keeps every bucket's extremes while the series grows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kpl_lab.engine import envelope


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=5000), st.integers(2, 3000))
def test_extremes_survive_and_size_is_bounded(values, max_points):
    curve = envelope.new()
    for step, value in enumerate(values):
        envelope.add(curve, step, float(step), value)
    points = envelope.points(curve, max_points)
    assert len(points) <= max(2, max_points)
    assert len(curve["buckets"]) <= envelope.BUCKETS
    assert min(v for _, v in points) == min(values)
    assert max(v for _, v in points) == max(values)
    assert [x for x, _ in points] == sorted(x for x, _ in points)
    assert all(values[int(x)] == v for x, v in points)
