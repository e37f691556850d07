"""The README's terminal tour, for real, from a scratch folder: the digits, the example algorithm, a train job."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KPL_LAB = shutil.which("kpl-lab")


def kpl_lab(
    home: Path, *args: str, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run the installed `kpl-lab` command on its own home, as a user would."""
    assert KPL_LAB, "kpl-lab is not on PATH (pip install -e .)"
    env = {**os.environ, "KPL_LAB_HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [KPL_LAB, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=env
    )


def readme_tour() -> list[list[str]]:
    """Return the commands of the README's terminal tour, as words."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"Try it on the demo data.*?```bash\n(.*?)```", text, re.S).group(1)
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


@pytest.mark.slow
def test_the_readme_tour_trains_the_example_on_digits_from_a_scratch_folder(tmp_path):
    home, scratch = tmp_path / "home", tmp_path / "scratch"
    scratch.mkdir()
    tour = readme_tour()
    assert [words[:2] for words in tour] == [
        ["kpl-lab", "example"],
        ["kpl-lab", "example"],
        ["kpl-lab", "dataset"],
        ["kpl-lab", "algorithm"],
        ["kpl-lab", "job"],
        ["kpl-lab", "job"],
    ]
    job_id = None
    for words in tour:
        if "JOB_ID" in words:
            words = [job_id if word == "JOB_ID" else word for word in words]
        done = kpl_lab(home, *words[1:], cwd=scratch)
        assert done.returncode == 0, f"{shlex.join(words)}:\n{done.stdout}{done.stderr}"
        if words[1:3] == ["job", "submit"]:
            job_id = done.stdout.split()[2]
            assert f"job {job_id} succeeded" in done.stdout
            assert "100%" in done.stdout  # the progress bar reached the end while following
    assert (scratch / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert not list(scratch.rglob("__pycache__"))

    shown = json.loads(kpl_lab(home, "job", "show", job_id, "--json").stdout)
    assert shown["state"] == "succeeded"
    assert shown["exit_code"] == 0
    assert "model" in shown["outputs"]

    metrics = json.loads(kpl_lab(home, "job", "metrics", job_id, "--json").stdout)
    accuracy = [value for _step, value in metrics["figures"]["accuracy"]["eval_accuracy"]]
    losses = [value for _step, value in metrics["figures"]["loss"]["train_loss"]]
    assert len(accuracy) == shown["parameters"]["epochs"]
    assert accuracy[-1] > 0.8  # ten classes: chance is 0.1
    assert losses[-1] < losses[0]

    models = json.loads(kpl_lab(home, "model", "list", "--json").stdout)
    names = [version["name"] for model in models for version in model["versions"]]
    assert names == ["mlp-classification-model"]  # <algorithm>-<output key>
    assert shown["outputs"]["model"]["registered"].endswith(models[0]["versions"][0]["version"])


def test_example_refuses_a_folder_in_use_and_lists_the_examples(tmp_path):
    (tmp_path / "digits").mkdir()
    (tmp_path / "digits" / "notes.txt").write_text("mine")
    done = kpl_lab(tmp_path / "home", "example", "digits", "digits", cwd=tmp_path)
    assert done.returncode == 2 and "digits exists and is not empty" in done.stderr
    assert (tmp_path / "digits" / "notes.txt").read_text() == "mine"
    listed = kpl_lab(tmp_path / "home", "example", "--help", cwd=tmp_path).stdout
    for name in ("digits", "shapes-detection", "shapes-segmentation", "image-classification", "detection"):
        assert f"\n  {name} " in listed
