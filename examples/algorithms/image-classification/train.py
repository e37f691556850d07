"""Train the small CNN on a classification kpl-dataset; resume from an optional checkpoint.

Run by a job of several workers (environment.yml `train.resource.workers`, or the job's
`workers`), it trains with DistributedDataParallel over gloo: each worker takes its share
of every batch, so a step sees the same images as one worker's step; rank 0 evaluates,
saves the checkpoint and sends the metrics.
"""

import gc
import math
import os
import sys

import torch
import torch.distributed as dist
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
from torch.nn.parallel import DistributedDataParallel

import kpl_helper as helper
from kpl_dataset.torch import KPLDistributedSampler
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

    world, rank = helper.get_world_size(), helper.get_rank()
    if world > 1:
        dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the platform
        if parameter.batch_size % world:
            sys.exit(f"batch_size {parameter.batch_size} does not split evenly over {world} workers")
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
    # DDP averages the workers' gradients: with batch_size / world images each, a step is one worker's
    trained = DistributedDataParallel(model) if world > 1 else model
    batch = parameter.batch_size // world

    loss_figure = metric.MetricFigure("loss", y1_name="train_loss")
    accuracy_figure = metric.MetricFigure(
        "accuracy", y1_name="train_accuracy", y2_name="eval_accuracy", x_name="epoch"
    )
    loss_function = nn.CrossEntropyLoss()
    # one shuffled order per epoch for all workers; worker r takes every world-th image of it
    sampler = KPLDistributedSampler(len(images), num_replicas=world, rank=rank, seed=parameter.seed)
    steps_per_epoch = (len(sampler) + batch - 1) // batch
    total_steps = max(1, (parameter.epochs - start_epoch) * steps_per_epoch)
    step = 0
    for epoch in range(start_epoch, parameter.epochs):
        for group in optimizer.param_groups:  # cosine decay, computed from the epoch so a resume continues it
            group["lr"] = parameter.lr * 0.5 * (1 + math.cos(math.pi * epoch / parameter.epochs))
        trained.train()
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        counts = torch.zeros(2)  # images right, images seen
        for start in range(0, len(order), batch):
            index = order[start : start + batch]
            logits = trained(images[index])
            loss = loss_function(logits, labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            counts += torch.tensor([(logits.argmax(dim=1) == labels[index]).sum().item(), len(index)])
            step += 1
            loss_figure.push_metric(x=epoch * steps_per_epoch + start // batch + 1, y1=loss.item())
            send_progress(step / total_steps)
        if world > 1:
            dist.all_reduce(counts)
        train_accuracy = (counts[0] / counts[1]).item()
        if rank == 0:
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
    if world > 1:
        # leave together, with DDP's reducer (and the gloo work it holds) freed first: a process
        # group torn down at interpreter exit, or while a peer still runs, can abort the worker
        dist.barrier()
        del trained
        gc.collect()
        dist.destroy_process_group()
    if rank:
        return
    print(f"model saved to {save_path}")


if __name__ == "__main__":
    helper.ready()
    main()
    helper.done()
