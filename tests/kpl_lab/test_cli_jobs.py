"""kpl-lab job commands end to end: real algorithm processes reporting through kpl_helper."""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest

from kpl_lab.cli import main
from kpl_lab.cli.job import status_line
from kpl_lab.text import progress_bar, sparkline

ENVIRONMENT = """\
version: 1
image:
  runs: []
train:
  resource:
    limits:
      cpu: 1
      memory: 512
  inputs:
    - key: data
      name: data
    - key: checkpoint
      name: checkpoint
  outputs:
    - key: model
      name: net
  cmd: python train.py
"""

TRAIN = """\
import os, time
import kpl_helper
from kpl_helper import io, metric, progress

p = kpl_helper.get_parameter(default="./parameter.yml")
data = io.get_input_path(key="data", default="./data")
try:
    checkpoint = io.get_input_path(key="checkpoint", default="./none")
except FileNotFoundError:  # optional input
    checkpoint = "./none"
out = io.get_output_path(key="model", default="./out")
start = 0
if os.path.exists(os.path.join(checkpoint, "weights.txt")):
    start = int(open(os.path.join(checkpoint, "weights.txt")).read())
print("data parts", sorted(os.listdir(data)), "resumed at", start, flush=True)
fig = metric.MetricFigure("training", y1_name="loss", y2_name="accuracy")
for step in range(start, start + p.steps):
    fig.push_metric(x=step, y1=1.0 / (step + 1), y2=step / 10)
    progress.send_progress(p.report * (step - start + 1) / p.steps)
    print("step", step, flush=True)
    time.sleep(p.pause)
with open(os.path.join(out, "weights.txt"), "w") as f:
    f.write(str(start + p.steps))
if p.fail:
    raise SystemExit("diverged: loss is nan")
kpl_helper.done()
"""


@pytest.fixture
def setup(tmp_path, capsys):
    from kpl_dataset import BasicType, WriteOnlyDataset

    home = str(tmp_path / "home")
    algo = tmp_path / "toy"
    algo.mkdir()
    (algo / "environment.yml").write_text(ENVIRONMENT)
    (algo / "parameter.yml").write_text("steps: 3\npause: 0.0\nfail: false\nreport: 1.0\n")
    (algo / "train.py").write_text(TRAIN)
    data = tmp_path / "data"
    writer = WriteOnlyDataset(str(data), "train", {"x": BasicType.Int})
    for i in range(4):
        writer.write({"x": i})
    writer.close()

    def run(*args):
        status = main(["--home", home, *args])
        out, err = capsys.readouterr()
        return status, out, err

    assert run("dataset", "add", "digits", str(data))[0] == 0
    assert run("algorithm", "add", str(algo))[0] == 0
    return run


def job_id(run, *args):
    status, out, err = run(*args, "--json")
    assert status == 0, err
    return json.loads(out)["id"]


def wait_final(run, jid):
    while True:
        data = json.loads(run("job", "show", jid, "--json")[1])
        if data["state"] not in ("queued", "running"):
            return data
        time.sleep(0.2)


def test_submit_follow_show_logs_metrics(setup):
    run = setup
    status, out, err = run("job", "submit", "toy", "--input", "data=digits", "--param", "steps=4", "--follow")
    assert status == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith("submitted job ") and "toy:" in lines[0]
    jid = lines[0].split()[2]
    assert any(line.startswith(f"{jid} succeeded [####") and "loss=0.25" in line for line in lines)
    assert f"job {jid} succeeded after" in out
    assert "output model: model:toy-model:" in out  # <algorithm>-<output key>

    status, out, _ = run("job", "show", jid)
    assert "state:       succeeded" in out and "exit code:   0" in out
    assert "inputs:      data=dataset:digits:" in out
    assert '"steps": 4' in out and "cpu 1, memory 512 MB" in out
    curve = [line for line in out.splitlines() if line.startswith("loss ")]
    assert curve and "training" in curve[0] and "█" in curve[0] and "0.25" in curve[0]
    assert "buckets" not in out and "envelopes" not in out  # summaries, never the raw figures
    shown = json.loads(run("job", "show", jid, "--json")[1])
    assert "buckets" not in json.dumps(shown)
    assert shown["figures"] == ["training"] and {"saves", "results", "last_log_lines"} <= shown.keys()
    loss = next(f for f in shown["metric_summaries"] if f["series"] == "loss")
    assert loss == {
        "figure": "training",
        "series": "loss",
        "points": 4,
        "last": 0.25,
        "min": 0.25,
        "max": 1.0,
    }

    status, out, _ = run("job", "logs", jid)
    assert "resumed at 0" in out and "step 3" in out

    status, out, _ = run("job", "metrics", jid, "--json")
    training = json.loads(out)["figures"]["training"]
    assert [p[1] for p in training["loss"]] == [1.0, 0.5, pytest.approx(1 / 3), 0.25]
    assert training["accuracy"][-1] == [3.0, 0.3]

    status, out, _ = run("job", "list")
    assert out.splitlines()[2].split()[:2] == [jid, "succeeded"]

    status, out, _ = run("model", "show", "toy-model", "--json")
    lineage = json.loads(out)["lineage"]
    assert lineage["job_id"] == jid and lineage["inputs"]["data"].startswith("digits:")


def test_list_and_show_agree_on_a_finished_jobs_progress(setup):
    run = setup
    # the job's last report says 99 %; it succeeded, so every view says 100 %
    jid = job_id(run, "job", "submit", "toy", "--input", "data=digits", "--param", "report=0.99")
    assert wait_final(run, jid)["progress"] == 1.0
    listed = next(line for line in run("job", "list")[1].splitlines() if line.startswith(jid))
    assert listed.split()[4] == "100%"
    assert "[########################] 100%" in run("job", "show", jid)[1]
    assert json.loads(run("job", "list", "--json")[1])[0]["progress"] == 1.0


def test_failed_job_shows_reason_and_last_lines(setup):
    run = setup
    status, out, _ = run("job", "submit", "toy", "--input", "data=digits", "--param", "fail=true", "--follow")
    assert status == 1
    assert "failed" in out and "last log lines:" in out and "diverged: loss is nan" in out
    jid = out.split()[2]
    data = json.loads(run("job", "show", jid, "--json")[1])
    assert data["state"] == "failed" and data["exit_code"] == 1


def test_stop_copy_rerun_resume(setup):
    run = setup
    jid = job_id(
        run, "job", "submit", "toy", "--input", "data=digits", "--param", "steps=200", "--param", "pause=0.2"
    )
    status, out, _ = run("job", "stop", jid)
    assert status == 0 and out.startswith(f"job {jid} stopped")
    status, _, err = run("job", "stop", jid)
    assert status == 2 and "already ended" in err

    copied = job_id(run, "job", "copy", jid, "--param", "steps=2", "--param", "pause=0", "--memory", "256")
    data = wait_final(run, copied)
    assert data["state"] == "succeeded" and data["copied_from"] == jid
    assert data["parameters"]["steps"] == 2 and data["limits"]["memory"] == 256

    again = job_id(run, "job", "rerun", copied)
    assert wait_final(run, again)["parameters"] == data["parameters"]

    resumed = job_id(run, "job", "resume", copied)
    final = wait_final(run, resumed)
    assert final["state"] == "succeeded" and final["resumed_from"] == copied
    assert final["inputs"]["checkpoint"]["kind"] == "model"
    assert "resumed at 2" in run("job", "logs", resumed)[1]


def test_show_list_and_follow_say_why_a_queued_job_waits(setup, tmp_path):
    import io
    import threading

    from kpl_lab.cli.job import follow_job
    from kpl_lab.cli.platforms import LocalPlatform
    from kpl_lab.platform import Platform

    run = setup
    total = os.cpu_count()
    slow = ("--param", "steps=100000", "--param", "pause=0.1")
    blocker = job_id(run, "job", "submit", "toy", "--input", "data=digits", *slow, "--cpu", str(total))
    queued = job_id(run, "job", "submit", "toy", "--input", "data=digits", "--param", "steps=1")
    waits = f"waits for 1 CPU (0 free of {total}); held by job {blocker}; 1st of 1 in the queue"
    status, out, _ = run("job", "show", queued)
    assert status == 0 and re.search(rf"^waits: +{re.escape(waits)}$", out, re.M)
    assert json.loads(run("job", "show", queued, "--json")[1])["queue"]["message"] == waits
    assert re.search(rf"^{queued}\s+queued\s+.*waits for 1 CPU", run("job", "list")[1], re.M)

    # following it (as `job submit --follow` does): the reason on a line of its own
    platform = Platform(home=str(tmp_path / "home"))  # not the CLI: each of its starts reconciles
    followed = io.StringIO()
    try:
        local = LocalPlatform(platform, "default")
        follower = threading.Thread(target=follow_job, args=(local, queued, followed))
        follower.start()
        while f"{queued} {waits}" not in followed.getvalue():
            time.sleep(0.1)
        platform.jobs.stop("default", blocker)
        follower.join()
        assert platform.jobs.get("default", queued).state == "succeeded"
    finally:
        platform.close()
    lines = followed.getvalue().splitlines()
    assert lines.index(f"{queued} {waits}") < lines.index(next(x for x in lines if "succeeded after" in x))
    assert json.loads(run("job", "show", queued, "--json")[1])["queue"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--input", "data=nothing"), "input 'data': no dataset or model 'nothing'"),
        (("--input", "data"), "expected KEY=REF"),
        (("--param", "steps=abc"), 'steps: expected an integer, got "abc"'),
        (
            ("--param", "steps=abc", "--param", "pause=x"),
            "2 problems in the parameters: parameters.steps: expected an integer",
        ),
        (("--memory", "0"), "resources.memory: Input should be greater than 0"),
        (("--function", "deploy"), "no deploy function"),
        (("--cpu", "100000"), "asks 100000 CPUs; this machine has "),
    ],
)
def test_submit_errors(setup, args, message):
    status, out, err = setup("job", "submit", "toy", *args)
    assert status == 2 and message in err and "Traceback" not in err


def test_helpers():
    assert progress_bar(0.5, width=10) == "[#####.....]  50%"
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([2, 2]) == "▅▅"
    assert len(sparkline(list(range(1000)), width=30)) == 30

    job = {"id": "abc", "state": "running", "progress": 0.25, "eta_seconds": 90}
    line = status_line(job, {"training": {"loss": 0.5}})
    assert line == "abc running   [######..................]  25%  1m30s left  loss=0.5"


def test_ctrl_c_stops_following_not_the_job(setup, monkeypatch):
    import kpl_lab.cli.job

    real_sleep = kpl_lab.cli.job.time.sleep

    def interrupt(seconds):
        # Ctrl-C while the command waits to redraw; other waits (database, supervisor) go on.
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("kpl_lab.cli") and seconds == kpl_lab.cli.job.FOLLOW_INTERVAL:
            raise KeyboardInterrupt
        real_sleep(seconds)

    run = setup
    monkeypatch.setattr(kpl_lab.cli.job.time, "sleep", interrupt)
    args = ("job", "submit", "toy", "--input", "data=digits", "--param", "steps=200", "--param", "pause=0.2")
    status, out, err = run(*args, "--follow")
    monkeypatch.undo()
    assert status == 130
    jid = out.split()[2]
    assert f"stopped following; job {jid} goes on" in err
    assert json.loads(run("job", "show", jid, "--json")[1])["state"] == "running"
    assert run("job", "stop", jid)[0] == 0


def test_metrics_plot_is_a_png_with_the_curves(setup, tmp_path):
    from PIL import Image

    run = setup
    status, out, err = run(
        "job", "submit", "toy", "--input", "data=digits", "--param", "steps=20", "--follow"
    )
    assert status == 0, out + err
    jid = out.split()[2]
    target = tmp_path / "curves.png"
    status, out, err = run("job", "metrics", jid, "--plot", str(target))
    assert status == 0, err
    assert out.strip() == f"wrote {target}"
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(target) as image:
        image.verify()
    with Image.open(target) as image:
        pixels = image.convert("RGB")
        width, height = pixels.size
        colours = [pixels.getpixel((x, y)) for x in range(0, width, 2) for y in range(0, height, 2)]
    # matplotlib's first two line colours, series in name order: accuracy (C0 blue), loss (C1 orange)
    blue = sum(1 for r, g, b in colours if abs(r - 31) < 40 and abs(g - 119) < 40 and b > 150)
    orange = sum(1 for r, g, b in colours if r > 220 and 100 < g < 160 and b < 60)
    assert blue > 50 and orange > 50, (blue, orange)
    assert not list(tmp_path.glob(".curves.png.*"))  # written through a temporary name

    status, _, err = run("job", "metrics", jid, "--plot", str(tmp_path / "nowhere" / "x.png"))
    assert status == 2 and "does not exist" in err


def test_cli_start_finishes_unwatched_jobs_and_starts_queued_ones(setup, tmp_path):
    import os
    import signal

    from kpl_lab.engine.runfolder import is_alive
    from kpl_lab.platform import Platform

    run = setup
    cpus = str(os.cpu_count())  # each job takes the whole machine: the second one waits
    slow = job_id(
        run,
        "job",
        "submit",
        "toy",
        "--input",
        "data=digits",
        "--param",
        "steps=500",
        "--param",
        "pause=0.2",
        "--cpu",
        cpus,
    )
    queued = job_id(run, "job", "submit", "toy", "--input", "data=digits", "--cpu", cpus)
    platform = Platform(home=str(tmp_path / "home"))
    try:
        assert platform.jobs.get("default", queued).state == "queued"
        while not (handle := platform.jobs.get("default", slow).handle).get("pid"):
            time.sleep(0.05)
        os.kill(handle["supervisor_pid"], signal.SIGKILL)  # nothing watches the job any more
        os.killpg(handle["pgid"], signal.SIGKILL)
        while is_alive(handle["pid"], handle["pid_start"]) or is_alive(
            handle["supervisor_pid"], handle["supervisor_start"]
        ):
            time.sleep(0.05)
        assert platform.jobs.get("default", slow).state == "running"  # as far as the database knows
    finally:
        platform.close()

    status, out, _ = run("job", "list")  # any command: the CLI reconciles first
    assert status == 0
    states = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:]}
    assert states[slow] == "lost"
    assert states[queued] in ("running", "succeeded")
    assert wait_final(run, queued)["state"] == "succeeded"
