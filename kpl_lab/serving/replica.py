"""The supervisor of one replica: start the deploy command, health-check it, restart it when it crashes.

Run detached (`python -m kpl_lab.serving.replica RUN_DIR`), it outlives the server and the
CLI that started it, like a job's supervisor. It reads `replica.json` (command, folder,
environment) from the run folder and keeps `status.json` there up to date: `state`
(starting, ready, unhealthy, restarting, failed, stopped), the server's `pid`, `port` and
`url` (where it answered its health check: the Unix socket in a folder the supervisor
makes for it, `socket_folder`, or the port), `restarts` and the last error. SIGTERM stops the server (SIGTERM, SIGKILL after the grace
period) and then the supervisor; so does the run folder's removal (the platform's home
deleted under it: nobody could find or stop it any more). With the privileged helper the
server runs as the deployment's user (`as` in replica.json), started and signalled by the
helper, while the supervisor stays the platform's; the run folder is then hers, and the
supervisor trusts replica.json and status.json only when the platform's account wrote them
(`read_own_json`). There the server must listen on its socket: a TCP port on loopback answers every account of the machine, so
a server found answering on its port is stopped and the replica `failed` (`refuse_port`).
Standard library only: it starts quickly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..engine.runfolder import APPEND, is_alive, open_in, process_start_time, read_own_json, write_atomic
from ..privileged.client import HelperClient, HelperProcess
from . import address

STARTING_CHECK_SECONDS = 0.2
READY_CHECK_SECONDS = 1.0
HEALTH_TIMEOUT_SECONDS = 2.0
SOCKET_PREFIX = "kpl-replica-"  # in the temporary folder: a short path (sun_path holds 108 bytes)
SOCKET_NAME = "http.sock"
SOCKET_FOLDER_MODE = 0o2770  # the server's; the platform's group connects to the socket and cleans up


def free_port(host: str) -> int:
    """Return a TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def is_healthy(url: str) -> bool:
    """Say whether the server at `url` (unix:PATH or http://HOST:PORT) answers GET /health with 200."""
    try:
        return address.request(url, "GET", "/health", HEALTH_TIMEOUT_SECONDS)[0] == 200
    except (OSError, ValueError):
        return False


def socket_folder(helper: HelperClient | None, runs_as: dict | None) -> Path | None:
    """Make the private folder a server's Unix socket goes in (the server's user's, the platform's group reads it).

    None when its path would be too long for a socket.
    """
    folder = Path(tempfile.mkdtemp(prefix=SOCKET_PREFIX))
    if len(str(folder / SOCKET_NAME)) > address.MAX_SOCKET_PATH:
        folder.rmdir()
        return None
    if helper is not None:
        helper.give(runs_as, folder, mode=SOCKET_FOLDER_MODE)
    return folder


def remove_socket_folder(status: dict) -> None:
    """Remove the socket folder a status.json names (a supervisor killed before it could)."""
    folder = str(status.get("socket_folder") or "")
    if folder.startswith(os.path.join(tempfile.gettempdir(), SOCKET_PREFIX)) and ".." not in folder:
        shutil.rmtree(folder, ignore_errors=True)


def tail(path: Path, lines: int = 20) -> str:
    """Return the last lines of a log file ("" when there is none), following no link."""
    try:
        with open(open_in(path.parent, path.name), "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 16384))
            return b"\n".join(log.read().splitlines()[-lines:]).decode(errors="replace")
    except OSError:
        return ""


def signaller(spec: dict) -> Callable[[int, int | None, int], None]:
    """Return how to signal a replica's server group: as its user through the helper, or directly."""
    if spec.get("as"):
        helper = HelperClient(spec["helper"])
        return lambda pid, start, number: helper.signal(spec["as"], pid, start, number)
    return lambda pid, start, number: os.killpg(pid, number)


def kill_group(pid: int, start: int | None, grace: float, send=None) -> None:
    """Stop a server's process group: SIGTERM, then SIGKILL after `grace` seconds (`send`: a `signaller`)."""
    send = send or signaller({})
    if not is_alive(pid, start):
        return
    try:
        send(pid, start, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while is_alive(pid, start) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_alive(pid, start):
        with contextlib.suppress(ProcessLookupError):
            send(pid, start, signal.SIGKILL)


class ReplicaSupervisor:
    """Keep one deploy server running and report its state in status.json."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        spec = read_own_json(run_dir / "replica.json")
        if spec is None:  # what runs, and as whom, is the platform's word only
            raise SystemExit(f"{run_dir / 'replica.json'}: missing, or not written by this account")
        self.spec = spec
        self.runs_as = spec.get("as")  # the user the server runs as, through the privileged helper
        self.helper = HelperClient(spec["helper"]) if self.runs_as else None
        self.send = signaller(spec)
        self.host = self.spec.get("host", "127.0.0.1")
        self.stopping = False
        self.status: dict = {"state": "starting", "restarts": 0, "supervisor_pid": os.getpid()}
        previous = read_own_json(run_dir / "status.json") or {}
        self.status["restarts"] = previous.get("restarts", 0)
        # a server left behind by a supervisor that died: stop it, this one starts its own
        if previous.get("pid"):
            kill_group(
                previous["pid"], previous.get("pid_start"), self.spec.get("grace_seconds", 5.0), self.send
            )
        remove_socket_folder(previous)
        self.socket_folder: Path | None = None  # made in `run`, once a stop signal stops it in order

    def write(self, **fields) -> None:
        self.status.update(fields, time=time.time())
        if self.run_dir.is_dir():
            write_atomic(self.run_dir / "status.json", json.dumps(self.status), durable=False)

    def on_term(self, *_args) -> None:
        self.stopping = True

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def start_server(self) -> subprocess.Popen | HelperProcess:
        port = free_port(self.host)
        env = {**self.spec["env"], "KPL_DEPLOY_PORT": str(port)}
        if self.socket_folder is not None:  # a server that takes it listens there instead
            env["KPL_DEPLOY_SOCKET"] = str(self.socket_folder / SOCKET_NAME)
        log = open_in(self.run_dir, "output.log", APPEND)  # her run folder: no link followed
        try:
            if self.helper is not None:
                with open(os.devnull, "rb") as devnull:
                    server = self.helper.spawn(
                        self.runs_as,
                        self.spec["argv"],
                        env,
                        self.spec["cwd"],
                        stdio=(devnull.fileno(), log, log),
                        session=True,  # its own process group: stopped as a whole
                    )
            else:
                server = subprocess.Popen(
                    self.spec["argv"],
                    cwd=self.spec["cwd"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped as a whole
                )
        finally:
            os.close(log)
        self.write(
            state="starting",
            pid=server.pid,
            pid_start=process_start_time(server.pid),
            port=port,
            url=None,
            socket_folder=str(self.socket_folder) if self.socket_folder else None,
        )
        return server

    def url(self) -> str:
        """Return where the server listens: its socket once it made it, else its port."""
        if self.socket_folder is not None and (self.socket_folder / SOCKET_NAME).is_socket():
            return address.unix_url(str(self.socket_folder / SOCKET_NAME))
        return address.tcp_url(self.host, self.status["port"])

    def refuse_port(self, server: subprocess.Popen) -> None:
        """Stop a server of a user's account that answers on its TCP port, and fail the replica.

        A TCP port on loopback answers every account of the machine; the socket's folder is the
        deployment user's alone. It is not started again: it would do the same.
        """
        kill_group(server.pid, self.status.get("pid_start"), self.spec.get("grace_seconds", 5.0), self.send)
        server.wait()
        reason = (
            f"the server answers on TCP port {self.status['port']}, which every account of this machine "
            "can reach: a replica that runs as its user's account must listen on the Unix socket "
            "in $KPL_DEPLOY_SOCKET (kpl_helper.deploy.serve does; see docs/serving.md)"
        )
        self.write(state="failed", pid=None, url=None, reason=reason, exit_code=server.returncode)

    def watch(self, server: subprocess.Popen) -> bool:
        """Health-check the server until it exits or the supervisor stops; return whether it was ready."""
        ready = False
        while server.poll() is None and not self.stopping:
            if not self.run_dir.is_dir():  # removed with its platform: stop, as if told to
                self.stopping = True
                break
            url = self.url()
            healthy = is_healthy(url)
            if healthy and self.runs_as is not None and not url.startswith(address.UNIX):
                self.refuse_port(server)
                break
            if healthy and self.status["state"] != "ready":
                ready = True
                self.write(state="ready", ready_since=time.time(), failures=0, url=url)
            elif not healthy and self.status["state"] == "ready":
                self.write(state="unhealthy")
            self.sleep(READY_CHECK_SECONDS if self.status["state"] == "ready" else STARTING_CHECK_SECONDS)
        return ready

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        self.socket_folder = socket_folder(self.helper, self.runs_as)
        failures = 0  # crashes since the server was last ready
        max_failures = self.spec.get("max_failures", 5)
        backoff, max_backoff = (
            self.spec.get("backoff_seconds", 0.5),
            self.spec.get("max_backoff_seconds", 30.0),
        )
        if self.runs_as is not None and self.socket_folder is None:
            reason = f"the temporary folder {tempfile.gettempdir()} has too long a path for a Unix socket"
            self.write(state="failed", pid=None, url=None, reason=reason)
            return
        while not self.stopping:
            server = self.start_server()
            if self.watch(server):
                failures = 0
            if self.status["state"] == "failed":
                return
            if self.stopping:
                kill_group(
                    server.pid, self.status.get("pid_start"), self.spec.get("grace_seconds", 5.0), self.send
                )
                server.wait()
                break
            failures += 1
            reason = f"the server exited with status {server.returncode}"
            if failures >= max_failures:
                self.write(
                    state="failed",
                    pid=None,
                    url=None,
                    reason=f"{reason}, {failures} times in a row",
                    exit_code=server.returncode,
                )
                return
            delay = min(max_backoff, backoff * 2 ** (failures - 1))
            self.write(
                state="restarting",
                pid=None,
                url=None,
                reason=reason,
                exit_code=server.returncode,
                restarts=self.status["restarts"] + 1,
                next_start=time.time() + delay,
            )
            self.sleep(delay)
        self.write(state="stopped", pid=None, url=None)


def main(argv: list[str]) -> int:
    """Supervise the replica of the run folder given as the only argument."""
    supervisor = ReplicaSupervisor(Path(argv[0]))
    try:
        supervisor.run()
    finally:
        if supervisor.socket_folder is not None:
            shutil.rmtree(supervisor.socket_folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
