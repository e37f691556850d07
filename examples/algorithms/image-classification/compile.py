"""Compile the trained classifier for a target runtime: `onnx` (served by deploy.py with onnxruntime)."""

import sys

import torch
from classifier import build_model, export_onnx, load_checkpoint

import kpl_helper as helper

TARGETS = ("onnx",)


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    save_path = helper.io.get_output_path(key="model", default="./output/compiled")
    if parameter.compile_target not in TARGETS:
        sys.exit(
            f"compile_target {parameter.compile_target!r} is not supported (targets: {', '.join(TARGETS)})"
        )
    torch.set_num_threads(parameter.threads)
    state = load_checkpoint(model_path)
    path = export_onnx(build_model(state), state, save_path, parameter.onnx_opset)
    print(f"compiled for {parameter.compile_target} (opset {parameter.onnx_opset}): {path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
