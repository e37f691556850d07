"""Train an example algorithm through `kpl-lab` on a platform home, for the benchmarks that serve its model.

serving.py and deploy_threads.py import it: run as scripts, they find it beside them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("image-classification", "detection", "segmentation")


def make_dataset(example: str, folder: Path) -> None:
    """Write the dataset the example trains on: the digits, or small shapes for its task."""
    if example == "image-classification":
        command = [str(ROOT / "examples/datasets/make_digits.py"), str(folder)]
    else:
        command = [str(ROOT / "examples/datasets/make_shapes.py"), str(folder), "--task", example]
        command += ["--train", "200", "--test", "20"]
    subprocess.run([sys.executable, *command], check=True, stdout=subprocess.DEVNULL)


def train(
    home: Path, base: Path, example: str, epochs: int, algorithm: str | None = None
) -> tuple[str, bytes]:
    """Train `example` on `home` (the example's folder, or the version `algorithm` names); return its model's ref and a test image."""
    from kpl_dataset import ReadOnlyDataset

    data = base / f"{example}-data"
    make_dataset(example, data)
    cli = [sys.executable, "-m", "kpl_lab.cli", "--home", str(home)]
    quiet = {"check": True, "stdout": subprocess.DEVNULL}
    subprocess.run([*cli, "dataset", "add", "data", str(data)], **quiet)
    if algorithm is None:
        subprocess.run([*cli, "algorithm", "add", str(ROOT / "examples/algorithms" / example)], **quiet)
        algorithm = example
    subprocess.run(
        [*cli, "job", "submit", algorithm, "--input", "data=dataset:data"]
        + ["--param", f"epochs={epochs}", "--param", "threads=1", "--follow"],
        **quiet,
    )
    models = subprocess.run([*cli, "model", "list", "--json"], check=True, capture_output=True, text=True)
    (model,) = [m for m in json.loads(models.stdout) if m["name"] == f"{example}-model"]
    with ReadOnlyDataset(data, "test") as reader:
        image = reader[0]["content"]
    return f"{model['name']}:{model['versions'][-1]['version']}", image
