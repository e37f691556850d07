"""Train the perceptron on a classification kpl-dataset; resume from an optional checkpoint."""

import math
import os
import sys

import numpy as np
from mlp import (
    Adam,
    choose_part,
    class_names_of,
    load_model,
    load_optimizer,
    load_records,
    loss_and_gradients,
    new_weights,
    predict,
    save_model,
    to_arrays,
)

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

    train_part = choose_part(data_path, parameter.train_part)
    eval_part = choose_part(data_path, parameter.eval_part)
    train_records = load_records(data_path, train_part)
    eval_records = load_records(data_path, eval_part) if eval_part and eval_part != train_part else []
    class_names = class_names_of(train_records)
    images, labels = to_arrays(train_records, parameter.image_size)
    eval_images, eval_labels = to_arrays(eval_records, parameter.image_size) if eval_records else (None, None)
    print(f"train: {len(images)} images, {len(class_names)} classes; eval: {len(eval_records)} images")

    weights = new_weights(images.shape[1], parameter.hidden, len(class_names), parameter.seed)
    optimizer = Adam(weights)
    start_epoch = 0
    if checkpoint_path and os.path.isdir(checkpoint_path):
        weights, meta = load_model(checkpoint_path)
        if meta["class_names"] != class_names:
            sys.exit(
                f"the checkpoint was trained on classes {meta['class_names']}, this data has {class_names}"
            )
        optimizer = Adam(weights, load_optimizer(checkpoint_path))
        start_epoch = meta["epoch"]
        print(f"resumed from {checkpoint_path} after epoch {start_epoch}")

    loss_figure = metric.MetricFigure("loss", y1_name="train_loss")
    accuracy_figure = metric.MetricFigure("accuracy", y1_name="train_accuracy", y2_name="eval_accuracy")
    batch = parameter.batch_size
    steps_per_epoch = (len(images) + batch - 1) // batch
    total_steps = max(1, (parameter.epochs - start_epoch) * steps_per_epoch)
    step = 0
    for epoch in range(start_epoch, parameter.epochs):
        # cosine decay, computed from the epoch so a resume continues it
        lr = parameter.lr * 0.5 * (1 + math.cos(math.pi * epoch / parameter.epochs))
        order = np.random.default_rng([parameter.seed, epoch]).permutation(len(images))
        right = 0
        for start in range(0, len(order), batch):
            index = order[start : start + batch]
            loss, scores, gradients = loss_and_gradients(
                weights, images[index], labels[index], parameter.weight_decay
            )
            optimizer.update(weights, gradients, lr)
            right += int((scores.argmax(axis=1) == labels[index]).sum())
            step += 1
            loss_figure.push_metric(x=epoch * steps_per_epoch + start // batch + 1, y1=loss)
            send_progress(step / total_steps)
        train_accuracy = right / len(images)
        if eval_images is not None:
            predicted, _ = predict(weights, eval_images)
            eval_accuracy = float((predicted == eval_labels).mean())
            accuracy_figure.push_metric(x=epoch + 1, y1=train_accuracy, y2=eval_accuracy)
        else:
            eval_accuracy = float("nan")
            accuracy_figure.push_metric(x=epoch + 1, y1=train_accuracy)
        meta = {"class_names": class_names, "image_size": parameter.image_size, "epoch": epoch + 1}
        save_model(save_path, weights, meta, optimizer)
        print(
            f"epoch {epoch + 1}/{parameter.epochs}: loss {loss:.4f} "
            f"train accuracy {train_accuracy:.4f} eval accuracy {eval_accuracy:.4f}"
        )
    print(f"model saved to {save_path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
