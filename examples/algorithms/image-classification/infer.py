"""Classify the images of a kpl-dataset; write the predictions as a kpl-dataset."""

import os
import sys

import numpy as np
from classifier import choose_part, decode_image, load_predictor, softmax

import kpl_helper as helper
from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset
from kpl_helper.progress import send_progress

PREDICTION_FIELDS = {"class_id": BasicType.Int, "class_name": BasicType.String, "score": BasicType.Float}


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    data_path = helper.io.get_input_path(key="data", default="./data/digits")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    save_path = helper.io.get_output_path(key="predictions", default="./output/predictions")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run `python examples/datasets/make_digits.py {data_path}` first"
        )

    # train.py's model.pt runs on PyTorch, compile.py's model.onnx on onnxruntime
    logits_of, class_names, image_size = load_predictor(model_path, parameter.threads)
    part = choose_part(data_path, parameter.eval_part)
    reader = ReadOnlyDataset(data_path, part)
    # the input's fields, with class_id / class_name / score now meaning the prediction
    record_type = {**reader.record_type, **PREDICTION_FIELDS}
    writer = WriteOnlyDataset(save_path, reader.data_name, record_type)
    try:
        total = len(reader)
        for start in range(0, total, parameter.batch_size):
            records = [reader[i] for i in range(start, min(start + parameter.batch_size, total))]
            images = np.stack([decode_image(r["content"], image_size) for r in records])[:, None]
            probabilities = softmax(logits_of(images))
            for record, row in zip(records, probabilities, strict=True):
                class_id = int(row.argmax())
                writer.write(
                    {
                        **record,
                        "class_id": class_id,
                        "class_name": class_names[class_id],
                        "score": float(row[class_id]),
                    }
                )
            send_progress(min(start + parameter.batch_size, total) / max(total, 1))
    except BaseException:
        writer.abort()
        raise
    finally:
        reader.close()
    writer.close()
    print(f"{total} predictions written to {save_path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
