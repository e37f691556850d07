"""The shapes dataset builder and the segmentation example, trained end to end."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from PIL import Image

from kpl_dataset import ReadOnlyDataset, list_parts
from kpl_lab.algorithms import read_algorithm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALGORITHM = EXAMPLES / "algorithms" / "segmentation"
TRAIN, TEST = 480, 100


@pytest.fixture(scope="module")
def segmenter(load_example) -> ModuleType:
    return load_example("algorithms/segmentation/segmenter.py")


@pytest.fixture(scope="module")
def shapes(build_shapes) -> Path:
    return build_shapes("segmentation", TRAIN, TEST)


def decode(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image)


def test_shapes_segmentation_dataset(shapes):
    assert sorted(list_parts(shapes)) == ["test", "train"]
    with ReadOnlyDataset(shapes, "test") as reader:
        assert reader.record_type == {
            "path": "String",
            "contentType": "String",
            "content": "ByteArray",
            "mask": "ByteArray",
        }
        assert reader.get_meta_db().get("classes") == ["background", "circle", "square", "triangle"]
        pixels = np.zeros(4, dtype=np.int64)
        for record in reader:
            image, mask = decode(record["content"]), decode(record["mask"])
            assert image.shape == (64, 64, 3) and mask.shape == (64, 64)
            pixels += np.bincount(mask.ravel(), minlength=4)
        assert record["path"] == f"shapes/test/{TEST - 1:05d}.png" and record["contentType"] == "image/png"
    assert len(pixels) == 4 and (pixels > 0).all()  # every class occurs, no index beyond the classes
    assert 0.7 < pixels[0] / pixels.sum() < 0.98  # mostly background, but shapes are not specks


def test_shapes_are_deterministic_and_match_detection(tmp_path, make_shapes):
    for name in ("a", "b"):
        make_shapes.make_shapes(tmp_path / name, "segmentation", train=3, test=2, seed=7)
    make_shapes.make_shapes(tmp_path / "det", "detection", train=3, test=2, seed=7)
    with (
        ReadOnlyDataset(tmp_path / "a", "train") as a,
        ReadOnlyDataset(tmp_path / "b", "train") as b,
        ReadOnlyDataset(tmp_path / "det", "train") as det,
    ):
        for left, right, boxes in zip(a, b, det, strict=True):
            assert left == right
            assert left["content"] == boxes["content"]  # same seed, same images for both tasks
            mask = decode(left["mask"])
            outside = np.ones(mask.shape, dtype=bool)
            for obj in boxes["object"]:  # each box holds its shape's pixels, nothing lies outside the boxes
                box = (slice(obj["ymin"], obj["ymax"] + 1), slice(obj["xmin"], obj["xmax"] + 1))
                assert (mask[box] == make_shapes.SHAPES.index(obj["name"]) + 1).any()
                outside[box] = False
            assert (mask[outside] == 0).all()


def test_make_shapes_refuses_bad_arguments(tmp_path, make_shapes):
    with pytest.raises(ValueError, match="task must be one of detection, segmentation"):
        make_shapes.make_shapes(tmp_path / "x", "keypoints")
    with pytest.raises(ValueError, match="size must be at least 32"):
        make_shapes.make_shapes(tmp_path / "x", "segmentation", size=16)


def test_mean_iou_by_hand(segmenter):
    truth = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 255]])
    predicted = torch.tensor([[0, 1, 1, 1], [0, 0, 0, 2]])
    matrix = segmenter.confusion(predicted, truth, 3)
    # background: 3 hits, union 5; class 1: 2 hits, union 4; class 2 never occurs (the 255 pixel is ignored)
    assert matrix.tolist() == [[3, 1, 0], [1, 2, 0], [0, 0, 0]]
    assert segmenter.iou_per_class(matrix)[:2] == [pytest.approx(3 / 5), pytest.approx(2 / 4)]
    assert np.isnan(segmenter.iou_per_class(matrix)[2])
    assert segmenter.mean_iou(matrix) == pytest.approx((3 / 5 + 2 / 4) / 2)


def test_bad_masks_are_named(segmenter):
    png = segmenter.mask_png(np.array([[0, 5], [1, 2]], dtype=np.uint8))
    with pytest.raises(
        ValueError, match=r"record 3 \(a\.png\): mask has class index 5, but there are only 4 classes"
    ):
        segmenter.decode_mask(png, None, 4, "record 3 (a.png)")
    rgb = io.BytesIO()
    Image.new("RGB", (2, 2)).save(rgb, format="PNG")
    with pytest.raises(ValueError, match="record 0: mask must be a palette or grayscale PNG"):
        segmenter.decode_mask(rgb.getvalue(), None, 4, "record 0")
    with pytest.raises(ValueError, match="record 1: field mask is not a readable image"):
        segmenter.decode_mask(b"not a png", None, 4, "record 1")
    with pytest.raises(ValueError, match="multiple of 16"):
        segmenter.check_image_size(40)


def test_example_algorithm_is_valid():
    algorithm = read_algorithm(ALGORITHM)
    assert list(algorithm.spec.functions) == ["train", "test", "infer", "deploy"]
    assert [port.key for port in algorithm.spec.function("train").inputs] == ["data", "checkpoint"]
    assert [port.key for port in algorithm.spec.function("infer").outputs] == ["predictions"]
    assert algorithm.spec.image.runs == ()
    assert {"epochs", "batch_size", "lr", "image_size", "classes"} <= set(algorithm.parameters.values)


@pytest.mark.slow
def test_standalone_train_test_infer_deploy(
    shapes, segmenter, algorithm_copy, clean_env, run_ok, serve_standalone
):
    # one thread: the test machine is shared
    work = algorithm_copy(ALGORITHM, "shapes", shapes, epochs=8, threads=1)
    env = clean_env()

    out = run_ok("train.py", work, env)
    assert "epoch 8/8" in out
    out = run_ok("test.py", work, env)
    report = json.loads((work / "output" / "report" / "report.json").read_text())
    assert f"mIoU: {report['mIoU']:.4f}" in out
    assert report["records"] == TEST and set(report["per_class_iou"]) == {
        "background",
        "circle",
        "square",
        "triangle",
    }

    truths = []
    with ReadOnlyDataset(shapes, "test") as truth:
        truths = [torch.from_numpy(decode(record["mask"]).astype(np.int64)) for record in truth]
    all_background = sum(segmenter.confusion(torch.zeros_like(t), t, 4) for t in truths)
    baseline = segmenter.mean_iou(all_background)
    assert baseline < 0.3
    assert report["mIoU"] > 0.6 and report["mIoU"] > baseline + 0.3  # it really learned the shapes
    assert all(iou > 0.3 for iou in report["per_class_iou"].values())

    out = run_ok("infer.py", work, env)
    assert f"{TEST} masks written" in out
    with ReadOnlyDataset(work / "output" / "predictions", "test") as predictions:
        assert len(predictions) == TEST
        assert predictions.record_type["mask"] == "ByteArray"
        assert predictions.get_meta_db().get("classes") == ["background", "circle", "square", "triangle"]
        predicted = [torch.from_numpy(decode(record["mask"]).astype(np.int64)) for record in predictions]
    matrix = sum(segmenter.confusion(p, t, 4) for p, t in zip(predicted, truths, strict=True))
    assert segmenter.mean_iou(matrix) == pytest.approx(report["mIoU"], abs=1e-9)

    # deploy.py answers the same mask as infer.py, one class index per pixel
    with ReadOnlyDataset(shapes, "test") as truth:
        image = truth[0]["content"]
    with serve_standalone(work, env) as post:
        status, answer = post(image)
        assert status == 200 and answer["type"] == "segmentation"
        assert torch.equal(torch.tensor(answer["mask"]), predicted[0])
        status, answer = post(b"not an image", "text/plain")
        assert status == 400 and answer["error"].startswith("not an image (text/plain)")


@pytest.mark.slow
def test_train_inside_the_job_contract_and_resume(shapes, tmp_path, train_in_job):
    """Run train.py as the platform would (docs/job-contract.md), then resume from its output."""

    def job(name: str, epochs: int, checkpoint: Path | None) -> tuple[Path, list[dict], str]:
        return train_in_job(ALGORITHM, name, shapes, [f"epochs={epochs}", "threads=1"], checkpoint)

    model, events, _ = job("first", 1, None)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "ready" and kinds[-1] == "done"
    assert {event["title"] for event in events if event["type"] == "figure"} == {"loss", "mIoU"}
    miou = [event for event in events if event["type"] == "metric" and event["title"] == "mIoU"]
    assert len(miou) == 1 and set(miou[0]["values"]) == {"train_mIoU", "eval_mIoU"}
    progress = [event["value"] for event in events if event["type"] == "progress"]
    assert progress == sorted(progress) and progress[-1] == pytest.approx(1.0)
    assert torch.load(model / "model.pt", weights_only=False)["epoch"] == 1

    resumed, events, out = job("second", 2, model)
    assert f"resumed from {tmp_path / 'second' / 'inputs' / 'checkpoint'} after epoch 1" in out
    miou = [event for event in events if event["type"] == "metric" and event["title"] == "mIoU"]
    assert [event["x"] for event in miou] == [2]  # only the remaining epoch ran
    assert torch.load(resumed / "model.pt", weights_only=False)["epoch"] == 2
