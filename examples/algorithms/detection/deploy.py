"""Serve the detector: POST an image to /predict, get the boxes it finds."""

import torch
from detector import build_model, decode_image, detect, load_checkpoint, to_original
from infer import as_object

import kpl_helper as helper
from kpl_helper import deploy


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    torch.set_num_threads(parameter.deploy_threads)
    state = load_checkpoint(model_path)
    model = build_model(state)
    class_names, image_size = state["class_names"], state["image_size"]

    def predict(data: bytes, content_type: str) -> deploy.RectangleBoxObjectDetectionResponse:
        try:
            image, original = decode_image(data, image_size)
        except Exception as error:
            raise deploy.BadInput(f"not an image ({content_type}): {error}") from None
        (found,) = detect(
            model, torch.from_numpy(image).unsqueeze(0), parameter.max_detections, parameter.score_threshold
        )
        response = deploy.RectangleBoxObjectDetectionResponse(original[0], original[1], 3)
        for class_id, score, box in found:
            box = as_object(class_names[class_id], score, to_original(box, original, image_size), original)
            response.add_object(box["name"], box["xmin"], box["ymin"], box["xmax"], box["ymax"], score)
        return response

    deploy.serve(predict)


if __name__ == "__main__":
    main()
