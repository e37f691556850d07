"""Compile the image-classification example to ONNX: same predictions as PyTorch, served by onnxruntime."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kpl_dataset import ReadOnlyDataset
from kpl_lab.catalog.model_structure import describe_model_files

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALGORITHM = EXAMPLES / "algorithms" / "image-classification"


@pytest.fixture(scope="module")
def digits(tmp_path_factory, load_example) -> Path:
    folder = tmp_path_factory.mktemp("data") / "digits"
    load_example("datasets/make_digits.py").make_digits(folder, size=16)
    return folder


@pytest.mark.slow
def test_compile_to_onnx_predicts_like_pytorch_and_serves(
    digits, algorithm_copy, clean_env, run_ok, load_example, serve_standalone
):
    work = algorithm_copy(ALGORITHM, "digits", digits, epochs=1)
    env = clean_env()
    run_ok("train.py", work, env)
    out = run_ok("compile.py", work, env)
    compiled = work / "output" / "compiled"
    assert "compiled for onnx (opset 17)" in out
    assert sorted(p.name for p in compiled.iterdir()) == ["model.json", "model.onnx"]
    meta = json.loads((compiled / "model.json").read_text())
    assert (meta["target"], meta["runtime"], meta["image_size"]) == ("onnx", "onnxruntime", 16)

    classifier = load_example("algorithms/image-classification/classifier.py")
    torch_logits, names, size = classifier.load_predictor(str(work / "output" / "model"), 1)
    onnx_logits, onnx_names, onnx_size = classifier.load_predictor(str(compiled), 1)
    assert (onnx_names, onnx_size) == (names, size)
    with ReadOnlyDataset(digits, "test") as reader:
        records = [reader[i] for i in range(0, len(reader), 5)]
    images = np.stack([classifier.decode_image(r["content"], size) for r in records])[:, None]
    expected, got = torch_logits(images), onnx_logits(images)
    assert got.shape == expected.shape == (len(records), 10)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert (got.argmax(axis=1) == expected.argmax(axis=1)).all()
    accuracy = (got.argmax(axis=1) == [r["class_id"] for r in records]).mean()
    assert accuracy > 0.5  # one epoch; chance is 0.1

    [structure] = describe_model_files(compiled, ["model.onnx"])
    assert structure["inputs"] == [{"name": "image", "shape": ["batch", 1, 16, 16], "dtype": "float"}]
    assert structure["outputs"] == [{"name": "logits", "shape": ["batch", 10], "dtype": "float"}]

    # deploy.py serves the compiled folder with onnxruntime: same class and score as PyTorch
    shutil.move(work / "output" / "model", work / "output" / "pytorch")
    shutil.move(compiled, work / "output" / "model")
    probabilities = classifier.softmax(expected)
    with serve_standalone(work, env) as post:
        for index in range(0, len(records), 10):
            status, answer = post(records[index]["content"])
            class_id = int(probabilities[index].argmax())
            assert status == 200 and answer["type"] == "classification", answer
            assert (answer["class_id"], answer["class_name"]) == (class_id, names[class_id])
            assert answer["score"] == pytest.approx(probabilities[index, class_id], abs=1e-4)
        status, answer = post(b"not an image", "text/plain")
        assert status == 400 and "not an image" in json.dumps(answer)


def kpl_lab(home: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """Run this tree's `kpl-lab` on its own home."""
    return subprocess.run(
        [sys.executable, "-m", "kpl_lab.cli", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )


@pytest.mark.slow
def test_compile_job_registers_an_onnx_version_that_deploys(digits, tmp_path, clean_env):
    env = clean_env()
    home = tmp_path / "home"
    assert kpl_lab(home, env, "dataset", "add", "digits", str(digits)).returncode == 0
    assert kpl_lab(home, env, "algorithm", "add", str(ALGORITHM)).returncode == 0
    common = ("--param", "epochs=1", "--param", "threads=1", "--follow")
    trained = kpl_lab(home, env, "job", "submit", "image-classification", "--input", "data=digits", *common)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    (model,) = json.loads(kpl_lab(home, env, "model", "list", "--json").stdout)
    name, trained_version = model["name"], model["versions"][-1]["version"]
    assert kpl_lab(home, env, "model", "alias", f"{name}:{trained_version}", "pytorch").returncode == 0

    compiled = kpl_lab(
        home,
        env,
        *("job", "submit", "image-classification", "--function", "compile"),
        *("--input", f"model=model:{name}@pytorch", *common),
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    (model,) = json.loads(kpl_lab(home, env, "model", "list", "--json").stdout)
    onnx_version = model["versions"][-1]
    assert onnx_version["version"] != trained_version  # a new version of the same model
    assert sorted(onnx_version["files"]) == ["model.json", "model.onnx"]
    lineage = onnx_version["lineage"]
    assert lineage["function"] == "compile" and lineage["parameters"]["compile_target"] == "onnx"
    assert lineage["inputs"]["model"] == f"{name}:{trained_version}"
    meta = json.loads((Path(onnx_version["path"]) / "model.json").read_text())
    assert meta["target"] == "onnx"
    structure = kpl_lab(home, env, "model", "show", f"{name}:{onnx_version['version']}", "--structure")
    assert "input: image float[batchx1x16x16]" in structure.stdout, structure.stdout

    onnx_ref = f"{name}:{onnx_version['version']}"
    assert kpl_lab(home, env, "model", "alias", onnx_ref, "production").returncode == 0

    # batch inference with the ONNX version writes a predictions dataset with lineage
    inferred = kpl_lab(home, env, "model", "infer", f"{name}@production", "digits", "--follow")
    assert inferred.returncode == 0, inferred.stdout + inferred.stderr
    predictions = json.loads(
        kpl_lab(home, env, "dataset", "show", "image-classification-predictions", "--json").stdout
    )
    assert predictions["record_count"] == 364 and predictions["parts"] == {"test": 364}
    lineage = predictions["lineage"]
    assert lineage["function"] == "infer" and lineage["inputs"]["model"] == onnx_ref
    assert lineage["inputs"]["data"].startswith("digits:") and lineage["output"] == "predictions"
    with ReadOnlyDataset(predictions["path"], "test") as reader:
        first = reader[0]
    assert first["class_name"] in meta["class_names"] and 0 < first["score"] <= 1
    created = kpl_lab(home, env, "deployment", "create", "digits", "--model", f"{name}@production", "--wait")
    try:
        assert created.returncode == 0, created.stdout + created.stderr
        right = 0
        with ReadOnlyDataset(digits, "test") as reader:
            sample = [reader[i] for i in range(0, len(reader), len(reader) // 8)[:8]]
        for index, record in enumerate(sample):
            image = tmp_path / f"{index}.png"
            image.write_bytes(record["content"])
            predicted = kpl_lab(home, env, "deployment", "predict", "digits", str(image))
            assert predicted.returncode == 0, predicted.stderr
            answer = json.loads(predicted.stdout)
            assert answer["model_version"] == onnx_ref and answer["type"] == "classification"
            right += answer["class_name"] == record["class_name"]
        assert right >= 4, f"{right} of 8 right"  # one epoch; chance is 1 of 8
    finally:
        kpl_lab(home, env, "deployment", "delete", "digits")
