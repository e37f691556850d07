"""Smoke-test benchmarks/serving.py with a few requests (no timing checks)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serving.py"


def test_a_small_run_prints_every_row_and_the_split():
    done = subprocess.run(
        [
            *(sys.executable, str(SCRIPT), "--requests", "40", "--clients", "1,4"),
            *("--split-requests", "200", "--rounds", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[:1] in (["1"], ["4"])]
    # the full table, then direct against the gateway process, nginx (.ci/run installs nginx-light)
    # and the floor reference proxy
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    assert [row[0] for row in rows] == ["1", "4", "1", "4"]
    assert [len(row) for row in rows] == [22, 22, *([19 if nginx else 13] * 2)]
    assert "canary split over 200 requests" in done.stdout
    assert "echo-model:" in done.stdout
    assert "forwarding client asyncio forwarder" in done.stdout


def test_the_proxies_compared_in_front_of_the_trained_digits_model():
    """`--model digits` trains the example and serves its test images (a bad body would be refused: a 400 fails the run)."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--only-proxies", "--model", "digits"]
        + ["--requests", "40", "--clients", "1", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "in front of the same replica (digits model)" in done.stdout
    (row,) = [line.split() for line in done.stdout.splitlines() if line.split()[:1] == ["1"]]
    assert len(row) in (13, 19)  # with or without nginx


def test_digits_needs_the_proxies_comparison_only():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", "digits"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and "add --only-proxies" in done.stderr


def test_the_gateway_python_benchmark_answers_every_prediction_and_profiles():
    done = subprocess.run(
        [sys.executable, str(SCRIPT.with_name("gateway_python.py")), "--requests", "200", "--profile"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "the gateway process's Python per prediction:" in done.stdout and "(200 predictions)" in done.stdout
    )
    assert "predict_now" in done.stdout  # the profile names the gateway's own steps
