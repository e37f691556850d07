"""Train the small U-Net on a segmentation kpl-dataset; resume from an optional checkpoint."""

import math
import os
import sys

import torch
from segmenter import (
    IGNORE_INDEX,
    TinyUNet,
    check_image_size,
    choose_part,
    class_names_of,
    confusion,
    load_checkpoint,
    load_records,
    mean_iou,
    predict,
    save_checkpoint,
    to_tensors,
)
from torch import nn

import kpl_helper as helper
from kpl_helper import metric
from kpl_helper.progress import send_progress


def optional_input(key, default):
    """Return an input folder, or `default` when the job was started without it."""
    try:
        return helper.io.get_input_path(key=key, default=default)
    except Exception:
        return default


def main():
    parameter = helper.get_parameter(default="./parameter.yml")
    data_path = helper.io.get_input_path(key="data", default="./data/shapes")
    checkpoint_path = optional_input("checkpoint", default="")
    save_path = helper.io.get_output_path(key="model", default="./output/model")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run "
            f"`python examples/datasets/make_shapes.py {data_path} --task segmentation` first"
        )

    torch.manual_seed(parameter.seed)
    torch.set_num_threads(parameter.threads)
    image_size = check_image_size(parameter.image_size)
    train_part = choose_part(data_path, parameter.train_part)
    eval_part = choose_part(data_path, parameter.eval_part)
    class_names = class_names_of(parameter.classes, data_path, train_part)
    num_classes = len(class_names)
    images, masks = to_tensors(load_records(data_path, train_part), image_size, num_classes, train_part)
    eval_images, eval_masks = (
        to_tensors(load_records(data_path, eval_part), image_size, num_classes, eval_part)
        if eval_part and eval_part != train_part
        else (None, None)
    )
    print(
        f"train: {len(images)} images, classes {class_names}; "
        f"eval: {0 if eval_images is None else len(eval_images)} images"
    )

    model = TinyUNet(num_classes, parameter.width)
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

    loss_figure = metric.MetricFigure("loss", y1_name="train_loss")
    iou_figure = metric.MetricFigure("mIoU", y1_name="train_mIoU", y2_name="eval_mIoU", x_name="epoch")
    # rare classes weigh more (square root of median-frequency balancing): shapes are few pixels
    counts = (
        torch.bincount(masks[masks != IGNORE_INDEX].flatten(), minlength=num_classes).double().clamp(min=1)
    )
    weights = (counts.median() / counts).sqrt().float()
    loss_function = nn.CrossEntropyLoss(weight=weights, ignore_index=IGNORE_INDEX)
    generator = torch.Generator().manual_seed(parameter.seed)
    steps_per_epoch = (len(images) + parameter.batch_size - 1) // parameter.batch_size
    total_steps = max(1, (parameter.epochs - start_epoch) * steps_per_epoch)
    step = 0
    for epoch in range(start_epoch, parameter.epochs):
        for group in optimizer.param_groups:  # cosine decay, computed from the epoch so a resume continues it
            group["lr"] = parameter.lr * 0.5 * (1 + math.cos(math.pi * epoch / parameter.epochs))
        model.train()
        order = torch.randperm(len(images), generator=generator)
        train_confusion = torch.zeros(num_classes, num_classes, dtype=torch.int64)
        for start in range(0, len(images), parameter.batch_size):
            index = order[start : start + parameter.batch_size]
            batch, target = images[index], masks[index]
            flip = torch.rand(len(index), generator=generator) < 0.5  # mirror half the batch
            batch = torch.where(flip[:, None, None, None], batch.flip(-1), batch)
            target = torch.where(flip[:, None, None], target.flip(-1), target)
            logits = model(batch)
            loss = loss_function(logits, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            train_confusion += confusion(logits.argmax(dim=1), target, num_classes)
            step += 1
            loss_figure.push_metric(
                x=epoch * steps_per_epoch + start // parameter.batch_size + 1, y1=loss.item()
            )
            send_progress(step / total_steps)
        train_miou = mean_iou(train_confusion)
        if eval_images is not None:
            eval_miou = mean_iou(confusion(predict(model, eval_images, 64), eval_masks, num_classes))
            iou_figure.push_metric(x=epoch + 1, y1=train_miou, y2=eval_miou)
        else:
            eval_miou = float("nan")
            iou_figure.push_metric(x=epoch + 1, y1=train_miou)
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
            f"epoch {epoch + 1}/{parameter.epochs}: loss {loss.item():.4f} "
            f"train mIoU {train_miou:.4f} eval mIoU {eval_miou:.4f}"
        )
    print(f"model saved to {save_path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
