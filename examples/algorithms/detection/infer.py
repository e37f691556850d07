"""Find objects in the images of a kpl-dataset; write them with their boxes and scores as a kpl-dataset."""

import os
import sys

import torch
from detector import build_model, choose_part, decode_image, detect, load_checkpoint, to_original

import kpl_helper as helper
from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset
from kpl_helper.progress import send_progress

# the user guide's detection output: Pascal VOC objects with a score
PREDICTED_OBJECT = {
    "name": BasicType.String,
    "xmin": BasicType.Int,
    "ymin": BasicType.Int,
    "xmax": BasicType.Int,
    "ymax": BasicType.Int,
    "difficult": BasicType.Int,
    "score": BasicType.Float,
}


def as_object(name, score, box, original):
    """Return one prediction as a VOC object with integer pixel coordinates inside the image."""
    height, width = original
    xmin, ymin, xmax, ymax = box
    return {
        "name": name,
        "xmin": min(max(round(xmin), 0), width - 1),
        "ymin": min(max(round(ymin), 0), height - 1),
        "xmax": min(max(round(xmax), 0), width - 1),
        "ymax": min(max(round(ymax), 0), height - 1),
        "difficult": 0,
        "score": score,
    }


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    data_path = helper.io.get_input_path(key="data", default="./data/shapes")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    save_path = helper.io.get_output_path(key="predictions", default="./output/predictions")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run "
            f"`python examples/datasets/make_shapes.py {data_path} --task detection` first"
        )

    torch.set_num_threads(parameter.threads)
    state = load_checkpoint(model_path)
    model = build_model(state)
    class_names, image_size = state["class_names"], state["image_size"]
    part = choose_part(data_path, parameter.eval_part)
    reader = ReadOnlyDataset(data_path, part)
    # the input's fields, with object now meaning the predicted boxes
    writer = WriteOnlyDataset(
        save_path, reader.data_name, {**reader.record_type, "object": [PREDICTED_OBJECT]}
    )
    boxes = 0
    try:
        total = len(reader)
        for index in range(total):
            record = reader[index]
            try:
                image, original = decode_image(record["content"], image_size)
            except Exception as error:
                raise ValueError(
                    f"record {index} ({record.get('path', '?')}): content is not an image ({error})"
                ) from None
            (found,) = detect(
                model,
                torch.from_numpy(image).unsqueeze(0),
                parameter.max_detections,
                parameter.score_threshold,
            )
            objects = [
                as_object(class_names[c], s, to_original(b, original, image_size), original)
                for c, s, b in found
            ]
            writer.write({**record, "object": objects})
            boxes += len(objects)
            send_progress((index + 1) / max(total, 1))
        meta = writer.get_meta_db()
        (meta.update if meta.has("classes") else meta.put)("classes", class_names)
    except BaseException:
        writer.abort()
        raise
    finally:
        reader.close()
    writer.close()
    print(f"{boxes} boxes in {total} images written to {save_path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
