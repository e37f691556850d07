"""Smoke-test benchmarks/deploy_threads.py with a few predictions (no timing checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "deploy_threads.py"


def test_the_classifier_is_deployed_at_each_thread_count_and_answers():
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--examples",
            "image-classification",
            "--requests",
            "20",
            "--rounds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = [line.split() for line in done.stdout.splitlines() if line.startswith("image-classification")]
    assert len(row) == 4 and all(float(value) > 0 for value in row[1:])


def test_an_unknown_example_is_named():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--examples", "image-classification,nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "no example named nope" in done.stderr
