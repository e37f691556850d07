"""The digits dataset builder and the image-classification example, trained end to end."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image

from kpl_dataset import ReadOnlyDataset, list_parts
from kpl_lab.algorithms import read_algorithm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALGORITHM = EXAMPLES / "algorithms" / "image-classification"


def load_make_digits():
    spec = importlib.util.spec_from_file_location("make_digits", EXAMPLES / "datasets" / "make_digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data") / "digits"
    counts = load_make_digits().make_digits(folder, size=16)
    assert counts == {"train": 1433, "test": 364}
    return folder


def clean_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KPL_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep the example folder clean
    return env


def run(script: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, script], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_digits_dataset_shape(digits):
    assert sorted(list_parts(digits)) == ["test", "train"]
    with ReadOnlyDataset(digits, "test") as reader:
        assert reader.record_type == {
            "path": "String",
            "contentType": "String",
            "content": "ByteArray",
            "class_name": "String",
            "class_id": "Int",
        }
        first = reader[0]
        assert first["path"] == "digits/zero/0000.png" and first["contentType"] == "image/png"
        assert (first["class_name"], first["class_id"]) == ("zero", 0)
        assert Image.open(io.BytesIO(first["content"])).size == (16, 16)
        per_class = [0] * 10
        for record in reader:
            per_class[record["class_id"]] += 1
        assert all(35 <= count <= 37 for count in per_class)  # every fifth image of each class
        assert reader.get_meta_db().get("class_names")[9] == "nine"


def test_example_algorithm_is_valid():
    algorithm = read_algorithm(ALGORITHM)
    assert list(algorithm.spec.functions) == ["train", "test", "infer"]
    assert [port.key for port in algorithm.spec.function("train").inputs] == ["data", "checkpoint"]
    assert algorithm.spec.image.runs == ()
    assert {"epochs", "batch_size", "lr"} <= set(algorithm.parameters.values)


@pytest.mark.slow
def test_standalone_train_test_infer(digits, tmp_path):
    work = tmp_path / "algorithm"
    shutil.copytree(ALGORITHM, work)
    (work / "data").mkdir()
    (work / "data" / "digits").symlink_to(digits)
    parameters = yaml.safe_load((work / "parameter.yml").read_text())
    parameters["epochs"] = 2
    (work / "parameter.yml").write_text(yaml.safe_dump(parameters))
    env = clean_env()

    out = run("train.py", work, env)
    assert "epoch 2/2" in out
    out = run("test.py", work, env)
    report = json.loads((work / "output" / "report" / "report.json").read_text())
    assert report["records"] == 364 and report["accuracy"] > 0.8  # chance is 0.1
    assert f"accuracy: {report['accuracy']:.4f}" in out

    run("infer.py", work, env)
    with ReadOnlyDataset(work / "output" / "predictions", "test") as predictions:
        assert len(predictions) == 364
        assert set(predictions.record_type) == {
            "path",
            "contentType",
            "content",
            "class_name",
            "class_id",
            "score",
        }
        records = list(predictions)
    with ReadOnlyDataset(digits, "test") as truth:
        labels = [record["class_id"] for record in truth]
    correct = sum(record["class_id"] == label for record, label in zip(records, labels, strict=True))
    assert correct / len(labels) == pytest.approx(report["accuracy"], abs=1e-6)
    assert all(0.0 < record["score"] <= 1.0 for record in records)


@pytest.mark.slow
def test_train_inside_the_job_contract_and_resume(digits, tmp_path):
    """Run train.py as the platform would (docs/job-contract.md), then resume from its output."""
    defaults = read_algorithm(ALGORITHM).parameters

    def job(name: str, epochs: int, checkpoint: Path | None) -> tuple[Path, list[dict], str]:
        run_dir = tmp_path / name
        (run_dir / "inputs").mkdir(parents=True)
        (run_dir / "outputs").mkdir()
        (run_dir / "inputs" / "data").symlink_to(digits)
        if checkpoint is not None:
            (run_dir / "inputs" / "checkpoint").symlink_to(checkpoint)
        env = clean_env()
        env.update(
            KPL_INNER="1",
            KPL_ENV="job",
            KPL_ENV_TASK_ID=name,
            KPL_ENV_FUNCTION="train",
            KPL_ENV_INPUT_ROOT_PATH=str(run_dir / "inputs"),
            KPL_ENV_OUTPUT_ROOT_PATH=str(run_dir / "outputs"),
            KPL_ENV_PARAMETER=json.dumps(defaults.apply([f"epochs={epochs}"])),
            KPL_EVENTS_FILE=str(run_dir / "events.jsonl"),
            KPL_RUN_DIR=str(run_dir),
        )
        out = run(str(ALGORITHM / "train.py"), ALGORITHM, env)
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        return run_dir / "outputs" / "model", events, out

    model, events, _ = job("first", 1, None)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "ready" and kinds[-1] == "done"
    figures = {event["title"] for event in events if event["type"] == "figure"}
    assert figures == {"loss", "accuracy"}
    accuracy = [event for event in events if event["type"] == "metric" and event["title"] == "accuracy"]
    assert len(accuracy) == 1 and accuracy[0]["values"]["eval_accuracy"] > 0.5
    progress = [event["value"] for event in events if event["type"] == "progress"]
    assert progress == sorted(progress) and progress[-1] == pytest.approx(1.0)
    assert torch.load(model / "model.pt", weights_only=False)["epoch"] == 1

    resumed, events, out = job("second", 2, model)
    assert f"resumed from {tmp_path / 'second' / 'inputs' / 'checkpoint'} after epoch 1" in out
    accuracy = [event for event in events if event["type"] == "metric" and event["title"] == "accuracy"]
    assert [event["x"] for event in accuracy] == [2]  # only the remaining epoch ran
    assert torch.load(resumed / "model.pt", weights_only=False)["epoch"] == 2
