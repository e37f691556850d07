"""Replica processes seen from the platform: start a replica's supervisor, read its state, stop it.

A replica's run folder holds `replica.json` (what to run), `status.json` (written by the
supervisor, `kpl_lab.serving.replica`), `output.log` (the server's output), `inputs/model`
(a link to the model version) and `parameter.yml` (the algorithm's defaults).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import yaml

from ..engine import environment
from ..engine.forkserver import PACKAGE_PARENT
from ..engine.local import start_detached
from ..engine.runfolder import is_alive, read_own_json, write_atomic
from ..engine.supervisor import CommandNotFound, command_argv
from ..errors import BadRequest
from ..privileged.client import HelperClient
from . import address
from .replica import kill_group, remove_socket_folder, signaller, tail

LAST_LOG_LINES = 20
# what a replica's state becomes when its supervisor is gone without saying how it ended
GONE = {"state": "stopped", "reason": "its supervisor is gone"}
# stopped with the platform (`kpl-lab up` stopping): the next start of the platform starts it again
SUSPENDED = {"state": "suspended", "reason": "the platform stopped; it starts again with the platform"}


# what stays the platform's in a replica's run folder given to its user: what runs and as whom, its state
PLATFORM_FILES = ("replica.json", "status.json", "supervisor.log")


def prepare(
    run_dir: Path,
    cmd: str,
    algorithm_dir: Path,
    model_dir: Path,
    parameters: dict,
    settings: dict,
    python: str = sys.executable,
    runs_as: dict | None = None,
    project: str | None = None,
    passed: tuple[str, ...] = (),
) -> None:
    """Write a replica's run folder: the model input, the parameters and replica.json.

    `python`: the Python the server finds first on PATH (with kpl_helper). `runs_as`: the
    user the server runs as, through the privileged helper (`HelperClient.runs_as`);
    the run folder is then hers, but for `PLATFORM_FILES`. Its environment is the allowlist's
    (`kpl_lab.engine.environment`, with `passed`) and the deploy contract.
    """
    (run_dir / "inputs").mkdir(parents=True, exist_ok=True)
    (run_dir / "outputs").mkdir(exist_ok=True)
    (run_dir / "inputs" / "model").symlink_to(model_dir.resolve(), target_is_directory=True)
    (run_dir / "parameter.yml").write_text(yaml.safe_dump(parameters, allow_unicode=True))
    (run_dir / "output.log").touch()
    env = environment.passed(None, passed)
    env.update(
        {
            "KPL_INNER": "1",
            "KPL_ENV": "deploy",
            "KPL_ENV_FUNCTION": "deploy",
            "KPL_ENV_INPUT_ROOT_PATH": str(run_dir / "inputs"),
            "KPL_ENV_OUTPUT_ROOT_PATH": str(run_dir / "outputs"),
            "KPL_ENV_PARAMETER": json.dumps(parameters),
            "KPL_PARAMETER_FILE": str(run_dir / "parameter.yml"),
            "KPL_RUN_DIR": str(run_dir),
            "PYTHONUNBUFFERED": "1",
            # the platform's Python (with kpl_helper) first, as for local jobs
            "PATH": os.pathsep.join([os.path.dirname(python), env.get("PATH", "")]),
        }
    )
    try:
        argv, _ = command_argv(cmd, env["PATH"], algorithm_dir)
    except CommandNotFound as error:
        raise BadRequest(f"deploy.cmd: command not found: {error}", field="deploy.cmd") from None
    spec = {"argv": argv, "cwd": str(algorithm_dir), "env": env, **settings}
    if runs_as is not None:
        account = runs_as["account"]
        spec |= runs_as
        spec["env"] = environment.for_account(env, account["name"], account["home"])
        HelperClient(runs_as["helper"]).give(runs_as["as"], run_dir, project=project, keep=PLATFORM_FILES)
    write_atomic(run_dir / "replica.json", json.dumps(spec), durable=False)


def spawn(run_dir: Path, python: str = sys.executable) -> dict:
    """Start the replica's detached supervisor; return its handle (pid, start time)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    argv = [python, "-m", "kpl_lab.serving.replica", str(run_dir)]
    started = start_detached(argv, run_dir / "supervisor.log", "the replica supervisor", env)
    return {"supervisor_pid": started["pid"], "supervisor_start": started["start"]}


def supervised(handle: dict) -> bool:
    """Say whether the replica's supervisor still runs."""
    return is_alive(handle.get("supervisor_pid"), handle.get("supervisor_start"))


def status(run_dir: Path, handle: dict) -> dict:
    """Return a replica's status.json, with `stopped` when its supervisor vanished without a word.

    An empty handle is a replica recorded but not spawned yet (or lost before its spawn, which
    `reconcile` spawns): starting.
    """
    found = read_own_json(run_dir / "status.json") or {"state": "starting", "restarts": 0}
    if "url" not in found and found.get("port"):  # written by a supervisor from before `url`
        found["url"] = address.tcp_url("127.0.0.1", found["port"])
    if found["state"] not in ("failed", "stopped", "suspended") and handle and not supervised(handle):
        found = {**found, **GONE}
    if found["state"] == "failed":
        found["last_log_lines"] = tail(run_dir / "output.log", LAST_LOG_LINES)
    return found


def stop(run_dir: Path, handle: dict, grace: float, resume: bool = False) -> None:
    """Stop a replica: its supervisor stops the server; both are killed if they outlast the grace period.

    `resume`: it is `suspended`, not `stopped`, so the platform's next reconcile starts it again.
    """
    pid, start = handle.get("supervisor_pid"), handle.get("supervisor_start")
    if is_alive(pid, start):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace + 2
        while is_alive(pid, start) and time.monotonic() < deadline:
            time.sleep(0.05)
        if is_alive(pid, start):
            os.kill(pid, signal.SIGKILL)
    server = read_own_json(run_dir / "status.json") or {}
    if server.get("pid"):  # left behind by a supervisor that was killed
        spec = read_own_json(run_dir / "replica.json") or {}
        kill_group(server["pid"], server.get("pid_start"), grace, signaller(spec))
    remove_socket_folder(server)
    if resume and run_dir.is_dir():
        write_atomic(run_dir / "status.json", json.dumps({**server, **SUSPENDED, "pid": None}), durable=False)
    elif server.get("state") != "stopped" and run_dir.is_dir():  # so no reconcile starts it again
        write_atomic(
            run_dir / "status.json", json.dumps({**server, "state": "stopped", "pid": None}), durable=False
        )


def remove(run_dir: Path) -> None:
    """Remove a replica's run folder."""
    shutil.rmtree(run_dir, ignore_errors=True)
