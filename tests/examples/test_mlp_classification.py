"""The demo's sample algorithm, mlp-classification: numpy only, trained, tested, resumed, served."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kpl_dataset import ReadOnlyDataset
from kpl_lab.algorithms import read_algorithm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALGORITHM = EXAMPLES / "algorithms" / "mlp-classification"
# what `pip install -e .` alone brings: a run that imported one of these would fail on the demo
NOT_INSTALLED = (
    "import sys; sys.modules.update(dict.fromkeys(['torch', 'sklearn', 'scipy', 'onnxruntime']))\n"
)


@pytest.fixture(scope="module")
def digits(tmp_path_factory, load_example) -> Path:
    folder = tmp_path_factory.mktemp("data") / "digits"
    load_example("datasets/make_digits.py").make_digits(folder)  # the demo's size, 32 x 32
    return folder


def without_heavy_packages(work: Path) -> None:
    """Make every script of an algorithm copy fail on `import torch` (and the like), as on a PyPI-only demo."""
    for script in work.glob("*.py"):
        if script.name != "mlp.py":
            script.write_text(NOT_INSTALLED + script.read_text())


def test_the_sample_algorithm_is_valid_and_needs_nothing_beyond_the_platform():
    algorithm = read_algorithm(ALGORITHM)
    assert list(algorithm.spec.functions) == ["train", "test", "infer", "deploy"]
    assert [port.key for port in algorithm.spec.function("train").inputs] == ["data", "checkpoint"]
    # optional: a pipeline's train node (the classification template on the demo) needs only the data
    assert [port.key for port in algorithm.spec.function("train").inputs if port.optional] == ["checkpoint"]
    assert algorithm.spec.image.runs == () and algorithm.spec.image.from_image is None
    assert algorithm.spec.function("train").resource.limits.cpu == 1  # beside a notebook on 2 cores
    assert {"epochs", "batch_size", "lr", "hidden"} <= set(algorithm.parameters.values)


def test_its_gradients_are_those_of_its_loss(load_example):
    mlp = load_example("algorithms/mlp-classification/mlp.py")
    rng = np.random.default_rng(1)
    weights = {k: v.astype(np.float64) for k, v in mlp.new_weights(6, 5, 3, seed=2).items()}
    images, labels = rng.random((4, 6)), np.array([0, 2, 1, 2])
    _, _, gradients = mlp.loss_and_gradients(weights, images, labels, weight_decay=0.01)
    for name, weight in weights.items():
        index = (0,) * weight.ndim
        step = 1e-6

        def loss_at(value, name=name, index=index):
            moved = {k: v.copy() for k, v in weights.items()}
            moved[name][index] = value
            decay = 0.5 * 0.01 * sum((moved[k] ** 2).sum() for k in ("hidden.weight", "output.weight"))
            return mlp.loss_and_gradients(moved, images, labels, 0.0)[0] + decay

        numeric = (loss_at(weight[index] + step) - loss_at(weight[index] - step)) / (2 * step)
        assert gradients[name][index] == pytest.approx(numeric, rel=1e-4, abs=1e-7), name


@pytest.mark.slow
def test_standalone_train_test_infer_without_pytorch(digits, algorithm_copy, clean_env, run_ok):
    work = algorithm_copy(ALGORITHM, "digits", digits)
    without_heavy_packages(work)
    env = clean_env()
    out = run_ok("train.py", work, env)
    assert "epoch 20/20" in out
    out = run_ok("test.py", work, env)
    report = json.loads((work / "output" / "report" / "report.json").read_text())
    assert report["records"] == 364 and report["accuracy"] > 0.9  # chance is 0.1
    assert f"accuracy: {report['accuracy']:.4f}" in out
    run_ok("infer.py", work, env)
    with ReadOnlyDataset(work / "output" / "predictions", "test") as predictions:
        records = list(predictions)
    with ReadOnlyDataset(digits, "test") as truth:
        labels = [record["class_id"] for record in truth]
    correct = sum(record["class_id"] == label for record, label in zip(records, labels, strict=True))
    assert correct / len(labels) == pytest.approx(report["accuracy"], abs=1e-6)
    assert all(0.0 < record["score"] <= 1.0 for record in records)
    # the model is arrays and JSON: nothing in it runs when it is read
    with np.load(work / "output" / "model" / "model.npz", allow_pickle=False) as model:
        assert {name: model[name].shape for name in model.files} == {
            "hidden.weight": (128, 256),
            "hidden.bias": (128,),
            "output.weight": (10, 128),
            "output.bias": (10,),
        }


@pytest.mark.slow
def test_train_inside_the_job_contract_and_resume(digits, tmp_path, train_in_job):
    def job(name: str, epochs: int, checkpoint: Path | None) -> tuple[Path, list[dict], str]:
        return train_in_job(ALGORITHM, name, digits, [f"epochs={epochs}"], checkpoint)

    model, events, _ = job("first", 2, None)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "ready" and kinds[-1] == "done"
    assert {event["title"] for event in events if event["type"] == "figure"} == {"loss", "accuracy"}
    accuracy = [event for event in events if event["type"] == "metric" and event["title"] == "accuracy"]
    assert [event["x"] for event in accuracy] == [1, 2] and accuracy[-1]["values"]["eval_accuracy"] > 0.8
    progress = [event["value"] for event in events if event["type"] == "progress"]
    assert progress == sorted(progress) and progress[-1] == pytest.approx(1.0)
    assert json.loads((model / "model.json").read_text())["epoch"] == 2

    resumed, events, out = job("second", 3, model)
    assert f"resumed from {tmp_path / 'second' / 'inputs' / 'checkpoint'} after epoch 2" in out
    accuracy = [event for event in events if event["type"] == "metric" and event["title"] == "accuracy"]
    assert [event["x"] for event in accuracy] == [3]  # only the remaining epoch ran
    assert json.loads((resumed / "model.json").read_text())["epoch"] == 3


@pytest.mark.slow
def test_deploy_answers_an_image_with_its_class(digits, algorithm_copy, clean_env, run_ok, serve_standalone):
    work = algorithm_copy(ALGORITHM, "digits", digits, epochs=5)
    without_heavy_packages(work)
    env = clean_env()
    run_ok("train.py", work, env)
    with ReadOnlyDataset(digits, "test") as truth:
        sevens = [record["content"] for record in truth if record["class_name"] == "seven"]
    with serve_standalone(work, env) as post:
        answers = [post(image)[1] for image in sevens]
        assert sum(answer["class_name"] == "seven" for answer in answers) / len(answers) > 0.9
        assert all(0.0 < answer["score"] <= 1.0 for answer in answers)
        status, refused = post(b"not an image", "image/png")
        assert status == 400 and "not an image" in json.dumps(refused)
