"""kpl-lab experiment and job compare end to end: the CLI drives a search of real jobs with --follow."""

from __future__ import annotations

import json
import re
import time

import pytest

from kpl_lab.arguments import parse_space
from kpl_lab.cli import main
from kpl_lab.errors import BadRequest

from .test_documents import LAUGHS

CURVE = """\
import os, time
import kpl_helper as kh
from kpl_helper import metric

p = kh.get_parameter(default="./parameter.yml")
figure = metric.MetricFigure("score", y1_name="accuracy")
for step in range(p.steps):
    figure.push_metric(x=step + 1, y1=p.quality * (step + 1) / p.steps)
    time.sleep(p.pause)
kh.done()
"""
ENVIRONMENT = (
    "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n      memory: 256\n"
)


@pytest.fixture
def run(tmp_path, capsys, monkeypatch):
    home = str(tmp_path / "home")
    monkeypatch.setenv("KPL_LAB_HOME", home)
    algo = tmp_path / "curve"
    algo.mkdir()
    (algo / "environment.yml").write_text(ENVIRONMENT + "  cmd: python curve.py\n")
    (algo / "parameter.yml").write_text("quality: 0.5\nsteps: 3\npause: 0.0\n")
    (algo / "curve.py").write_text(CURVE)

    def run(*args):
        status = main(["--home", home, *args])
        out, err = capsys.readouterr()
        return status, out, err

    assert run("algorithm", "add", str(algo))[0] == 0
    return run


def test_parse_space():
    assert parse_space("lr=float:1e-4:0.1:log") == (
        "lr",
        {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
    )
    assert parse_space("epochs=int:1:9:2") == ("epochs", {"type": "int", "low": 1, "high": 9, "step": 2})
    assert parse_space("opt=categorical:adam,sgd") == (
        "opt",
        {"type": "categorical", "choices": ["adam", "sgd"]},
    )
    with pytest.raises(BadRequest, match="expected NAME=float"):
        parse_space("lr=0.1")


def test_yaml_the_user_gives_is_read_within_bounds(run, tmp_path):
    with pytest.raises(BadRequest, match=r"alias \*x: anchors and aliases are not accepted") as refused:
        parse_space("opt=categorical:adam,*x")
    assert refused.value.field == "space.opt"
    request = tmp_path / "laughs.yml"
    request.write_text(LAUGHS)
    search = ("--space", "quality=float:0:1", "--objective", "score/accuracy")
    status, _, err = run("experiment", "create", "laughs", "curve", "--file", str(request), *search)
    assert status == 2
    assert (
        f"{request}: anchor &a: anchors and aliases are not accepted; write the value out (line 1, column 4)"
        in err
    )
    status, _, err = run("experiment", "create", "deep", "curve", "--param", "steps=" + "[" * 2048, *search)
    assert status == 2 and "lists and mappings nest deeper than 64 levels (line 1, column 65)" in err


def test_experiment_create_follow_show_list_compare(run):
    search = ("--space", "quality=float:0:1", "--objective", "score/accuracy", "--sampler", "random")
    status, out, err = run(
        "experiment", "create", "tune", "curve", *search, "--trials", "2", "--seed", "3", "--follow"
    )
    assert status == 0, err
    assert "no earlier run of the train function of curve" in err  # the objective could not be checked
    assert [line.split()[:3] for line in out.splitlines() if " complete " in line][:2] == [
        ["trial", "0", "complete"],
        ["trial", "1", "complete"],
    ]
    assert "best:" in out
    status, out, _ = run("experiment", "show", "tune", "--json")
    shown = json.loads(out)
    assert shown["state"] == "succeeded"
    values = [trial["value"] for trial in shown["trials"]]
    assert shown["best_value"] == max(values) and len(set(values)) == 2  # each trial drew anew
    assert "tune" in run("experiment", "list")[1]
    ids = [trial["job_id"] for trial in shown["trials"]]
    status, out, _ = run("job", "compare", *ids)
    assert status == 0
    assert any(line.startswith("* quality") for line in out.splitlines())
    assert any(line.startswith("* score/accuracy final") for line in out.splitlines())
    assert any(line.startswith("  steps") for line in out.splitlines())  # the same in both
    status, _, err = run(
        "experiment", "create", "bad", "curve", "--space", "nope=float:0:1", "--objective", "score/accuracy"
    )
    assert status == 2 and "nope" in err
    assert run("experiment", "resume", "tune")[0] == 2  # its budget is spent
    status, out, _ = run("experiment", "resume", "tune", "--trials", "3", "--follow")
    assert status == 0 and "trial 2 complete" in out


def test_experiment_stop_and_resume(run):
    slow = ("--param", "pause=0.5", "--param", "steps=20")
    args = (
        "--space",
        "quality=categorical:0.2,0.4",
        "--objective",
        "accuracy",
        "--parallelism",
        "2",
        "--trials",
        "2",
    )
    assert run("experiment", "create", "slow", "curve", *args, *slow)[0] == 0
    status, out, _ = run("experiment", "stop", "slow", "--json")
    stopped = json.loads(out)
    assert stopped["state"] == "stopped" and [t["state"] for t in stopped["trials"]] == ["stopped", "stopped"]
    assert run("experiment", "stop", "slow")[0] == 2
    status, out, _ = run("experiment", "resume", "slow", "--json")
    assert json.loads(out)["state"] == "running"


SCORER_ENVIRONMENT = (
    "version: 1\nimage:\n  runs: []\n"
    "train:\n  resource:\n    limits:\n      cpu: 1\n      memory: 256\n"
    "  outputs:\n    - key: model\n      name: scorer\n  cmd: python train.py\n"
    "test:\n  resource:\n    limits:\n      cpu: 1\n      memory: 256\n"
    "  inputs:\n    - key: data\n      name: data\n    - key: model\n      name: model\n  cmd: python test.py\n"
)
SCORER_TRAIN = (
    "import os, kpl_helper as kh\np = kh.get_parameter(default='./parameter.yml')\n"
    "open(os.path.join(kh.io.get_output_path('model', '/x'), 'q.txt'), 'w').write(str(p.quality))\nkh.done()\n"
)
SCORER_TEST = (
    "import os, kpl_helper as kh\nfrom kpl_helper import result\n"
    "q = float(open(os.path.join(kh.io.get_input_path('model', '/x'), 'q.txt')).read())\n"
    "result.send_scalar_result(accuracy=q)\nkh.done()\n"
)


def test_model_evaluate_follow(run, tmp_path):
    from kpl_dataset import BasicType, WriteOnlyDataset

    folder = tmp_path / "scorer"
    folder.mkdir()
    for name, text in (
        ("environment.yml", SCORER_ENVIRONMENT),
        ("parameter.yml", "quality: 0.5\n"),
        ("train.py", SCORER_TRAIN),
        ("test.py", SCORER_TEST),
    ):
        (folder / name).write_text(text)
    assert run("algorithm", "add", str(folder))[0] == 0
    writer = WriteOnlyDataset(str(tmp_path / "data"), "test", {"x": BasicType.Int})
    writer.write({"x": 1})
    writer.close()
    assert run("dataset", "add", "holdout", str(tmp_path / "data"))[0] == 0
    models = []
    for quality in ("0.25", "0.75"):
        status, out, err = run("job", "submit", "scorer", "--param", f"quality={quality}", "--json")
        assert status == 0, err
        job_id = json.loads(out)["id"]
        while (job := json.loads(run("job", "show", job_id, "--json")[1]))["state"] in ("queued", "running"):
            time.sleep(0.1)
        models.append(job["outputs"]["model"]["registered"])
    args = ["model", "evaluate", "scorer", "--data", "dataset:holdout", "--follow"]
    status, out, err = run(*args, "--model", models[0], "--model", models[1])
    assert status == 0, err
    assert re.search(r"^\* result accuracy\s+0.25\s+0.75$", out, re.M), out
    assert re.search(r"^\* input model\s+scorer-model:\S+\s+scorer-model:\S+$", out, re.M), out
