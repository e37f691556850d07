"""The README's terminal tour, for real: digits dataset, example algorithm, a train job watched to the end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KPL_LAB = shutil.which("kpl-lab")


def kpl_lab(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed `kpl-lab` command on its own home, as a user would."""
    assert KPL_LAB, "kpl-lab is not on PATH (pip install -e .)"
    return subprocess.run(
        [KPL_LAB, "--home", str(home), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_train_the_example_on_digits_from_the_command_line(tmp_path, clean_env):
    home = tmp_path / "home"
    digits = tmp_path / "digits"
    made = subprocess.run(
        [sys.executable, str(ROOT / "examples/datasets/make_digits.py"), str(digits)],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert made.returncode == 0, made.stderr

    added = kpl_lab(home, "dataset", "add", "digits", str(digits))
    assert added.returncode == 0, added.stderr
    added = kpl_lab(home, "algorithm", "add", str(ROOT / "examples/algorithms/image-classification"))
    assert added.returncode == 0, added.stderr

    submitted = kpl_lab(
        home,
        "job",
        "submit",
        "image-classification",
        "--input",
        "data=dataset:digits",
        "--param",
        "epochs=2",
        "--param",
        "threads=1",
        "--follow",
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job_id = submitted.stdout.split()[2]
    assert f"job {job_id} succeeded" in submitted.stdout
    assert "100%" in submitted.stdout  # the progress bar reached the end while following

    shown = json.loads(kpl_lab(home, "job", "show", job_id, "--json").stdout)
    assert shown["state"] == "succeeded"
    assert shown["exit_code"] == 0
    assert "model" in shown["outputs"]

    metrics = json.loads(kpl_lab(home, "job", "metrics", job_id, "--json").stdout)
    accuracy = [value for _step, value in metrics["figures"]["accuracy"]["eval_accuracy"]]
    losses = [value for _step, value in metrics["figures"]["loss"]["train_loss"]]
    assert len(accuracy) == 2
    assert accuracy[-1] > 0.8  # ten classes: chance is 0.1
    assert losses[-1] < losses[0]

    models = json.loads(kpl_lab(home, "model", "list", "--json").stdout)
    names = [version["name"] for model in models for version in model["versions"]]
    assert names == ["image-classification-model"]  # <algorithm>-<output key>
    assert shown["outputs"]["model"]["registered"].endswith(models[0]["versions"][0]["version"])
