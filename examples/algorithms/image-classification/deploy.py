"""Serve the classifier: POST an image to /predict, get its class and score.

The model folder is either train.py's (model.pt, run on PyTorch) or compile.py's (model.onnx,
run on onnxruntime): the answers are the same within float tolerance.
"""

from classifier import decode_image, load_predictor, softmax

import kpl_helper as helper
from kpl_helper import deploy


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    logits_of, class_names, image_size = load_predictor(model_path, parameter.deploy_threads)

    def predict(data: bytes, content_type: str) -> dict:
        try:
            image = decode_image(data, image_size)
        except Exception as error:
            raise deploy.BadInput(f"not an image ({content_type}): {error}") from None
        probabilities = softmax(logits_of(image[None, None]))[0]
        class_id = int(probabilities.argmax())
        return deploy.ClassificationResponse.dumps(
            image.shape[0],
            image.shape[1],
            1,
            class_id,
            class_names[class_id],
            score=float(probabilities[class_id]),
        )

    deploy.serve(predict)


if __name__ == "__main__":
    main()
