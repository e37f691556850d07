"""Smoke-test benchmarks/submits.py with a few submits on each database (no timing checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "submits.py"

pytestmark = pytest.mark.databases


def test_a_small_run_fills_the_table_with_no_over_allocation(database_url):
    database = "sqlite" if database_url is None else "postgresql"  # the script starts its own server
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--submits",
            "6",
            "--processes",
            "2",
            "--capacity",
            "2",
            "--only",
            database,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines() if line.split()}
    assert rows[database][-3:] == ["6", "2", "0"]  # jobs recorded, running, over-allocations
