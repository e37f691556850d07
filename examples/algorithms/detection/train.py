"""Train the tiny CenterNet-style detector on a detection kpl-dataset; resume from an optional checkpoint."""

import math
import os
import sys

import numpy as np
import torch
from detector import (
    TinyCenterNet,
    box_loss,
    check_image_size,
    checked_objects,
    choose_part,
    class_names_of,
    decode_image,
    detect,
    focal_loss,
    load_checkpoint,
    load_records,
    make_targets,
    save_checkpoint,
    to_original,
)
from mean_ap import mean_average_precision

import kpl_helper as helper
from kpl_helper import metric
from kpl_helper.progress import send_progress


def optional_input(key, default):
    """Return an input folder, or `default` when the job was started without it."""
    try:
        return helper.io.get_input_path(key=key, default=default)
    except Exception:
        return default


def prepare(records, objects, class_names, image_size):
    """Decode the images and build the targets of both the image and its mirror."""
    images, originals, targets = [], [], {False: ([], [], []), True: ([], [], [])}
    for record, found in zip(records, objects, strict=True):
        image, original = decode_image(record["content"], image_size)
        images.append(image)
        originals.append(original)
        for flip, lists in targets.items():
            for store, value in zip(
                lists, make_targets(found, class_names, original, image_size, flip), strict=True
            ):
                store.append(value)
    stacked = {flip: [torch.from_numpy(np.stack(v)) for v in lists] for flip, lists in targets.items()}
    return torch.from_numpy(np.stack(images)), originals, stacked


def evaluate(model, images, originals, objects, class_names, parameter):
    """Return the mAP@0.5 of the model on prepared images."""
    detections = []
    for start in range(0, len(images), 64):
        found = detect(model, images[start : start + 64], parameter.max_detections, 0.01)
        for boxes, original in zip(found, originals[start : start + 64], strict=True):
            detections.append(
                [(class_names[c], s, to_original(b, original, parameter.image_size)) for c, s, b in boxes]
            )
    return mean_average_precision(detections, objects, class_names)[0]


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    data_path = helper.io.get_input_path(key="data", default="./data/shapes")
    checkpoint_path = optional_input("checkpoint", default="")
    save_path = helper.io.get_output_path(key="model", default="./output/model")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run "
            f"`python examples/datasets/make_shapes.py {data_path} --task detection` first"
        )

    torch.manual_seed(parameter.seed)
    torch.set_num_threads(parameter.threads)
    image_size = check_image_size(parameter.image_size)
    train_part = choose_part(data_path, parameter.train_part)
    eval_part = choose_part(data_path, parameter.eval_part)
    train_records = load_records(data_path, train_part)
    class_names = class_names_of(parameter.classes, data_path, train_part, train_records)
    train_objects = checked_objects(train_records, class_names, train_part)
    images, _, targets = prepare(train_records, train_objects, class_names, image_size)
    eval_records = load_records(data_path, eval_part) if eval_part and eval_part != train_part else []
    eval_objects = checked_objects(eval_records, class_names, eval_part)
    if eval_records:
        eval_images, eval_originals, _ = prepare(eval_records, eval_objects, class_names, image_size)
    del train_records, eval_records  # the decoded tensors are all that training needs
    print(f"train: {len(images)} images, classes {class_names}; eval: {len(eval_objects)} images")

    model = TinyCenterNet(len(class_names), parameter.width)
    optimizer = torch.optim.Adam(model.parameters(), lr=parameter.lr, weight_decay=parameter.weight_decay)
    start_epoch = 0
    if checkpoint_path and os.path.isdir(checkpoint_path):
        state = load_checkpoint(checkpoint_path)
        if state["class_names"] != class_names or state["width"] != parameter.width:
            sys.exit(
                f"the checkpoint has classes {state['class_names']} and width {state['width']}; "
                f"this run has {class_names} and width {parameter.width}"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"]
        print(f"resumed from {checkpoint_path} after epoch {start_epoch}")

    loss_figure = metric.MetricFigure("loss", y1_name="heatmap_loss", y2_name="box_loss")
    map_figure = metric.MetricFigure("mAP@0.5", y1_name="eval_mAP", x_name="epoch")
    generator = torch.Generator().manual_seed(parameter.seed)
    steps_per_epoch = (len(images) + parameter.batch_size - 1) // parameter.batch_size
    total_steps = max(1, (parameter.epochs - start_epoch) * steps_per_epoch)
    step = 0
    for epoch in range(start_epoch, parameter.epochs):
        for group in optimizer.param_groups:  # cosine decay, computed from the epoch so a resume continues it
            group["lr"] = parameter.lr * 0.5 * (1 + math.cos(math.pi * epoch / parameter.epochs))
        model.train()
        order = torch.randperm(len(images), generator=generator)
        for start in range(0, len(images), parameter.batch_size):
            index = order[start : start + parameter.batch_size]
            flip = torch.rand(len(index), generator=generator) < 0.5  # mirror half the batch
            batch = torch.where(flip[:, None, None, None], images[index].flip(-1), images[index])
            heat_target, box_target, centres = (
                torch.where(flip.view(-1, *[1] * (plain.dim() - 1)), mirrored[index], plain[index])
                for plain, mirrored in zip(targets[False], targets[True], strict=True)
            )
            heat_logits, box = model(batch)
            heat_loss = focal_loss(heat_logits, heat_target)
            size_loss = box_loss(box, box_target, centres)
            optimizer.zero_grad()
            (heat_loss + size_loss).backward()
            optimizer.step()
            step += 1
            loss_figure.push_metric(
                x=epoch * steps_per_epoch + start // parameter.batch_size + 1,
                y1=heat_loss.item(),
                y2=size_loss.item(),
            )
            send_progress(step / total_steps)
        if eval_objects:
            eval_map = evaluate(model, eval_images, eval_originals, eval_objects, class_names, parameter)
            map_figure.push_metric(x=epoch + 1, y1=eval_map)
        else:
            eval_map = float("nan")
        save_checkpoint(
            save_path,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch + 1,
                "class_names": class_names,
                "image_size": image_size,
                "width": parameter.width,
            },
        )
        print(
            f"epoch {epoch + 1}/{parameter.epochs}: heatmap loss {heat_loss.item():.4f} "
            f"box loss {size_loss.item():.4f} eval mAP@0.5 {eval_map:.4f}"
        )
    print(f"model saved to {save_path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
