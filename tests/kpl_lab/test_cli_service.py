"""`kpl-lab` through the REST API (what it does in a notebook under the hub) answers as it does locally.

The server of `kpl_server` stands in for the hub's shared service: `KPL_SERVICE_URL` and
`JUPYTERHUB_API_TOKEN` point the CLI at it, and the same commands run with `--home` on the
server's own home folder give the local answer to compare with. They work in a project of
their own, so the jobs and models they make are not the other client tests'.
"""

from __future__ import annotations

import json
import re

import pytest

from kpl_lab.cli import main
from kpl_lab.cli.platforms import LocalPlatform, ServicePlatform, open_platform
from kpl_lab.client import Client

from .conftest import ENVIRONMENT, INFER, TRAIN, _png, _zip

PROJECT = "cli"
JUDGE_ENVIRONMENT = "version: 1\nimage:\n  runs: []\n" + "".join(
    f"{function}:\n  resource:\n    limits:\n      cpu: 1\n      memory: 256\n  inputs:\n"
    "    - key: data\n      name: data\n    - key: model\n      name: model\n  cmd: python judge.py\n"
    for function in ("infer", "test")
)
JUDGE = """\
import os, kpl_helper as kh
from kpl_helper import result

steps = int(open(os.path.join(kh.io.get_input_path("model", "/x"), "weights.txt")).read())
print("judged", sorted(os.listdir(kh.io.get_input_path("data", "/x"))), flush=True)
result.send_scalar_result(accuracy=steps / 10)
kh.done()
"""


@pytest.fixture(scope="module")
def cli_data(kpl_server, tmp_path_factory) -> None:
    """Upload the toy algorithm and a dataset of two PNG images into the project `cli`."""
    base = tmp_path_factory.mktemp("cli-data")
    client = Client(kpl_server.url, kpl_server.token, project=PROJECT)
    files = {"environment.yml": ENVIRONMENT, "parameter.yml": "steps: 3\npause: 0.0\nlr: 0.1\n"}
    files |= {"train.py": TRAIN, "infer.py": INFER}
    toy = _zip(base / "toy.zip", {f"toy/{name}": text.encode() for name, text in files.items()})
    client.upload_algorithm(toy, name="toy", description="a toy that learns nothing")
    shapes = {f"images/{i}.png": _png(colour) for i, colour in enumerate([(255, 0, 0), (0, 0, 255)])}
    client.upload_dataset(_zip(base / "shapes.zip", shapes), "shapes", description="coloured squares")


@pytest.fixture
def cli(kpl_server, cli_data, monkeypatch, capsys):
    """Return run(*args, service=True): the CLI's exit status, output and errors, in project `cli`."""
    for name in ("KPL_API_URL", "KPL_API_TOKEN", "KPL_PROJECT", "KPL_LAB_HOME"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str, service: bool = True) -> tuple[int, str, str]:
        if service:
            monkeypatch.setenv("KPL_SERVICE_URL", kpl_server.url + "kpl/")
            monkeypatch.setenv("JUPYTERHUB_API_TOKEN", kpl_server.token)
            status = main(["--project", PROJECT, *args])
        else:
            monkeypatch.delenv("KPL_SERVICE_URL", raising=False)
            monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
            status = main(["--home", str(kpl_server.home), "--project", PROJECT, *args])
        out, err = capsys.readouterr()
        return status, out, err

    return run


def _without_paths(data):
    """Drop the local folders (the service's folders are not the notebook's to read)."""
    if isinstance(data, list):
        return [_without_paths(item) for item in data]
    if isinstance(data, dict):
        return {key: _without_paths(value) for key, value in data.items() if key != "path"}
    return data


def test_the_service_is_picked_where_client_would_pick_it(kpl_server, monkeypatch):
    class Args:
        home = database_url = project = None

    monkeypatch.setenv("KPL_SERVICE_URL", kpl_server.url + "kpl/")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", kpl_server.token)
    monkeypatch.setenv("KPL_PROJECT", "vision")
    service = open_platform(Args)
    assert isinstance(service, ServicePlatform)
    assert service.client.url == kpl_server.url + "kpl/api/" and service.project == "vision"
    Args.home = str(kpl_server.home)  # an explicit home is this machine's platform
    local = open_platform(Args)
    try:
        assert isinstance(local, LocalPlatform)
    finally:
        local.close()
    monkeypatch.delenv("KPL_SERVICE_URL")
    Args.home = None
    monkeypatch.setenv("KPL_LAB_HOME", str(kpl_server.home))
    local = open_platform(Args)
    try:
        assert isinstance(local, LocalPlatform)
    finally:
        local.close()


def test_catalog_commands_answer_alike(cli):
    for args in (
        ("dataset", "list"),
        ("algorithm", "list"),
        ("dataset", "show", "shapes"),
        ("algorithm", "show", "toy"),
    ):
        status, remote, err = cli(*args)
        assert status == 0, err
        local = cli(*args, service=False)[1]
        assert remote == "\n".join(line for line in local.splitlines() if not line.startswith("path:")) + "\n"
        assert "shapes" in remote or "toy" in remote
        remote_json = json.loads(cli(*args, "--json")[1])
        assert remote_json == _without_paths(json.loads(cli(*args, "--json", service=False)[1]))


def test_a_job_submitted_followed_and_shown_through_the_service(cli):
    status, out, err = cli("job", "submit", "toy", "--input", "data=shapes", "--param", "steps=4", "--follow")
    assert status == 0, out + err
    job_id = out.split()[2]
    assert f"job {job_id} succeeded after" in out and "loss=0.25" in out
    assert "output model: model:" in out
    for args in (
        ("job", "show", job_id),
        ("job", "show", job_id, "--json"),
        ("job", "logs", job_id),
        ("job", "logs", job_id, "--follow"),
        ("job", "list"),
        ("job", "metrics", job_id),
        ("job", "metrics", job_id, "--json"),
        ("model", "list"),
        ("model", "list", "--json"),
    ):
        status, remote, err = cli(*args)
        assert status == 0, err
        local = cli(*args, service=False)[1]
        if args[-1] == "--json":
            assert json.loads(remote) == _without_paths(json.loads(local))
        else:
            assert remote == local
    shown = cli("job", "show", job_id)[1]
    assert "state:       succeeded" in shown and "training" in shown
    assert "step 3" in cli("job", "logs", job_id)[1]
    listed = cli("job", "list")[1]
    assert job_id in listed and "100%" in listed


def test_a_job_copied_then_stopped_through_the_service(cli):
    status, out, err = cli("job", "submit", "toy", "--input", "data=shapes", "--json")
    assert status == 0, err
    first = json.loads(out)["id"]
    status, out, err = cli("job", "copy", first, "--param", "steps=150", "--follow")
    assert status == 0, err
    assert out.startswith("job ") and f"copies job {first}" in out
    longer = out.split()[1]
    assert cli("job", "show", longer)[1] == cli("job", "show", longer, service=False)[1]  # 150 points each
    status, out, err = cli("job", "copy", first, "--param", "steps=500", "--param", "pause=0.2")
    assert status == 0, err
    copy = out.split()[1]
    status, out, err = cli("job", "stop", copy)
    assert status == 0, err
    assert out.startswith(f"job {copy} stopped")
    assert json.loads(cli("job", "show", copy, "--json")[1])["parameters"]["steps"] == 500


def test_an_algorithm_folder_is_uploaded_and_deleted_through_the_service(cli, tmp_path):
    folder = tmp_path / "echo"
    folder.mkdir()
    (folder / "environment.yml").write_text(
        "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n"
        "      memory: 256\n  cmd: python train.py\n"
    )
    (folder / "train.py").write_text("print('hello')\n")
    status, out, err = cli("algorithm", "add", str(folder), "--description", "says hello")
    assert status == 0, err
    assert out.startswith("added algorithm echo:") and "in project" in out
    assert "says hello" in cli("algorithm", "show", "echo")[1]
    status, out, err = cli("algorithm", "delete", "echo")
    assert status == 0, err
    assert out.startswith("deleted algorithm echo:")
    status, _, err = cli("algorithm", "show", "echo")
    assert status == 2 and err.startswith("kpl-lab: error: ") and "Traceback" not in err


def test_a_model_and_a_dataset_folder_are_uploaded_through_the_service(cli, tmp_path):
    (tmp_path / "weights.txt").write_text("1")
    status, out, err = cli("model", "add", "net", str(tmp_path / "weights.txt"), "--json")
    assert status == 0, err
    added = json.loads(out)
    assert added["files"] == ["weights.txt"] and added["name"] == "net"
    local = json.loads(cli("model", "show", "net", "--json", service=False)[1])
    assert local["ref"] == added["ref"] and local["files"] == ["weights.txt"]
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("one")
    (folder / "sub" / "b.txt").write_text("two")
    status, out, err = cli("dataset", "add", "notes", str(folder), "--description", "two notes")
    assert status == 0, err
    assert out.startswith("added dataset notes:") and "in project cli" in out
    assert json.loads(cli("dataset", "show", "notes", "--json")[1])["record_count"] == 2
    status, _, err = cli("model", "add", "net", str(tmp_path / "missing"))
    assert status == 2 and "missing: no such file or folder" in err


def test_job_compare_and_model_commands_through_the_service(cli, tmp_path):
    ids = []
    for steps in ("2", "3"):
        status, out, err = cli("job", "submit", "toy", "--input", "data=shapes", "--param", f"steps={steps}")
        assert status == 0, err
        ids.append(out.split()[2])
    for job_id in ids:
        assert cli("job", "logs", job_id, "--follow")[0] == 0  # waits for the end
    status, remote, err = cli("job", "compare", *ids)
    assert status == 0, err
    assert remote == cli("job", "compare", *ids, service=False)[1]
    assert "* steps" in remote
    assert json.loads(cli("job", "compare", *ids, "--json")[1]) == json.loads(
        cli("job", "compare", *ids, "--json", service=False)[1]
    )

    model = json.loads(cli("job", "show", ids[0], "--json")[1])["outputs"]["model"]["registered"]
    name, version = model.removeprefix("model:").split(":")
    status, out, err = cli("model", "alias", f"{name}:{version}", "production")
    assert status == 0, err
    assert out == f"model {name}@production -> {name}:{version}\n"
    assert json.loads(cli("model", "show", f"{name}@production", "--json")[1])["version"] == version
    status, out, err = cli("model", "alias", f"{name}@production", "best")  # an alias names a version too
    assert status == 0, err
    assert out == f"model {name}@best -> {name}:{version}\n"
    assert cli("model", "alias", f"{name}@production", "best", service=False)[1] == out
    status, remote, err = cli("model", "show", f"{name}@production", "--structure")
    assert status == 0, err
    assert remote.startswith(f"model {name}:{version}\n") and "weights.txt" in remote
    assert remote == cli("model", "show", f"{name}@production", "--structure", service=False)[1]

    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "environment.yml").write_text(JUDGE_ENVIRONMENT)
    (judge / "judge.py").write_text(JUDGE)
    assert cli("algorithm", "add", str(judge))[0] == 0
    status, out, err = cli(
        "model", "infer", f"{name}@production", "shapes", "--algorithm", "judge", "--follow"
    )
    assert status == 0, out + err
    job_id = out.split()[2]
    assert f"({name}:{version} infers shapes:" in out and f"job {job_id} succeeded" in out
    inferred = json.loads(cli("job", "show", job_id, "--json")[1])
    assert inferred["function"] == "infer" and inferred["inputs"]["model"]["ref"] == f"model:{name}:{version}"

    other = json.loads(cli("job", "show", ids[1], "--json")[1])["outputs"]["model"]["registered"]
    evaluate = ("model", "evaluate", "judge", "--data", "dataset:shapes", "--follow")
    status, out, err = cli(*evaluate, "--model", f"{name}@production", "--model", other)
    assert status == 0, out + err
    assert re.search(r"^\* result accuracy\s+0.2\s+0.3$", out, re.M), out

    status, out, err = cli("model", "unalias", name, "production")
    assert status == 0, err
    assert out == f"removed model alias {name}@production (was {name}:{version})\n"
    status, _, err = cli("model", "show", f"{name}@production")
    assert status == 2 and "production" in err and "Traceback" not in err


def test_a_pipeline_validated_run_and_shown_through_the_service(cli, tmp_path):
    file = tmp_path / "copy.kpl-pipeline.yaml"
    file.write_text(
        "version: 1\nname: copy-shapes\nnodes:\n"
        "  raw:  {type: dataset, dataset: shapes}\n"
        "  save: {type: save_dataset, input: raw, name: shapes-copy}\n"
    )
    status, remote, err = cli("pipeline", "validate", str(file))
    assert status == 0, err
    assert remote == cli("pipeline", "validate", str(file), service=False)[1]
    assert f"{file}: valid (2 nodes)" in remote
    status, out, err = cli("pipeline", "run", str(file), "--wait")
    assert status == 0, out + err
    lines = out.splitlines()
    run_id = lines[0].removeprefix("pipeline run ")
    assert "save: succeeded" in lines and lines[-1] == f"pipeline run {run_id} succeeded"
    status, out, err = cli("pipeline", "runs")
    assert status == 0, err
    assert run_id in out and "copy-shapes" in out
    for args in (("pipeline", "show", run_id), ("pipeline", "runs", "--json")):
        status, remote, err = cli(*args)
        assert status == 0, err
        assert remote == cli(*args, service=False)[1]
    assert "save_dataset" in cli("pipeline", "show", run_id)[1]
    assert json.loads(cli("dataset", "show", "shapes-copy", "--json")[1])["record_count"] == 2
    status, _, err = cli("pipeline", "stop", run_id)  # already finished
    assert status == 2 and "Traceback" not in err


def test_an_experiment_created_shown_and_stopped_through_the_service(cli):
    search = ("--space", "lr=float:0.01:1", "--objective", "training/loss", "--direction", "minimize")
    status, out, err = cli("experiment", "create", "tune", "toy", "--input", "data=shapes", *search,
                           "--param", "steps=300", "--param", "pause=0.05", "--trials", "3")  # fmt: skip
    assert status == 0, err
    assert "experiment: tune" in out and "state:      running" in out
    status, out, err = cli("experiment", "stop", "tune")
    assert status == 0, err
    assert "state:      stopped" in out
    for args in (
        ("experiment", "show", "tune"),
        ("experiment", "list"),
        ("experiment", "show", "tune", "--json"),
    ):
        status, remote, err = cli(*args)
        assert status == 0, err
        assert remote == cli(*args, service=False)[1]
    shown = json.loads(cli("experiment", "list", "--json")[1])[0]
    assert shown["name"] == "tune" and shown["state"] == "stopped" and shown["searched_seconds"] > 0
    status, out, err = cli("experiment", "resume", "tune", "--trials", "1", "--json")
    assert status == 0, err
    assert json.loads(out)["state"] == "running"
    assert "state:      stopped" in cli("experiment", "stop", "tune")[1]
    for trial in json.loads(cli("experiment", "show", "tune", "--json")[1])["trials"]:
        assert cli("job", "logs", trial["job_id"], "--follow")[0] == 0  # its resources free again


def test_a_deployment_created_asked_and_deleted_through_the_service(cli, tmp_path):
    from .serving.conftest import ENVIRONMENT as SERVE_ENVIRONMENT
    from .serving.conftest import SERVE

    serve = tmp_path / "toy-serve"
    serve.mkdir()
    (serve / "environment.yml").write_text(SERVE_ENVIRONMENT)
    (serve / "serve.py").write_text(SERVE)
    assert cli("algorithm", "add", str(serve))[0] == 0
    label = tmp_path / "cat"
    label.mkdir()
    (label / "label.txt").write_text("cat")
    model = json.loads(cli("model", "add", "pet", str(label), "--json")[1])["ref"]
    try:
        status, out, err = cli(
            "deployment", "create", "pets", "--model", model, "--algorithm", "toy-serve", "--wait"
        )
        assert status == 0, err
        assert out == f"deployment pets: {model} on 1 replica(s), ready\n"
        image = tmp_path / "img.png"
        image.write_bytes(b"img-0")
        status, out, err = cli("deployment", "predict", "pets", str(image))
        assert status == 0, err
        assert json.loads(out)["class_name"] == "cat" and json.loads(out)["model_version"] == model
        (tmp_path / "bad.txt").write_text("not an image")
        status, out, err = cli("deployment", "predict", "pets", str(tmp_path / "bad.txt"))
        assert status == 2 and out == "" and "not an image (text/plain)" in err
        status, remote, err = cli("deployment", "show", "pets", "--json")
        assert status == 0, err
        shown = json.loads(remote)
        assert shown["state"] == "ready" and shown["metrics"][model]["requests"] == 2
        for args in (("deployment", "show", "pets"), ("deployment", "list")):
            status, remote, err = cli(*args)
            assert status == 0, err
            assert remote == cli(*args, service=False)[1]
        assert "loaded cat" in cli("deployment", "logs", "pets")[1]
        status, out, err = cli("deployment", "key", "create", "pets", "--json")
        assert status == 0, err
        key = json.loads(out)
        assert key["key"].startswith("kpldk_") and key["key"].startswith(key["prefix"])
        listed = json.loads(cli("deployment", "key", "list", "pets", "--json", service=False)[1])
        assert [k["id"] for k in listed] == [key["id"]]
        status, out, err = cli("deployment", "key", "revoke", "pets", key["id"])
        assert status == 0 and out == f"key {key['id']} of deployment pets revoked\n", err
        assert json.loads(cli("deployment", "key", "list", "pets", "--json")[1]) == []
        (label / "label.txt").write_text("dog")
        dog = json.loads(cli("model", "add", "pet", str(label), "--json")[1])["ref"]
        canary = ("--model", dog, "--weight", "100", "--algorithm", "toy-serve", "--wait")
        status, out, err = cli("deployment", "canary", "pets", *canary)
        assert status == 0, err
        assert out == f"deployment pets: canary {dog} gets 100 % of requests\n"
        status, out, err = cli("deployment", "promote", "pets")
        assert status == 0, err
        assert out == f"deployment pets: {dog} is production\n"
        answer = json.loads(cli("deployment", "predict", "pets", str(image))[1])
        assert (answer["class_name"], answer["model_version"]) == ("dog", dog)
    finally:
        status, out, err = cli("deployment", "delete", "pets")
    assert status == 0 and out == "deployment pets deleted\n", err
    assert cli("deployment", "list", "--json")[1] == "[]\n"
