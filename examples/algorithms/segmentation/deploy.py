"""Serve the segmenter: POST an image to /predict, get its class mask (one class index per pixel)."""

import torch
from segmenter import build_model, decode_image, load_checkpoint, segment

import kpl_helper as helper
from kpl_helper import deploy


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    torch.set_num_threads(parameter.deploy_threads)
    state = load_checkpoint(model_path)
    model = build_model(state)

    def predict(data: bytes, content_type: str) -> dict:
        try:
            image, original = decode_image(data, state["image_size"])
        except Exception as error:
            raise deploy.BadInput(f"not an image ({content_type}): {error}") from None
        class_map = segment(model, image, original)
        return deploy.SegmentationResponse.dumps(original[0], original[1], 3, class_map.tolist())

    deploy.serve(predict)


if __name__ == "__main__":
    main()
