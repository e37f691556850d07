"""The khelper command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

# What the khelper entry point runs (kpl_helper.cli.main:main, as in the original).
KHELPER = [sys.executable, "-m", "kpl_helper.cli.main"]


def khelper(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("KPL_")}
    return subprocess.run(
        [*KHELPER, *args], env={**base, **(env or {})}, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_no_command_prints_help():
    process = khelper()
    assert process.returncode == 0
    assert "usage: khelper" in process.stdout
    assert "khelper save" in khelper("save").stdout


def test_kill_writes_a_stop_event(job):
    process = khelper("kill", env=job.env)
    assert process.returncode == 0, process.stderr
    assert [e["type"] for e in job.events()] == ["stop"]


def test_kill_outside_does_nothing(tmp_path):
    assert khelper("kill", cwd=tmp_path).returncode == 0
    assert list(tmp_path.iterdir()) == []


def test_save_commands_with_the_original_flags(job, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    algo = tmp_path / "algo"
    algo.mkdir()
    (algo / "environment.yml").write_text("version: 1\n")
    commands = [
        ["save", "dataset", "--name", "ds", "--desc", "d", "--path", str(data), "--as_serialized"],
        ["save", "dataset", "-n", "ds2", "-p", str(data)],
        ["save", "model", "-n", "m", "-d", "best", "-p", str(data)],
        ["save", "algorithm", "--name", "a", "--path", "algo"],
    ]
    for args in commands:
        process = khelper(*args, env=job.env, cwd=tmp_path)
        assert process.returncode == 0, process.stderr
    found = [(e["kind"], e["name"], e["path"], e["as_serialized"]) for e in job.events()]
    assert found == [
        ("dataset", "ds", str(data), True),
        ("dataset", "ds2", str(data), False),
        ("model", "m", str(data), False),
        ("algorithm", "a", str(algo), False),
    ]


def test_save_failure_exits_1_with_the_reason(job, tmp_path):
    process = khelper("save", "model", "-n", "m", "-p", str(tmp_path / "nothing"), env=job.env)
    assert process.returncode == 1
    assert "does not exist" in process.stderr
    assert job.events() == []


def test_save_requires_name_and_path():
    process = khelper("save", "model", "-p", "x")
    assert process.returncode == 2
    assert "--name/-n" in process.stderr


def test_write_parameters(job, tmp_path):
    out = tmp_path / "params" / "p.yml"
    process = khelper("write", str(out), env=job.env)
    assert process.returncode == 0, process.stderr
    assert yaml.safe_load(out.read_text()) == json.loads(job.env["KPL_ENV_PARAMETER"])


def test_write_without_parameters_fails(job, tmp_path):
    env = {k: v for k, v in job.env.items() if k != "KPL_ENV_PARAMETER"}
    process = khelper("write", str(tmp_path / "p.yml"), env=env)
    assert process.returncode == 1
    assert "neither KPL_ENV_PARAMETER nor KPL_PARAMETER_FILE" in process.stderr
