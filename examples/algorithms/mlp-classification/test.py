"""Measure a trained model on a classification kpl-dataset: accuracy overall and per class."""

import json
import os
import sys

from mlp import choose_part, load_model, load_records, predict, to_arrays

import kpl_helper as helper
from kpl_helper import result


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    data_path = helper.io.get_input_path(key="data", default="./data/digits")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    report_path = helper.io.get_output_path(key="report", default="./output/report")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run `python examples/datasets/make_digits.py {data_path}` first"
        )

    weights, meta = load_model(model_path)
    records = load_records(data_path, choose_part(data_path, parameter.eval_part))
    images, labels = to_arrays(records, meta["image_size"])
    predicted, _ = predict(weights, images)
    accuracy = float((predicted == labels).mean())
    per_class = {}
    for class_id, name in enumerate(meta["class_names"]):
        mask = labels == class_id
        if mask.any():
            per_class[name] = float((predicted[mask] == class_id).mean())
    result.send_scalar_result(accuracy=accuracy, records=len(records))
    report = {"accuracy": accuracy, "records": len(records), "per_class_accuracy": per_class}
    os.makedirs(report_path, exist_ok=True)
    with open(os.path.join(report_path, "report.json"), "w") as file:
        json.dump(report, file, indent=2)
    print(f"accuracy: {accuracy:.4f} on {len(records)} records")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
