"""Smoke-test benchmarks/model_structure.py on small files (no timing checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "model_structure.py"


def test_a_small_run_times_each_file_both_ways_and_the_counts_agree():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--size-mb", "1", "--width", "256", "--blocks", "5", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [
        line.split() for line in done.stdout.splitlines() if line.startswith(("TorchScript", "state dict"))
    ]
    assert [row[-1].endswith("x") for row in rows] == [True, True, True]
    assert "parameters agree (1 rounds each way); the static reader's process has no torch" in done.stdout
