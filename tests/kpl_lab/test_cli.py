"""The kpl-lab command: catalog commands, JSON output, errors without tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kpl_lab.cli import catalog as cli_catalog
from kpl_lab.cli import main
from kpl_lab.text import render_table

ENVIRONMENT = """\
version: 1
image:
  runs: []
train:
  cmd: python train.py
"""


@pytest.fixture
def home(tmp_path):
    return str(tmp_path / "home")


@pytest.fixture
def run(home, capsys):
    """Run `kpl-lab --home HOME ARGS...`; return (exit status, stdout, stderr)."""

    def _run(*args):
        status = main(["--home", home, *args])
        out, err = capsys.readouterr()
        return status, out, err

    return _run


@pytest.fixture
def algo_dir(tmp_path):
    folder = tmp_path / "algo"
    folder.mkdir()
    (folder / "environment.yml").write_text(ENVIRONMENT)
    (folder / "parameter.yml").write_text("lr: 0.1\n")
    (folder / "train.py").write_text("print('hi')\n")
    return folder


def test_algorithm_add_list_show_delete(run, algo_dir):
    status, out, _ = run("algorithm", "add", str(algo_dir), "--name", "cls", "--description", "digits")
    assert status == 0
    assert out.startswith("added algorithm cls:")
    status, out, _ = run("algorithm", "list")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "VERSIONS", "LATEST", "FUNCTIONS", "SIZE", "CREATED", "DESCRIPTION"]
    assert lines[2].split()[:2] == ["cls", "1"] and "train" in lines[2] and "digits" in lines[2]
    status, out, _ = run("algorithm", "show", "cls", "--json")
    data = json.loads(out)
    assert data["functions"] == ["train"] and data["parameters"] == {"lr": 0.1}
    assert data["all_versions"] == [data["version"]]
    status, out, _ = run("algorithm", "show", "cls")
    assert f"algorithm:   cls:{data['version']}" in out
    status, out, _ = run("algorithm", "delete", "cls")
    assert status == 0 and out.strip() == f"deleted algorithm cls:{data['version']}"
    status, out, _ = run("algorithm", "list", "--json")
    assert json.loads(out) == []


def test_model_commands_and_projects(run, tmp_path):
    weights = tmp_path / "weights.pt"
    weights.write_bytes(b"w" * 2048)
    status, out, _ = run("--project", "team-a", "model", "add", "net", str(weights), "--json")
    added = json.loads(out)
    assert status == 0 and added["files"] == ["weights.pt"] and added["size_bytes"] == 2048
    status, out, _ = run("--project", "team-a", "model", "list")
    assert "2.0 KB" in out
    status, out, err = run("--project", "team-b", "model", "show", "net")
    assert status == 2 and out == ""
    assert err.strip() == "kpl-lab: error: model 'net' not found in project 'team-b'"
    status, out, _ = run("model", "list")
    assert out.strip() == "no models in project default"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("dataset", "add", "d", "/no/such/folder"), "/no/such/folder: not a folder"),
        (("model", "add", "../x", "/etc/hostname"), "name '../x' is not valid"),
        (("algorithm", "show", "nothing"), "algorithm 'nothing' not found in project 'default'"),
        (("model", "show", "bad:ref:x"), "is not valid"),
    ],
)
def test_errors_are_one_line_and_exit_2(run, args, message):
    status, out, err = run(*args)
    assert status == 2
    assert message in err
    assert "Traceback" not in err


def test_invalid_algorithm_names_file_and_line(run, algo_dir):
    (algo_dir / "environment.yml").write_text(ENVIRONMENT.replace("cmd:", "cad:"))
    status, _, err = run("algorithm", "add", str(algo_dir))
    assert status == 2
    assert "environment.yml:5" in err and "cmd" in err


def test_entry_point_runs_without_traceback(home):
    result = subprocess.run(
        [sys.executable, "-m", "kpl_lab.cli", "--home", home, "dataset", "show", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "kpl-lab: error: dataset 'x' not found in project 'default'"


def test_a_bug_shows_its_traceback_not_a_user_error(run, monkeypatch):
    def broken(args, platform):
        raise ValueError("a bug, not a person's mistake")

    monkeypatch.setattr(cli_catalog, "cmd_list", broken)
    with pytest.raises(ValueError, match="a bug"):
        run("dataset", "list")


def test_usage_errors_exit_2(run):
    with pytest.raises(SystemExit) as info:
        run("model", "frobnicate")
    assert info.value.code == 2


def test_table_aligns_wide_characters():
    table = render_table(["NAME", "N"], [["数据集", 1], ["ab", 22]])
    lines = table.splitlines()
    assert lines[2] == "数据集  1"
    assert lines[3] == "ab      22"
