"""Measure a trained model on a classification kpl-dataset: accuracy overall and per class."""

import json
import os
import sys

import torch
from classifier import build_model, choose_part, load_checkpoint, load_records, predict, to_tensors

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

    torch.set_num_threads(parameter.threads)
    state = load_checkpoint(model_path)
    model = build_model(state)
    records = load_records(data_path, choose_part(data_path, parameter.eval_part))
    images, labels = to_tensors(records, state["image_size"])
    predicted, _ = predict(model, images, 256)
    accuracy = (predicted == labels).float().mean().item()
    per_class = {}
    for class_id, name in enumerate(state["class_names"]):
        mask = labels == class_id
        if mask.any():
            per_class[name] = (predicted[mask] == class_id).float().mean().item()
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
