"""Segment the images of a kpl-dataset; write them with their predicted masks as a kpl-dataset."""

import os
import sys

import torch
from segmenter import build_model, choose_part, decode_image, load_checkpoint, mask_png, segment

import kpl_helper as helper
from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset
from kpl_helper.progress import send_progress


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    data_path = helper.io.get_input_path(key="data", default="./data/shapes")
    model_path = helper.io.get_input_path(key="model", default="./output/model")
    save_path = helper.io.get_output_path(key="predictions", default="./output/predictions")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run "
            f"`python examples/datasets/make_shapes.py {data_path} --task segmentation` first"
        )

    torch.set_num_threads(parameter.threads)
    state = load_checkpoint(model_path)
    model = build_model(state)
    part = choose_part(data_path, parameter.eval_part)
    reader = ReadOnlyDataset(data_path, part)
    # the input's fields, with mask now meaning the prediction
    writer = WriteOnlyDataset(
        save_path, reader.data_name, {**reader.record_type, "mask": BasicType.ByteArray}
    )
    try:
        total = len(reader)
        for index in range(total):
            record = reader[index]
            try:
                image, original = decode_image(record["content"], state["image_size"])
            except Exception as error:
                raise ValueError(
                    f"record {index} ({record.get('path', '?')}): content is not an image ({error})"
                ) from None
            writer.write({**record, "mask": mask_png(segment(model, image, original))})
            send_progress((index + 1) / max(total, 1))
        meta = writer.get_meta_db()
        (meta.update if meta.has("classes") else meta.put)("classes", state["class_names"])
    except BaseException:
        writer.abort()
        raise
    finally:
        reader.close()
    writer.close()
    print(f"{total} masks written to {save_path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
