"""Measure a trained model on a segmentation kpl-dataset: mIoU, per-class IoU and pixel accuracy."""

import json
import os
import sys

import torch
from segmenter import (
    build_model,
    choose_part,
    confusion,
    decode_image,
    decode_mask,
    iou_per_class,
    load_checkpoint,
    load_records,
    mean_iou,
    segment,
)

import kpl_helper as helper
from kpl_helper import result
from kpl_helper.progress import send_progress


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    data_path = helper.io.get_input_path(key="data", default="./data/shapes")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    report_path = helper.io.get_output_path(key="report", default="./output/report")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run "
            f"`python examples/datasets/make_shapes.py {data_path} --task segmentation` first"
        )

    torch.set_num_threads(parameter.threads)
    state = load_checkpoint(model_path)
    model = build_model(state)
    class_names = state["class_names"]
    num_classes = len(class_names)
    part = choose_part(data_path, parameter.eval_part)
    records = load_records(data_path, part)
    # scored at each image's own resolution: the prediction is scaled back, the truth is untouched
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    for index, record in enumerate(records):
        where = f"part {part or 'default'} record {index} ({record.get('path', '?')})"
        if "mask" not in record:
            sys.exit(f"{where}: no field mask: test needs records with ground-truth masks")
        image, original = decode_image(record["content"], state["image_size"])
        truth = torch.from_numpy(decode_mask(record["mask"], None, num_classes, where))
        if tuple(truth.shape) != original:
            sys.exit(
                f"{where}: mask is {truth.shape[1]}x{truth.shape[0]}, image is {original[1]}x{original[0]}"
            )
        predicted = torch.from_numpy(segment(model, image, original)).long()
        matrix += confusion(predicted, truth, num_classes)
        send_progress((index + 1) / len(records))
    miou = mean_iou(matrix)
    pixel_accuracy = float(matrix.diag().sum() / matrix.sum().clamp(min=1))
    per_class = dict(zip(class_names, iou_per_class(matrix), strict=True))
    result.send_scalar_result(mIoU=miou, pixel_accuracy=pixel_accuracy, records=len(records))
    report = {
        "mIoU": miou,
        "pixel_accuracy": pixel_accuracy,
        "records": len(records),
        # a class that never occurs has no IoU: null in JSON
        "per_class_iou": {name: (None if value != value else value) for name, value in per_class.items()},
    }
    os.makedirs(report_path, exist_ok=True)
    with open(os.path.join(report_path, "report.json"), "w") as file:
        json.dump(report, file, indent=2)
    print(f"mIoU: {miou:.4f}, pixel accuracy: {pixel_accuracy:.4f} on {len(records)} records")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
