"""Smoke-test benchmarks/metrics_cost.py with a few requests (no timing checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "metrics_cost.py"


def test_a_small_run_prints_each_route_with_and_without():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--requests", "20", "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines if line.startswith("/kpl/api/")]
    assert [row[0] for row in rows] == [
        "/kpl/api/version",
        "/kpl/api/datasets",
        "/kpl/api/jobs?state=running",
    ]
    assert all(float(value) > 0 for row in rows for value in row[1:3])
    assert any(line.startswith("the two calls alone") for line in lines)
