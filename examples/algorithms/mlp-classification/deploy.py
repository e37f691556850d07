"""Serve the perceptron: POST an image to /predict, get its class and score."""

from mlp import decode_image, load_model, predict

import kpl_helper as helper
from kpl_helper import deploy


def main():
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    weights, meta = load_model(model_path)
    image_size = meta["image_size"]

    def answer(data: bytes, content_type: str) -> dict:
        try:
            image = decode_image(data, image_size)
        except Exception as error:
            raise deploy.BadInput(f"not an image ({content_type}): {error}") from None
        ids, scores = predict(weights, image.reshape(1, -1))
        class_id = int(ids[0])
        return deploy.ClassificationResponse.dumps(
            image.shape[0], image.shape[1], 1, class_id, meta["class_names"][class_id], score=float(scores[0])
        )

    deploy.serve(answer)


if __name__ == "__main__":
    main()
