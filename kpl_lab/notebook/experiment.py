"""`Experiment(...).run()`: a hyperparameter search from Python, run by the server as jobs.

from kpl_lab.experiment import Experiment
best = Experiment(
    "digits-lr", "image-classification", inputs={"data": "dataset:digits"},
    space={"lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True}},
    objective="accuracy/eval_accuracy", trials=8, parallelism=2, pruner="median",
).run()
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .client import Client

POLL_SECONDS = 1.0


class Experiment:
    """A search over parameter.yml keys of one algorithm function; `run()` creates it and waits."""

    def __init__(
        self,
        name: str,
        algorithm: str,
        space: dict[str, dict[str, Any]],
        objective: str,
        direction: str = "maximize",
        function: str = "train",
        inputs: dict[str, str] | None = None,
        parameters: dict[str, Any] | None = None,
        trials: int = 10,
        seconds: float | None = None,
        parallelism: int = 1,
        sampler: str = "tpe",
        seed: int | None = None,
        pruner: str | dict[str, Any] | None = None,
        resources: dict[str, Any] | None = None,
        client: Client | None = None,
    ) -> None:
        self.name = name
        self.client = client or Client()
        self.body: dict[str, Any] = {
            "name": name,
            "algorithm": algorithm,
            "function": function,
            "inputs": inputs or {},
            "parameters": parameters or {},
            "space": space,
            "objective": {"metric": objective, "direction": direction},
            "budget": {"trials": trials, "seconds": seconds},
            "parallelism": parallelism,
            "sampler": {"name": sampler, "seed": seed},
            "pruner": {"name": pruner} if isinstance(pruner, str) else pruner,
            "resources": resources,
        }

    def start(self) -> dict:
        """Create the experiment (checked before any trial starts) and return it; trials run on the server."""
        return self.client.create_experiment(self.body)

    def wait(self, on_update: Callable[[dict], None] | None = None, poll: float = POLL_SECONDS) -> dict:
        """Wait until the experiment ends; call `on_update(experiment)` on each poll; return it."""
        while True:
            experiment = self.client.experiment(self.name)
            if on_update:
                on_update(experiment)
            if experiment["state"] != "running":
                return experiment
            time.sleep(poll)

    def run(self, on_update: Callable[[dict], None] | None = None) -> dict:
        """Create the experiment, wait for it to end, and return it (its best trial, params and model)."""
        self.start()
        return self.wait(on_update)

    def stop(self) -> dict:
        """Stop the experiment and its running trials."""
        return self.client.stop_experiment(self.name)

    def resume(self, trials: int | None = None, seconds: float | None = None) -> dict:
        """Resume the experiment, optionally with a larger budget."""
        return self.client.resume_experiment(self.name, trials, seconds)

    def plot(self, kind: str = "history"):
        """Return Optuna's `history`, `importance` or `parallel` plot as a Plotly figure (it renders in JupyterLab)."""
        import plotly.io

        return plotly.io.from_json(_json(self.client.experiment_plot(self.name, kind)))


def _json(figure: dict) -> str:
    import json

    return json.dumps(figure)
