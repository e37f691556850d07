"""Smoke-test benchmarks/sandbox.py on small models and datasets (no timing checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sandbox.py"


def test_a_small_run_times_each_measure_both_ways():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--size-mb", "2", "--rounds", "2", "--records", "12"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith(("validate", "structure"))]
    assert len(rows) == 2 and all(row[-1].endswith("x") for row in rows), done.stdout
    assert "a worker started for a call" in done.stdout
