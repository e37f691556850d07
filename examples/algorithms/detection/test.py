"""Measure a trained detector on a detection kpl-dataset: mAP@0.5 and AP per class (Pascal VOC)."""

import json
import math
import os
import sys

import numpy as np
import torch
from detector import (
    build_model,
    checked_objects,
    choose_part,
    decode_image,
    detect,
    load_checkpoint,
    load_records,
    to_original,
)
from mean_ap import mean_average_precision

import kpl_helper as helper
from kpl_helper import result
from kpl_helper.progress import send_progress

BATCH = 64
EVAL_THRESHOLD = 0.01  # mAP scores the whole ranking, so keep the low-scoring boxes too


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    data_path = helper.io.get_input_path(key="data", default="./data/shapes")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    report_path = helper.io.get_output_path(key="report", default="./output/report")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run "
            f"`python examples/datasets/make_shapes.py {data_path} --task detection` first"
        )

    torch.set_num_threads(parameter.threads)
    state = load_checkpoint(model_path)
    model = build_model(state)
    class_names, image_size = state["class_names"], state["image_size"]
    part = choose_part(data_path, parameter.eval_part)
    records = load_records(data_path, part)
    truths = checked_objects(records, class_names, part)
    detections = []
    for start in range(0, len(records), BATCH):
        decoded = [decode_image(record["content"], image_size) for record in records[start : start + BATCH]]
        images = torch.from_numpy(np.stack([image for image, _ in decoded]))
        for found, (_, original) in zip(
            detect(model, images, parameter.max_detections, EVAL_THRESHOLD), decoded, strict=True
        ):
            detections.append(
                [(class_names[c], s, to_original(b, original, image_size)) for c, s, b in found]
            )
        send_progress(len(detections) / len(records))
    mean_ap, per_class = mean_average_precision(detections, truths, class_names, iou_threshold=0.5)
    objects = sum(len(found) for found in truths)
    result.send_scalar_result(mAP=mean_ap, records=len(records), objects=objects)
    report = {
        "mAP@0.5": mean_ap,
        "records": len(records),
        "objects": objects,
        # a class with no objects in this data has no AP: null in JSON
        "per_class_ap": {name: (None if math.isnan(ap) else ap) for name, ap in per_class.items()},
    }
    os.makedirs(report_path, exist_ok=True)
    with open(os.path.join(report_path, "report.json"), "w") as file:
        json.dump(report, file, indent=2)
    print(f"mAP@0.5: {mean_ap:.4f} on {len(records)} records ({objects} objects)")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
