"""A training script written for kpl-helper 0.1.3 (seed 001's examples) runs unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import pickle
import kpl_helper as helper
from kpl_helper import metric
from kpl_helper.progress import send_progress

if __name__ == "__main__":
    helper.ready()
    parameter = helper.get_parameter(default="./parameter.yml")
    print(parameter.KEY1.KEY2)
    data_path = helper.io.get_input_path(key="data", default="local-data")
    save_path = helper.io.get_output_path(key="save_model", default="local-out")
    print(data_path, save_path)
    pickle.loads(pickle.dumps(parameter))
    figure = metric.MetricFigure("title", y1_name="loss")
    iter_num = 100
    for no in range(1, iter_num):
        ce_loss = 10.0 / no
        figure.push_metric(x=no, y1=ce_loss)
        if no % 25 == 0:
            send_progress(float(no) / iter_num)
    with open(save_path + "/model.txt", "w") as f:
        f.write("weights")
    helper.save_model(save_path, "my-model", "trained")
    helper.done()
"""


def _write_algorithm(folder):
    (folder / "train.py").write_text(SCRIPT)
    (folder / "parameter.yml").write_text("KEY1:\n  KEY2: VALUE\n")


def test_outside_the_platform(tmp_path):
    _write_algorithm(tmp_path)
    (tmp_path / "local-out").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KPL_")}
    process = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert process.returncode == 0, process.stderr
    assert "VALUE\nlocal-data local-out\n" in process.stdout
    assert "not in a platform job" in process.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local-out", "parameter.yml", "train.py"]


def test_inside_a_job(job):
    (job.inputs / "data").mkdir()
    _write_algorithm(job.root)
    job.env["KPL_ENV_PARAMETER"] = json.dumps({"KEY1": {"KEY2": "FROM-JOB"}})
    process = job.run((job.root / "train.py").read_text())
    assert process.returncode == 0, process.stderr
    assert "FROM-JOB" in process.stdout
    found = job.events()
    types = [e["type"] for e in found]
    assert types[0] == "ready" and types[-1] == "done"
    assert types.count("metric") == 99
    assert [e["value"] for e in found if e["type"] == "progress"] == [0.25, 0.5, 0.75]
    (saved,) = [e for e in found if e["type"] == "save"]
    assert saved["path"] == str(job.outputs / "save_model")
    assert (job.outputs / "save_model" / "model.txt").read_text() == "weights"
    metrics = [e for e in found if e["type"] == "metric"]
    assert [m["x"] for m in metrics] == list(range(1, 100))
    assert metrics[9]["values"] == {"loss": 1.0}
