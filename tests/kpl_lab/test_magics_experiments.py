"""%kpl_tune, %kpl_compare and Experiment(...).run() in a real IPython shell against a live server."""

from __future__ import annotations

import re
import time

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from kpl_lab.errors import BadRequest
from kpl_lab.experiment import Experiment

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PLOTLY = "application/vnd.plotly.v1+json"


@pytest.fixture
def shell(kpl_server, kpl_data, monkeypatch):
    """Return an IPython shell with `%load_ext kpl_lab` done, finding the server through KPL_API_*."""
    monkeypatch.setenv("KPL_API_URL", kpl_server.url + "kpl/api/")
    monkeypatch.setenv("KPL_API_TOKEN", kpl_server.token)
    config = Config()
    config.HistoryManager.enabled = False
    config.HistoryManager.hist_file = ":memory:"
    ipython = InteractiveShell.instance(config=config)
    ipython.run_line_magic("load_ext", "kpl_lab")
    yield ipython
    InteractiveShell.clear_instance()


def run(shell, line: str):
    """Run one cell; return (result, stdout, stderr, rich outputs)."""
    with capture_output() as captured:
        result = shell.run_cell(line)
    return result, captured.stdout, captured.stderr, captured.outputs


def test_tune_then_compare_the_trials(shell):
    magics = shell.magics_manager.registry["KPLMagics"]
    magics.use_widgets = True  # as in a JupyterLab kernel: curves and plots, not only text
    line = (
        "%kpl_tune steps-search toy --input data=shapes --space steps=int:2:4 --sampler grid "
        "--objective training/accuracy --trials 3 --parallelism 3 --wait"
    )
    result, out, err, outputs = run(shell, line)
    assert result.success, err
    assert "experiment steps-search: 3 trials started" in out
    # the toy's accuracy ends at (steps - 1) / steps: the most steps are best
    best = re.search(
        r"experiment steps-search succeeded: best trial (\d+) 0.75 \{'steps': 4\}, model model:toy-model:",
        out,
    )
    assert best, out
    assert "never pushed" not in err  # a warning only for a metric the toy's runs never pushed
    plots = [output for output in outputs if PLOTLY in output.data]
    assert len(plots) == 3  # history, parallel coordinates, importance
    experiment = magics.client.experiment("steps-search")
    ids = [trial["job_id"] for trial in experiment["trials"]]

    result, _, err, outputs = run(shell, f"%kpl_compare {' '.join(ids)}")
    assert result.success, result.error_in_exec
    html, text = outputs[0].data["text/html"], outputs[0].data["text/plain"]
    assert html.count("class='kpl-differs'") >= 3  # steps, accuracy final, accuracy best
    assert re.search(r"^\* steps\s+\d\s+\d\s+\d$", text, re.M)
    assert re.search(r"^  lr\s+0.1\s+0.1\s+0.1$", text, re.M)
    charts = [output for output in outputs[1:] if WIDGET_VIEW in output.data]
    assert len(charts) == 2  # training/accuracy and training/loss
    chart = magics.last_charts[0]
    assert chart.title == "training/accuracy" and chart.series == ids  # one line per job


def test_experiment_run_from_python(shell, kpl_server):
    experiment = Experiment(
        "lr-search",
        "toy",
        inputs={"data": "dataset:shapes"},
        space={"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True}},
        objective="training/loss",
        direction="minimize",
        trials=2,
        sampler="random",
        seed=0,
        client=kpl_server.client(),
    )
    seen = []
    done = experiment.run(on_update=lambda e: seen.append(e["state"]))
    assert done["state"] == "succeeded" and seen[-1] == "succeeded"
    assert [trial["state"] for trial in done["trials"]] == ["complete", "complete"]
    assert 0.001 <= done["best_params"]["lr"] <= 0.1
    figure = experiment.plot("history")
    assert figure.layout.title.text == "Optimization History Plot"


def test_an_unbounded_space_is_refused_from_python_naming_the_field(kpl_server, kpl_data):
    def start(name: str, space: dict, sampler: str = "grid", seed: int | None = None) -> BadRequest:
        experiment = Experiment(
            name,
            "toy",
            space=space,
            objective="training/loss",
            sampler=sampler,
            seed=seed,
            client=kpl_server.client(),
        )
        with pytest.raises(BadRequest) as refused:
            experiment.start()
        return refused.value

    three_million = {
        "steps": {"type": "int", "low": 1, "high": 2000},
        "lr": {"type": "float", "low": 0, "high": 1, "step": 1 / 1499},
    }
    refused = start("grid-3m", three_million)
    assert (refused.field, refused.message) == (
        "space",
        "space: the grid has 2,000 (steps) × 1,500 (lr) = 3,000,000 points; the grid sampler takes at most 10,000",
    )
    refused = start("tiny-step", {"lr": {"type": "float", "low": 0, "high": 1, "step": 1e-308}}, "tpe")
    assert refused.field == "space.lr.float.step" and "more than 10,000 steps" in refused.message
    refused = start("far", {"steps": {"type": "int", "low": 1, "high": 10**13}})
    assert refused.field == "space.steps" and "gives the grid 10,000,000,000,000 values" in refused.message
    refused = start("seeded", {"lr": {"type": "float", "low": 0, "high": 1}}, "tpe", seed=-1)
    assert refused.field == "sampler.seed"
    names = {experiment["name"] for experiment in kpl_server.client().experiments()}
    assert not names & {"grid-3m", "tiny-step", "far", "seeded"}


def test_tune_trials_are_capped_to_what_is_free_now_as_train_is(shell, kpl_server):
    client = kpl_server.client()
    total = client.devices()["capacity"]["cpu"]
    blocker = client.submit(
        "toy", "train", {"data": "shapes"}, {"steps": 100000, "pause": 0.1}, {"cpu": total - 0.5}
    )
    try:
        while client.job(blocker["id"])["state"] != "running":
            time.sleep(0.1)
        line = (
            "%kpl_tune capped-search toy --input data=shapes --space steps=int:2:3 --sampler grid "
            "--objective training/accuracy --trials 2"
        )
        result, out, err, _ = run(shell, line)
        assert result.success, err
        assert "note: cpu capped at 0.5: environment.yml asks 1 CPU, 0.5 free now" in out.splitlines()
        trials = client.experiment("capped-search")["trials"]
        assert trials and all(client.job(t["job_id"])["limits"]["cpu"] == 0.5 for t in trials)
    finally:
        client.stop_experiment("capped-search")
        client.stop(blocker["id"])
