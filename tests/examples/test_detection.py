"""The shapes detection dataset, the VOC mAP metric and the detection example, trained end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from kpl_dataset import ReadOnlyDataset, list_parts
from kpl_dataset.common import RectangleBoxObjectDetectionDatasetDefine
from kpl_lab.algorithms import read_algorithm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALGORITHM = EXAMPLES / "algorithms" / "detection"
CLASSES = ["circle", "square", "triangle"]
TRAIN, TEST = 480, 100


@pytest.fixture(scope="module")
def detector(load_example) -> ModuleType:
    return load_example("algorithms/detection/detector.py")


@pytest.fixture(scope="module")
def mean_ap(load_example) -> ModuleType:
    return load_example("algorithms/detection/mean_ap.py")


@pytest.fixture(scope="module")
def shapes(build_shapes) -> Path:
    return build_shapes("detection", TRAIN, TEST)


def obj(name: str, xmin: int, ymin: int, xmax: int, ymax: int, difficult: int = 0) -> dict:
    return {"name": name, "xmin": xmin, "ymin": ymin, "xmax": xmax, "ymax": ymax, "difficult": difficult}


def test_shapes_detection_dataset(shapes):
    assert sorted(list_parts(shapes)) == ["test", "train"]
    with ReadOnlyDataset(shapes, "train") as reader:
        voc = dict(RectangleBoxObjectDetectionDatasetDefine)
        voc["object"] = [{k: v for k, v in voc["object"][0].items() if k != "score"}]
        assert reader.record_type == voc  # the user guide's Pascal VOC shape
        assert reader.get_meta_db().get("classes") == CLASSES
        per_image = []
        names = set()
        for record in reader:
            per_image.append(len(record["object"]))
            for found in record["object"]:
                names.add(found["name"])
                assert 0 <= found["xmin"] < found["xmax"] < 64 and 0 <= found["ymin"] < found["ymax"] < 64
                assert found["difficult"] == 0
    assert names == set(CLASSES)
    assert min(per_image) >= 1 and max(per_image) == 3


def test_map_by_hand(mean_ap):
    truths = [[obj("a", 0, 0, 9, 9), obj("b", 20, 20, 29, 29)], [obj("a", 0, 0, 9, 9)]]
    perfect = [[("a", 0.9, (0, 0, 9, 9)), ("b", 0.8, (20, 20, 29, 29))], [("a", 0.7, (0, 0, 9, 9))]]
    assert mean_ap.mean_average_precision(perfect, truths, ["a", "b"]) == (1.0, {"a": 1.0, "b": 1.0})
    assert mean_ap.mean_average_precision([[], []], truths, ["a", "b"]) == (0.0, {"a": 0.0, "b": 0.0})
    # class a: a false positive ranked first, then both objects: the envelope is 2/3 at recall 1/2 and 1
    ranked = [[("a", 0.95, (40, 40, 49, 49)), ("a", 0.9, (0, 0, 9, 9))], [("a", 0.5, (0, 0, 9, 9))]]
    ap, per_class = mean_ap.mean_average_precision(ranked, truths, ["a", "b"])
    assert per_class["a"] == pytest.approx(0.5 * 2 / 3 + 0.5 * 2 / 3)
    assert per_class["b"] == 0.0 and ap == pytest.approx(per_class["a"] / 2)
    # a duplicate of a found object is a false positive; a box shifted to IoU < 0.5 finds nothing
    duplicate = [[("a", 0.9, (0, 0, 9, 9)), ("a", 0.8, (0, 0, 9, 9))], [("a", 0.1, (5, 0, 14, 9))]]
    assert mean_ap.mean_average_precision(duplicate, truths, ["a"])[0] == pytest.approx(0.5)
    # a class with no objects has no AP and does not count; difficult objects are neither found nor missed
    hard = [[obj("a", 0, 0, 9, 9), obj("a", 30, 30, 39, 39, difficult=1)]]
    ap, per_class = mean_ap.mean_average_precision(
        [[("a", 0.9, (30, 30, 39, 39)), ("a", 0.8, (0, 0, 9, 9))]], hard, ["a", "c"]
    )
    assert ap == 1.0 and math.isnan(per_class["c"])
    with pytest.raises(ValueError, match="1 images of detections but 2 of ground truth"):
        mean_ap.mean_average_precision([[]], truths, ["a"])


def test_iou_uses_inclusive_pixels(mean_ap):
    others = np.array([[0, 0, 9, 9], [5, 0, 14, 9], [10, 10, 19, 19]], dtype=float)
    assert mean_ap.box_iou((0, 0, 9, 9), others).tolist() == pytest.approx([1.0, 50 / 150, 0.0])


def decode_targets(detector: ModuleType, objects: list[dict], flip: bool) -> list[tuple[str, float, tuple]]:
    """Decode what a model outputting exactly the training targets would find."""
    heatmap, boxes, _ = detector.make_targets(objects, CLASSES, (64, 64), 64, flip=flip)

    class Oracle(torch.nn.Module):
        def forward(self, x):
            logits = torch.logit(torch.from_numpy(heatmap).clamp(1e-6, 1 - 1e-6))
            return logits.unsqueeze(0), torch.from_numpy(boxes).unsqueeze(0)

    found = detector.detect(Oracle(), torch.zeros(1, 3, 64, 64), 20, 0.5)[0]
    return sorted((CLASSES[c], score, box) for c, score, box in found)


def test_targets_decode_back_to_the_boxes(detector):
    objects = [obj("square", 4, 8, 19, 23), obj("triangle", 40, 30, 61, 51)]
    heatmap, _, centres = detector.make_targets(objects, CLASSES, (64, 64), 64, flip=False)
    assert centres.sum() == 2 and heatmap.max() == 1.0 and heatmap[0].max() == 0.0
    for flip in (False, True):
        found = decode_targets(detector, objects, flip)
        assert [name for name, _, _ in found] == ["square", "triangle"]
        for (_, score, box), truth in zip(found, objects, strict=True):
            xmin, xmax = (63 - truth["xmax"], 63 - truth["xmin"]) if flip else (truth["xmin"], truth["xmax"])
            assert score == pytest.approx(1.0, abs=1e-5)
            assert box == pytest.approx((xmin, truth["ymin"], xmax, truth["ymax"]), abs=1e-4)
    # difficult objects are not taught; a 128-pixel original maps to the 64-pixel input and back
    assert (
        detector.make_targets([obj("circle", 0, 0, 9, 9, difficult=1)], CLASSES, (64, 64), 64, False)[2].sum()
        == 0
    )
    assert detector.to_original((4, 8, 19, 23), (128, 128), 64) == (8, 16, 39, 47)


def test_unknown_class_and_bad_box_are_named(detector):
    records = [
        {"path": "x.png", "object": [obj("circle", 0, 0, 5, 5)]},
        {"path": "y.png", "object": [obj("dog", 0, 0, 5, 5)]},
    ]
    with pytest.raises(
        ValueError, match=r"part train record 1 \(y\.png\) object 0: class 'dog' is not one of"
    ):
        detector.checked_objects(records, CLASSES, "train")
    with pytest.raises(ValueError, match=r"record 0 \(z\.png\) object 0: box \[9, 0, 5, 5\] has max < min"):
        detector.checked_objects([{"path": "z.png", "object": [obj("circle", 9, 0, 5, 5)]}], CLASSES, "train")
    with pytest.raises(ValueError, match="no field object"):
        detector.checked_objects([{"path": "m.png", "mask": b""}], CLASSES, None)


def test_example_algorithm_is_valid():
    algorithm = read_algorithm(ALGORITHM)
    assert list(algorithm.spec.functions) == ["train", "test", "infer", "deploy"]
    assert [port.key for port in algorithm.spec.function("train").inputs] == ["data", "checkpoint"]
    assert [port.key for port in algorithm.spec.function("test").outputs] == ["report"]
    assert algorithm.spec.image.runs == ()
    assert {"epochs", "batch_size", "lr", "classes", "score_threshold"} <= set(algorithm.parameters.values)


@pytest.mark.slow
def test_standalone_train_test_infer_deploy(
    shapes, detector, mean_ap, algorithm_copy, clean_env, run_ok, serve_standalone
):
    # one thread: the test machine is shared
    work = algorithm_copy(ALGORITHM, "shapes", shapes, epochs=6, batch_size=8, threads=1)
    env = clean_env()

    out = run_ok("train.py", work, env)
    assert "epoch 6/6" in out
    out = run_ok("test.py", work, env)
    report = json.loads((work / "output" / "report" / "report.json").read_text())
    assert f"mAP@0.5: {report['mAP@0.5']:.4f}" in out
    assert report["records"] == TEST and set(report["per_class_ap"]) == set(CLASSES)
    assert report["mAP@0.5"] > 0.5  # finding nothing scores 0
    assert all(ap > 0.3 for ap in report["per_class_ap"].values())

    out = run_ok("infer.py", work, env)
    with ReadOnlyDataset(work / "output" / "predictions", "test") as predictions:
        assert len(predictions) == TEST
        assert predictions.record_type == RectangleBoxObjectDetectionDatasetDefine  # the guide's output shape
        assert predictions.get_meta_db().get("classes") == CLASSES
        predicted = [record["object"] for record in predictions]
    with ReadOnlyDataset(shapes, "test") as truth:
        truths = [record["object"] for record in truth]
    assert all(0.3 <= found["score"] <= 1.0 for objects in predicted for found in objects)  # score_threshold
    detections = [
        [(o["name"], o["score"], [o[k] for k in detector.BOX_FIELDS]) for o in objects]
        for objects in predicted
    ]
    infer_map = mean_ap.mean_average_precision(detections, truths, CLASSES)[0]
    assert infer_map > 0.5  # thresholded, integer boxes: still close to test's score
    assert f"{sum(map(len, predicted))} boxes in {TEST} images" in out

    # deploy.py answers the same boxes as infer.py, in the serving response shape
    with ReadOnlyDataset(shapes, "test") as truth:
        images = [truth[i]["content"] for i in range(3)]
    with serve_standalone(work, env) as post:
        for image, objects in zip(images, predicted, strict=False):
            status, answer = post(image)
            assert status == 200 and answer["type"] == "rectangle_box_detection"
            assert [(o["name"], o["xmin"], o["ymin"], o["xmax"], o["ymax"]) for o in answer["objects"]] == [
                (o["name"], o["xmin"], o["ymin"], o["xmax"], o["ymax"]) for o in objects
            ]
        status, answer = post(b"not an image", "text/plain")
        assert status == 400 and answer["error"].startswith("not an image (text/plain)")


def test_train_refuses_a_segmentation_dataset(tmp_path, make_shapes, algorithm_copy, clean_env, run_script):
    make_shapes.make_shapes(tmp_path / "seg", "segmentation", train=2, test=1)
    work = algorithm_copy(ALGORITHM, "shapes", tmp_path / "seg")
    done = run_script("train.py", work, clean_env())
    assert done.returncode != 0
    assert "part train record 0 (shapes/train/00000.png): no field object" in done.stderr


@pytest.mark.slow
def test_train_inside_the_job_contract_and_resume(shapes, tmp_path, train_in_job):
    """Run train.py as the platform would (docs/job-contract.md), then resume from its output."""

    def job(name: str, epochs: int, checkpoint: Path | None) -> tuple[Path, list[dict], str]:
        return train_in_job(ALGORITHM, name, shapes, [f"epochs={epochs}", "threads=1"], checkpoint)

    model, events, _ = job("first", 1, None)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "ready" and kinds[-1] == "done"
    assert {event["title"] for event in events if event["type"] == "figure"} == {"loss", "mAP@0.5"}
    losses = [event for event in events if event["type"] == "metric" and event["title"] == "loss"]
    assert len(losses) == TRAIN // 16 and set(losses[0]["values"]) == {"heatmap_loss", "box_loss"}
    progress = [event["value"] for event in events if event["type"] == "progress"]
    assert progress == sorted(progress) and progress[-1] == pytest.approx(1.0)
    assert torch.load(model / "model.pt", weights_only=False)["epoch"] == 1

    resumed, events, out = job("second", 2, model)
    assert f"resumed from {tmp_path / 'second' / 'inputs' / 'checkpoint'} after epoch 1" in out
    scores = [event for event in events if event["type"] == "metric" and event["title"] == "mAP@0.5"]
    assert [event["x"] for event in scores] == [2]  # only the remaining epoch ran
    assert torch.load(resumed / "model.pt", weights_only=False)["epoch"] == 2
