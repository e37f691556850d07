"""Serve the classifier: POST an image to /predict, get its class and score."""

import torch
from classifier import build_model, decode_image, load_checkpoint

import kpl_helper as helper
from kpl_helper import deploy


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    torch.set_num_threads(parameter.threads)
    state = load_checkpoint(model_path)
    model = build_model(state)

    @torch.no_grad()
    def predict(data: bytes, content_type: str) -> dict:
        try:
            image = decode_image(data, state["image_size"])
        except Exception as error:
            raise deploy.BadInput(f"not an image ({content_type}): {error}") from None
        probabilities = torch.softmax(model(torch.from_numpy(image)[None, None]), dim=1)[0]
        score, class_id = probabilities.max(dim=0)
        return deploy.ClassificationResponse.dumps(
            image.shape[0],
            image.shape[1],
            1,
            int(class_id),
            state["class_names"][int(class_id)],
            score=float(score),
        )

    deploy.serve(predict)


if __name__ == "__main__":
    main()
