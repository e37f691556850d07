"""Classify the images of a kpl-dataset; write the predictions as a kpl-dataset."""

import os
import sys

import numpy as np
from mlp import choose_part, decode_image, load_model, predict

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

    weights, meta = load_model(model_path)
    reader = ReadOnlyDataset(data_path, choose_part(data_path, parameter.eval_part))
    # the input's fields, with class_id / class_name / score now meaning the prediction
    record_type = {**reader.record_type, **PREDICTION_FIELDS}
    writer = WriteOnlyDataset(save_path, reader.data_name, record_type)
    try:
        total = len(reader)
        for start in range(0, total, parameter.batch_size):
            records = [reader[i] for i in range(start, min(start + parameter.batch_size, total))]
            images = np.stack([decode_image(r["content"], meta["image_size"]).ravel() for r in records])
            ids, scores = predict(weights, images)
            for record, class_id, score in zip(records, ids, scores, strict=True):
                writer.write(
                    {
                        **record,
                        "class_id": int(class_id),
                        "class_name": meta["class_names"][class_id],
                        "score": float(score),
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
