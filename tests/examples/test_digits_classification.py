"""The digits dataset builder and the image-classification example, trained end to end."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from kpl_dataset import ReadOnlyDataset, list_parts
from kpl_lab.algorithms import read_algorithm
from kpl_lab.engine.launch import JobLaunch, Resources
from kpl_lab.engine.local import LocalExecutor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALGORITHM = EXAMPLES / "algorithms" / "image-classification"


@pytest.fixture(scope="module")
def digits(tmp_path_factory, load_example) -> Path:
    folder = tmp_path_factory.mktemp("data") / "digits"
    counts = load_example("datasets/make_digits.py").make_digits(folder, size=16)
    assert counts == {"train": 1433, "test": 364}
    return folder


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
        reader.reset()  # reader[0] moved the cursor to 1, as in kpl-dataset 0.0.9
        for record in reader:
            per_class[record["class_id"]] += 1
        assert all(35 <= count <= 37 for count in per_class)  # every fifth image of each class
        assert reader.get_meta_db().get("class_names")[9] == "nine"


def test_example_algorithm_is_valid():
    algorithm = read_algorithm(ALGORITHM)
    assert list(algorithm.spec.functions) == ["train", "test", "infer", "deploy", "compile"]
    assert [port.key for port in algorithm.spec.function("train").inputs] == ["data", "checkpoint"]
    assert algorithm.spec.image.runs == ()
    assert {"epochs", "batch_size", "lr"} <= set(algorithm.parameters.values)


@pytest.mark.slow
def test_standalone_train_test_infer(digits, algorithm_copy, clean_env, run_ok):
    work = algorithm_copy(ALGORITHM, "digits", digits, epochs=2)
    env = clean_env()

    out = run_ok("train.py", work, env)
    assert "epoch 2/2" in out
    out = run_ok("test.py", work, env)
    report = json.loads((work / "output" / "report" / "report.json").read_text())
    assert report["records"] == 364 and report["accuracy"] > 0.8  # chance is 0.1
    assert f"accuracy: {report['accuracy']:.4f}" in out

    run_ok("infer.py", work, env)
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
def test_train_inside_the_job_contract_and_resume(digits, tmp_path, train_in_job):
    """Run train.py as the platform would (docs/job-contract.md), then resume from its output."""

    def job(name: str, epochs: int, checkpoint: Path | None) -> tuple[Path, list[dict], str]:
        return train_in_job(ALGORITHM, name, digits, [f"epochs={epochs}"], checkpoint)

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


@pytest.mark.slow
async def test_two_workers_reach_the_accuracy_of_one(digits, tmp_path):
    """Train as a job of one worker and of two (DDP over gloo on loopback): same accuracy."""
    parameters = read_algorithm(ALGORITHM).parameters.apply(["epochs=2", "threads=1"])

    async def train(workers: int) -> tuple[float, Path]:
        launch = JobLaunch(
            job_id=f"digits-{workers}",
            project="p",
            function="train",
            cmd="python3 train.py",
            algorithm_dir=ALGORITHM,
            run_dir=tmp_path / f"workers-{workers}",
            inputs={"data": digits},
            outputs=["model"],
            parameters=parameters,
            limits=Resources(cpu=1, memory=2048, workers=workers),
            env={"PYTHONDONTWRITEBYTECODE": "1"},  # keep the example folder clean
        )
        executor = LocalExecutor()
        await executor.before_start(launch)
        handle = await executor.execute(launch)
        while (state := await executor.poll(launch, handle)).running:
            await asyncio.sleep(0.2)
        logs = [launch.run_dir / "output.log", *sorted((launch.run_dir / "logs").glob("*.log"))]
        assert state.exit_code == 0, "\n".join(f"== {log.name}\n{log.read_text()}" for log in logs)
        events = [json.loads(line) for line in (launch.run_dir / "events.jsonl").read_text().splitlines()]
        accuracy = [
            e["values"]["eval_accuracy"] for e in events if e["type"] == "metric" and e["title"] == "accuracy"
        ]
        assert len(accuracy) == 2  # one point an epoch, from rank 0 only
        return accuracy[-1], launch.run_dir

    one, _ = await train(1)
    two, run_dir = await train(2)
    print(f"eval accuracy after 2 epochs: 1 worker {one:.4f}, 2 workers {two:.4f}")
    assert one > 0.8 and abs(two - one) <= 0.03
    assert "epoch 2/2" in (run_dir / "output.log").read_text()
    assert "train: 1433 images" in (run_dir / "logs" / "worker-1.log").read_text()
    assert torch.load(run_dir / "outputs" / "model" / "model.pt", weights_only=False)["epoch"] == 2
