"""Train the small CNN on a classification kpl-dataset; resume from an optional checkpoint."""

import math
import os
import sys

import torch
from classifier import (
    SmallCNN,
    choose_part,
    class_names_of,
    load_checkpoint,
    load_records,
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
    data_path = helper.io.get_input_path(key="data", default="./data/digits")
    checkpoint_path = optional_input("checkpoint", default="")
    save_path = helper.io.get_output_path(key="model", default="./output/model")
    if not os.path.isdir(data_path):
        sys.exit(
            f"no dataset at {data_path}: run `python examples/datasets/make_digits.py {data_path}` first"
        )

    torch.manual_seed(parameter.seed)
    torch.set_num_threads(parameter.threads)
    train_part = choose_part(data_path, parameter.train_part)
    eval_part = choose_part(data_path, parameter.eval_part)
    train_records = load_records(data_path, train_part)
    eval_records = load_records(data_path, eval_part) if eval_part and eval_part != train_part else []
    class_names = class_names_of(train_records)
    images, labels = to_tensors(train_records, parameter.image_size)
    eval_images, eval_labels = (
        to_tensors(eval_records, parameter.image_size) if eval_records else (None, None)
    )
    print(f"train: {len(images)} images, {len(class_names)} classes; eval: {len(eval_records)} images")

    model = SmallCNN(len(class_names), parameter.image_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=parameter.lr, weight_decay=parameter.weight_decay)
    start_epoch = 0
    if checkpoint_path and os.path.isdir(checkpoint_path):
        state = load_checkpoint(checkpoint_path)
        if state["class_names"] != class_names:
            sys.exit(
                f"the checkpoint was trained on classes {state['class_names']}, this data has {class_names}"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"]
        print(f"resumed from {checkpoint_path} after epoch {start_epoch}")

    loss_figure = metric.MetricFigure("loss", y1_name="train_loss")
    accuracy_figure = metric.MetricFigure("accuracy", y1_name="train_accuracy", y2_name="eval_accuracy")
    loss_function = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(parameter.seed)
    steps_per_epoch = (len(images) + parameter.batch_size - 1) // parameter.batch_size
    total_steps = max(1, (parameter.epochs - start_epoch) * steps_per_epoch)
    step = 0
    for epoch in range(start_epoch, parameter.epochs):
        for group in optimizer.param_groups:  # cosine decay, computed from the epoch so a resume continues it
            group["lr"] = parameter.lr * 0.5 * (1 + math.cos(math.pi * epoch / parameter.epochs))
        model.train()
        order = torch.randperm(len(images), generator=generator)
        correct = 0
        for start in range(0, len(images), parameter.batch_size):
            index = order[start : start + parameter.batch_size]
            logits = model(images[index])
            loss = loss_function(logits, labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            correct += (logits.argmax(dim=1) == labels[index]).sum().item()
            step += 1
            loss_figure.push_metric(
                x=epoch * steps_per_epoch + start // parameter.batch_size + 1, y1=loss.item()
            )
            send_progress(step / total_steps)
        train_accuracy = correct / len(images)
        if eval_images is not None:
            predicted, _ = predict(model, eval_images, 256)
            eval_accuracy = (predicted == eval_labels).float().mean().item()
            accuracy_figure.push_metric(x=epoch + 1, y1=train_accuracy, y2=eval_accuracy)
        else:
            eval_accuracy = float("nan")
            accuracy_figure.push_metric(x=epoch + 1, y1=train_accuracy)
        save_checkpoint(
            save_path,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "epoch": epoch + 1,
                "class_names": class_names,
                "image_size": parameter.image_size,
            },
        )
        print(
            f"epoch {epoch + 1}/{parameter.epochs}: loss {loss.item():.4f} "
            f"train accuracy {train_accuracy:.4f} eval accuracy {eval_accuracy:.4f}"
        )
    print(f"model saved to {save_path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
