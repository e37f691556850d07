"""Measure MetricFigure.push_metric per call (inside a job, events to a file) against list.append."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def _per_call(func, n: int) -> float:
    start = time.perf_counter_ns()
    for step in range(n):
        func(step, 0.5)
    return (time.perf_counter_ns() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=100_000, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        events_file = os.path.join(folder, "events.jsonl")
        os.environ.update({"KPL_INNER": "1", "KPL_ENV": "job", "KPL_EVENTS_FILE": events_file})
        from kpl_helper import events, metric

        figure = metric.MetricFigure("loss", y1_name="loss")
        plain: list = []

        def append(x, y):
            plain.append((x, y))

        results = {"list.append": [], "push_metric (in a job)": []}
        for _ in range(args.repeats):
            plain.clear()
            results["list.append"].append(_per_call(append, args.n))
            results["push_metric (in a job)"].append(_per_call(figure.push_metric, args.n))
            events.flush()

        os.environ.pop("KPL_INNER")
        outside = metric.MetricFigure("loss", y1_name="loss")
        results["push_metric (outside)"] = [
            _per_call(outside.push_metric, args.n) for _ in range(args.repeats)
        ]

        with open(events_file) as file:
            lines = sum(1 for _ in file)
        expected = 1 + args.n * args.repeats  # the figure, then every point
        for name, values in results.items():
            print(
                f"{name:<24} median {statistics.median(values):8.0f} ns/call  (N={args.n}, {args.repeats} repeats)"
            )
        print(f"events written: {lines} lines (expected {expected})")
        if lines != expected:
            raise SystemExit("events were lost")


if __name__ == "__main__":
    main()
