"""Smoke-test benchmarks/waits.py with one short round (no timing checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "waits.py"


def test_a_small_run_prints_the_jobs_and_the_trials_against_their_peers():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--pairs", "1", "--trials", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    assert any(line.startswith("job submit -> success recorded") and "ratio" in line for line in lines)
    against = [line.split(":")[0].strip() for line in lines if line.strip().startswith("against")]
    assert against[0].startswith("against a plain subprocess loop"), lines
    assert any(line.strip().startswith("KPL per trial, end -> next submit") for line in lines)
