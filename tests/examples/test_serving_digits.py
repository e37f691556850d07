"""Seed 001's last step from the command line: train digits, deploy the model, predict test images."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kpl_dataset import ReadOnlyDataset

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = 12


def kpl_lab(home: Path, env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run this tree's `kpl-lab` on its own home."""
    return subprocess.run(
        [sys.executable, "-m", "kpl_lab.cli", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.slow
def test_deploy_the_digits_model_and_predict_from_the_command_line(tmp_path, clean_env):
    env = clean_env()
    home, digits, images = tmp_path / "home", tmp_path / "digits", tmp_path / "images"
    made = subprocess.run(
        [sys.executable, str(ROOT / "examples/datasets/make_digits.py"), str(digits)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert kpl_lab(home, env, "dataset", "add", "digits", str(digits)).returncode == 0
    added = kpl_lab(home, env, "algorithm", "add", str(ROOT / "examples/algorithms/image-classification"))
    assert added.returncode == 0, added.stderr
    trained = kpl_lab(
        home,
        env,
        *("job", "submit", "image-classification", "--input", "data=dataset:digits"),
        *("--param", "epochs=2", "--param", "threads=1", "--follow"),
    )
    assert trained.returncode == 0, trained.stdout + trained.stderr
    (model,) = json.loads(kpl_lab(home, env, "model", "list", "--json").stdout)
    model_ref = f"{model['name']}:{model['versions'][-1]['version']}"

    # the algorithm comes from the model's lineage
    created = kpl_lab(
        home, env, "deployment", "create", "digits", "--model", model["name"], "--replicas", "2", "--wait"
    )
    try:
        assert created.returncode == 0, created.stdout + created.stderr
        assert "2 replica(s), ready" in created.stdout

        images.mkdir()
        expected = {}
        with ReadOnlyDataset(digits, "test") as reader:
            for index in range(0, len(reader), len(reader) // SAMPLE)[:SAMPLE]:
                record = reader[index]
                path = images / f"{index}.png"
                path.write_bytes(record["content"])
                expected[path] = record["class_name"]
        correct = 0
        for path, class_name in expected.items():
            predicted = kpl_lab(home, env, "deployment", "predict", "digits", str(path))
            assert predicted.returncode == 0, predicted.stderr
            answer = json.loads(predicted.stdout)
            assert answer["type"] == "classification" and answer["model_version"] == model_ref
            assert 0 < answer["score"] <= 1
            correct += answer["class_name"] == class_name
        assert correct >= SAMPLE * 0.75, f"{correct} of {SAMPLE} right"  # the model's test accuracy is > 0.8

        shown = json.loads(kpl_lab(home, env, "deployment", "show", "digits", "--json").stdout)
        assert shown["state"] == "ready" and shown["algorithm_version"].startswith("image-classification:")
        assert shown["metrics"][model_ref]["requests"] == SAMPLE
        assert [r["state"] for r in shown["replica_states"]] == ["ready", "ready"]

        text = tmp_path / "note.txt"
        text.write_text("not an image")
        refused = kpl_lab(home, env, "deployment", "predict", "digits", str(text))
        assert refused.returncode == 2 and "not an image (text/plain)" in refused.stderr
        elsewhere = kpl_lab(home, env, "--project", "other", "deployment", "predict", "digits", str(path))
        assert elsewhere.returncode == 2 and "not found in project 'other'" in elsewhere.stderr
        listed = kpl_lab(home, env, "deployment", "list")
        assert "digits" in listed.stdout and "ready" in listed.stdout
        logs = kpl_lab(home, env, "deployment", "logs", "digits")
        assert logs.stdout.count("serving on unix:/") == 2  # each replica on its private socket
    finally:
        deleted = kpl_lab(home, env, "deployment", "delete", "digits")
    assert deleted.returncode == 0, deleted.stderr
    assert kpl_lab(home, env, "deployment", "list", "--json").stdout.strip() == "[]"
