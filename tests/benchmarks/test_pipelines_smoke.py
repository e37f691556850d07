"""Smoke-test benchmarks/pipelines.py at a small size: every tool runs and writes what ours saves (no timing checks)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pipelines.py"


def test_a_small_run_checks_each_peer_against_ours_and_prints_ratios():
    peers = ["pandas", "duckdb"] + (["polars"] if importlib.util.find_spec("polars") else [])
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--records",
            "400",
            "--rounds",
            "1",
            "--tools",
            ",".join(["kpl", *peers]),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith("| 400 | kpl after |")]
    ratios = [row for row in rows if len(row) == 8]  # the ratio table's: records, ours, peer and three ratios
    assert sorted(row[3].strip() for row in ratios) == sorted(peers), done.stdout
    assert "| 400 | kpl-validate after |" in done.stdout and "| 400 | kpl-cached after |" in done.stdout
