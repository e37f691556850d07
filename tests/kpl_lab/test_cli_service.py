"""`kpl-lab` through the REST API (what it does in a notebook under the hub) answers as it does locally.

The server of `kpl_server` stands in for the hub's shared service: `KPL_SERVICE_URL` and
`JUPYTERHUB_API_TOKEN` point the CLI at it, and the same commands run with `--home` on the
server's own home folder give the local answer to compare with. They work in a project of
their own, so the jobs and models they make are not the other client tests'.
"""

from __future__ import annotations

import json

import pytest

from kpl_lab.cli import main
from kpl_lab.cli.platforms import LocalPlatform, ServicePlatform, open_platform
from kpl_lab.client import Client

from .conftest import ENVIRONMENT, INFER, TRAIN, _png, _zip

PROJECT = "cli"


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


def test_what_cannot_work_remotely_says_so_and_names_the_alternative(cli, tmp_path):
    (tmp_path / "weights.txt").write_text("1")
    status, out, err = cli("model", "add", "net", str(tmp_path / "weights.txt"))
    assert status == 2 and out == ""
    assert err.startswith("kpl-lab: error: under the hub, `kpl-lab model add` cannot add")
    assert "job's outputs" in err and "Traceback" not in err
    status, _, err = cli("dataset", "add", "more", str(tmp_path))
    assert status == 2 and "upload_dataset(archive, name)" in err


def test_commands_not_ported_to_the_service_refuse_and_name_what_works(cli):
    for args, hint in (
        (("pipeline", "runs"), "%kpl_pipeline"),
        (("deployment", "list"), "%kpl_predict"),
        (("experiment", "list"), "%kpl_tune"),
        (("job", "compare", "a", "b"), "%kpl_compare"),
    ):
        status, out, err = cli(*args)
        assert status == 2 and out == "", args
        assert err.startswith(
            f"kpl-lab: error: kpl-lab {args[0]} {args[1]} works on this machine's platform only"
        )
        assert hint in err and "Traceback" not in err
    status, out, _ = cli("pipeline", "runs", service=False)  # the same command on this machine
    assert status == 0, out
