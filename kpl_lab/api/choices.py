"""The API's fixed sets of words: job states, directions, samplers, pruners, annotation kinds and formats.

Plain enums, no pydantic: the models of `kpl_lab.api` take them as field types, and `kpl-lab`
offers them as choices without loading a model.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    """Where a job is: queued until its resources are free, running, then one final state."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    stopped = "stopped"
    lost = "lost"


JOB_STATES = tuple(state.value for state in JobState)
FINAL_STATES = (JobState.succeeded.value, JobState.failed.value, JobState.stopped.value, JobState.lost.value)


class Direction(str, Enum):
    """Whether the objective is to be made as large or as small as possible."""

    maximize = "maximize"
    minimize = "minimize"


class SamplerName(str, Enum):
    """Optuna's samplers offered."""

    random = "random"
    grid = "grid"
    tpe = "tpe"
    cmaes = "cmaes"


class PrunerName(str, Enum):
    """Optuna's pruners offered."""

    median = "median"
    successive_halving = "successive_halving"
    hyperband = "hyperband"


class TaskKind(str, Enum):
    """What a task labels: an image's class, its objects (boxes, polygons, masks, keypoints, OCR), a text's or a sound's class."""

    image_class = "image_class"
    boxes = "boxes"
    polygons = "polygons"
    masks = "masks"
    keypoints = "keypoints"
    ocr = "ocr"
    text_class = "text_class"
    audio_class = "audio_class"


class RecordState(str, Enum):
    """A record's state in a queue: unlabelled, or its label's state."""

    unlabelled = "unlabelled"
    labelled = "labelled"
    accepted = "accepted"
    rejected = "rejected"


class QueueOrder(str, Enum):
    """The order of a queue: record number, or the pre-labelling model's uncertainty (the least certain first)."""

    record = "record"
    uncertainty = "uncertainty"


class ExportFormat(str, Enum):
    """The label formats a task exports to and imports from."""

    voc = "voc"
    coco = "coco"
    labelme = "labelme"
    yolo = "yolo"
