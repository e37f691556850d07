"""Experiments: the search machinery's per-trial overhead, and the compute pruning saves on digits.

1. **Overhead**: N trials of a tiny algorithm (it pushes 3 points and exits) run by an
   experiment (Optuna study in the catalog database, a driver round every --poll seconds,
   parallelism 1) against the same N jobs submitted by hand one after another and waited
   for with the same poll. Prints seconds per trial for both, the ratio and the overhead.
2. **Pruning** (the digits example, real training): the same random search over the
   learning rate (1e-5 … 1e-1, log) with and without a median pruner. Our random sampler's
   seed moves on by the trial number, so trial i gets the same learning rate in both runs.
   Prints the epochs trained (points of accuracy/eval_accuracy pushed by every trial, a
   pruned trial's included), the best accuracy of each run, and the epochs saved.

    python benchmarks/experiments.py                        # overhead 10 trials x 3, digits 8 trials x 4 epochs
    python benchmarks/experiments.py --trials 6 --epochs 3 --repeat 1
    python benchmarks/experiments.py --skip-digits
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

from traitlets.config import Config

from kpl_lab.api.experiments import ExperimentRequest
from kpl_lab.engine.service import JobRequest
from kpl_lab.platform import Platform

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "bench"
TINY = (
    "import kpl_helper as kh\nfrom kpl_helper import metric\n"
    "p = kh.get_parameter(default='./parameter.yml')\n"
    "figure = metric.MetricFigure('score', y1_name='accuracy')\n"
    "for step in range(3):\n    figure.push_metric(x=step + 1, y1=p.quality * (step + 1) / 3)\n"
    "kh.done()\n"
)


def open_platform(home: Path) -> Platform:
    """Return a platform with room for every job of the benchmark."""
    config = Config(
        {
            "Ledger": {"cpu": 8.0, "memory": 1 << 16, "devices": {"gpu": []}},
            "JobService": {"grace_seconds": 1.0},
            "LocalExecutor": {"tick_seconds": 0.1},
        }
    )
    return Platform(home=str(home), config=config)


def wait_job(platform: Platform, job_id: str, poll: float) -> None:
    """Wait until a job has ended."""
    while platform.jobs.get(PROJECT, job_id).state in ("queued", "running"):
        time.sleep(poll)


def drive(platform: Platform, name: str, poll: float) -> float:
    """Run driver rounds until the experiment ends; return the seconds spent inside the rounds."""
    inside = 0.0
    while platform.experiments.get(PROJECT, name).state == "running":
        start = time.perf_counter()
        platform.experiments.tick()
        inside += time.perf_counter() - start
        time.sleep(poll)
    return inside


def overhead(trials: int, poll: float) -> dict:
    """Return seconds per trial by hand and by an experiment, and the driver's own seconds per trial."""
    with tempfile.TemporaryDirectory(prefix="kpl-exp-bench-") as tmp:
        platform = open_platform(Path(tmp) / "home")
        folder = Path(tmp) / "tiny"
        folder.mkdir()
        (folder / "environment.yml").write_text(
            "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n"
            "      memory: 128\n  cmd: python tiny.py\n"
        )
        (folder / "parameter.yml").write_text("quality: 0.5\n")
        (folder / "tiny.py").write_text(TINY)
        platform.catalog.add_algorithm(PROJECT, folder, name="tiny")
        start = time.perf_counter()
        for index in range(trials):
            request = JobRequest(project=PROJECT, algorithm="tiny", parameters={"quality": index / trials})
            wait_job(platform, platform.jobs.submit(request).id, poll)
        by_hand = (time.perf_counter() - start) / trials
        request = ExperimentRequest.model_validate(
            {
                "name": "overhead",
                "algorithm": "tiny",
                "space": {"quality": {"type": "float", "low": 0.0, "high": 1.0}},
                "objective": {"metric": "score/accuracy"},
                "budget": {"trials": trials},
                "sampler": {"name": "random", "seed": 0},
            }
        )
        start = time.perf_counter()
        platform.experiments.create(PROJECT, request)
        inside = drive(platform, "overhead", poll)
        searched = (time.perf_counter() - start) / trials
        platform.close()
    return {"by_hand": by_hand, "experiment": searched, "driver": inside / trials}


def load_example(relative: str):
    """Import an example module by its path below examples/."""
    path = ROOT / "examples" / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def digits_search(platform: Platform, name: str, trials: int, epochs: int, pruner: dict | None, poll: float):
    """Run the learning-rate search; return (epochs trained by all trials, best accuracy, states)."""
    request = ExperimentRequest.model_validate(
        {
            "name": name,
            "algorithm": "image-classification",
            "inputs": {"data": "dataset:digits"},
            "parameters": {"epochs": epochs, "threads": 1},
            "space": {"lr": {"type": "float", "low": 1e-5, "high": 1e-1, "log": True}},
            "objective": {"metric": "accuracy/eval_accuracy"},
            "budget": {"trials": trials},
            "sampler": {"name": "random", "seed": 7},
            "pruner": pruner,
        }
    )
    platform.experiments.create(PROJECT, request)
    drive(platform, name, poll)
    experiment = platform.experiments.get(PROJECT, name)
    trained = 0
    for trial in experiment.trials:
        wait_job(platform, trial.job_id, poll)  # a pruned trial's job may push a last point while it stops
        trained += len(
            platform.jobs.metrics(PROJECT, trial.job_id).get("accuracy", {}).get("eval_accuracy", [])
        )
    best = platform.experiments.model(experiment).best_value
    return trained, best, [trial.state for trial in experiment.trials]


def pruning(trials: int, epochs: int, pruner: dict, poll: float) -> dict:
    """Return the epochs trained and best accuracy of the search without and with the pruner."""
    with tempfile.TemporaryDirectory(prefix="kpl-exp-digits-") as tmp:
        platform = open_platform(Path(tmp) / "home")
        digits = Path(tmp) / "digits"
        load_example("datasets/make_digits.py").make_digits(digits, size=16)
        platform.catalog.add_dataset(PROJECT, "digits", digits)
        platform.catalog.add_algorithm(PROJECT, ROOT / "examples" / "algorithms" / "image-classification")
        plain = digits_search(platform, "plain", trials, epochs, None, poll)
        pruned = digits_search(platform, "pruned", trials, epochs, pruner, poll)
        platform.close()
    return {"plain": plain, "pruned": pruned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overhead-trials", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="overhead runs (the median is printed)")
    parser.add_argument("--poll", type=float, default=0.05, help="seconds between polls and driver rounds")
    parser.add_argument("--trials", type=int, default=8, help="digits: trials of each search")
    parser.add_argument("--epochs", type=int, default=4, help="digits: epochs of a full trial")
    parser.add_argument(
        "--pruner", choices=["median", "successive_halving", "hyperband"], default="successive_halving"
    )
    parser.add_argument("--warmup", type=int, default=0, help="median: epochs before a trial may be pruned")
    parser.add_argument("--skip-digits", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()

    if not args.skip_overhead:
        runs = [overhead(args.overhead_trials, args.poll) for _ in range(args.repeat)]
        hand = statistics.median(run["by_hand"] for run in runs)
        searched = statistics.median(run["experiment"] for run in runs)
        driver = statistics.median(run["driver"] for run in runs)
        print(f"overhead, {args.overhead_trials} trials, median of {args.repeat}:")
        print(f"  by hand     {hand:.3f} s per job")
        print(
            f"  experiment  {searched:.3f} s per trial "
            f"({searched / hand:.2f}x by hand, {1000 * (searched - hand):+.0f} ms)"
        )
        print(f"  driver      {1000 * driver:.0f} ms per trial inside the driver's rounds (submits included)")
    if args.skip_digits:
        return
    pruner = {"name": args.pruner, "startup_trials": 2, "warmup_steps": args.warmup}
    result = pruning(args.trials, args.epochs, pruner, args.poll)
    (plain_epochs, plain_best, _), (pruned_epochs, pruned_best, states) = result["plain"], result["pruned"]
    print(f"pruning on digits, {args.trials} trials x {args.epochs} epochs, lr 1e-5..1e-1 (log):")
    print(f"  no pruner     {plain_epochs} epochs trained, best eval accuracy {plain_best:.4f}")
    print(
        f"  {args.pruner} {pruned_epochs} epochs trained, best eval accuracy {pruned_best:.4f}, "
        f"{states.count('pruned')} trials pruned"
    )
    print(
        f"  epochs saved: {1 - pruned_epochs / plain_epochs:.0%} "
        f"({pruned_epochs / plain_epochs:.2f}x the epochs), best accuracy {pruned_best - plain_best:+.4f}"
    )


if __name__ == "__main__":
    main()
