"""Supervisors forked from the forkserver: detached, surviving it and the server, with a fallback."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kpl_lab.engine import forkserver
from kpl_lab.engine.launch import Resources
from kpl_lab.engine.limits import CGROUP_ROOT, PARENT, JobLimits, remove_cgroups
from kpl_lab.engine.local import LocalExecutor
from kpl_lab.engine.runfolder import is_alive, read_json
from kpl_lab.engine.service import JobRequest
from kpl_lab.engine.spares import PREFIX
from kpl_lab.engine.supervisor import Supervisor

from .test_local import make_launch, run_to_end
from .test_service import WAIT_RELEASE

# a "server" in its own process: submits a job, says which, and exits
SERVER = """\
import json, sys
from traitlets.config import Config
from kpl_lab.engine import forkserver
from kpl_lab.engine.service import JobRequest
from kpl_lab.platform import Platform

config = Config({"Ledger": {"cpu": 4.0, "memory": 4096}, "LocalExecutor": {"tick_seconds": 0.2}})
platform = Platform(home=sys.argv[1], config=config)
job = platform.jobs.submit(JobRequest(project="p", algorithm="wait"))
print(json.dumps({"job": job.id, "forkserver": forkserver.shared(sys.executable).pid}))
"""
# the same, two jobs: the second starts in the spare run folder made after the first
SERVER_TWO = SERVER.replace(
    "job = platform.jobs.submit",
    "platform.jobs.submit(JobRequest(project='p', algorithm='wait'))\njob = platform.jobs.submit",
)


@pytest.fixture
def fresh(monkeypatch):
    """Give the test a forkserver of its own (a new process), stopped at the end."""
    monkeypatch.setattr(forkserver, "_shared", {})
    yield
    for server in forkserver._shared.values():
        server.close()


def parent_of(pid: int) -> int:
    return psutil.Process(pid).ppid()


def spare_of(server: forkserver.ForkServer) -> int:
    """Return the pid of the forkserver's spare supervisor once it has one (its stderr is no supervisor.log)."""
    deadline = time.monotonic() + 60
    while True:
        for child in psutil.Process(server.pid).children():
            try:
                if not os.readlink(f"/proc/{child.pid}/fd/2").endswith("supervisor.log"):
                    return child.pid
            except OSError:  # ended meanwhile
                pass
        assert time.monotonic() < deadline, "no spare supervisor"
        time.sleep(0.02)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # reaped between two looks
        return False


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 60
    while running(pid):
        assert time.monotonic() < deadline, f"process {pid} still there"
        time.sleep(0.05)


def test_job_starts_through_the_forkserver(lab, fresh):
    lab = lab()
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    job = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    server = forkserver.shared(sys.executable)
    supervisor = job.handle["supervisor_pid"]
    assert is_alive(supervisor, job.handle["supervisor_start"])
    assert parent_of(supervisor) == server.pid
    assert os.getsid(supervisor) == supervisor  # a session of its own: detached from the server
    assert os.getsid(server.pid) != os.getsid(0)
    lab.wait_for(lambda: lab.jobs.get("p", job.id).handle.get("pid"), "the job's pid")
    with open(f"/proc/{supervisor}/cgroup") as cgroups:  # it started the job and left its cgroups
        assert f"/{PARENT}/" not in cgroups.read()
    lab.release_file.touch()
    assert lab.wait(job.id).state == "succeeded"


def test_job_survives_the_forkserver_which_respawns(lab, fresh):
    lab = lab()
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    first = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    lab.wait_for(lambda: lab.jobs.get("p", first.id).handle.get("pid"), "the first job's pid")
    killed = forkserver.shared(sys.executable).pid
    os.kill(killed, signal.SIGKILL)
    wait_gone(killed)
    handle = lab.jobs.get("p", first.id).handle
    assert is_alive(handle["supervisor_pid"], handle["supervisor_start"])
    assert is_alive(handle["pid"], handle["pid_start"])
    second = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))  # starts a new forkserver
    respawned = forkserver.shared(sys.executable).pid
    assert respawned not in (None, killed)
    assert parent_of(second.handle["supervisor_pid"]) == respawned
    lab.release_file.touch()
    assert lab.wait(first.id).state == "succeeded"
    assert lab.wait(second.id).state == "succeeded"


def test_job_survives_the_server_and_its_forkserver(lab, fresh, tmp_path):
    lab = lab(hosted=False)  # the test runs the restart's rounds itself
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    done = subprocess.run(
        [sys.executable, "-c", SERVER, str(lab.home)], capture_output=True, text=True, check=True, timeout=120
    )
    started = json.loads(done.stdout.splitlines()[-1])
    wait_gone(started["forkserver"])  # the server exited: its forkserver follows
    lab.restart()
    assert lab.jobs.reconcile() == {started["job"]: "running"}
    job = lab.jobs.get("p", started["job"])
    assert is_alive(job.handle["supervisor_pid"], job.handle["supervisor_start"])
    lab.release_file.touch()
    assert lab.wait(started["job"]).state == "succeeded"


def test_a_job_started_in_a_spare_run_folder_survives_the_server(lab, fresh):
    lab = lab(hosted=False)  # the test runs the restart's rounds itself
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    done = subprocess.run(
        [sys.executable, "-c", SERVER_TWO, str(lab.home)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    started = json.loads(done.stdout.splitlines()[-1])
    wait_gone(started["forkserver"])
    lab.restart()
    assert sorted(lab.jobs.reconcile().values()) == ["running", "running"]
    job = lab.jobs.get("p", started["job"])
    run_dir = lab.jobs.run_dir(job)
    spares = [p.name for p in run_dir.parent.iterdir() if p.name.startswith(PREFIX)]
    # the one made after the second start (n = 1): the second job took the first (n = 0)
    assert len(spares) == 1 and spares[0].endswith("-1")
    assert is_alive(job.handle["supervisor_pid"], job.handle["supervisor_start"])
    assert is_alive(job.handle["pid"], job.handle["pid_start"])
    lab.release_file.touch()
    assert lab.wait(started["job"]).state == "succeeded"
    assert "released" in (run_dir / "output.log").read_text()


async def test_fallback_when_the_forkserver_cannot_start(tmp_path, fresh, monkeypatch):
    monkeypatch.setattr(forkserver, "BOOTSTRAP", "raise SystemExit(3)")
    launch = make_launch(tmp_path, "python -c 'print(42)'")
    state = await run_to_end(LocalExecutor(), launch)
    assert (state.exit_code, state.reason) == (0, None)
    assert (launch.run_dir / "output.log").read_text() == "42\n"
    assert forkserver.shared(sys.executable).pid is None  # tried twice, then given up for this job


async def test_without_the_forkserver(tmp_path, fresh):
    launch = make_launch(tmp_path, "python -c 'print(42)'")
    state = await run_to_end(LocalExecutor(use_forkserver=False), launch)
    assert (state.exit_code, state.reason) == (0, None)
    assert forkserver._shared == {}


async def test_a_second_supervisor_of_one_job_leaves(tmp_path, fresh):
    launch = make_launch(tmp_path, "python -c 'print(42)'")
    executor = LocalExecutor()
    await executor.before_start(launch)
    server = forkserver.shared(executor.python)
    first = server.spawn(launch.run_dir)
    second = server.spawn(launch.run_dir)  # as after a retry whose first answer was lost
    while read_json(launch.run_dir / "status.json") is None or any(
        is_alive(started["pid"], started["start"]) for started in (first, second)
    ):
        await asyncio.sleep(0.05)
    assert (launch.run_dir / "output.log").read_text() == "42\n"
    assert "another supervisor owns" in (launch.run_dir / "supervisor.log").read_text()
    assert json.loads((launch.run_dir / "status.json").read_text())["exit_code"] == 0


async def test_a_forked_copy_of_the_server_leaves_the_forkserver_to_it(tmp_path, fresh):
    launch = make_launch(tmp_path, "python -c 'print(42)'")
    assert (await run_to_end(LocalExecutor(), launch)).exit_code == 0
    server = forkserver.shared(sys.executable)
    pid = os.fork()
    if pid == 0:  # the copy sees no forkserver, and closing its copy of the socket ends nothing
        os._exit(0 if forkserver.shared(sys.executable).pid is None else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    again = make_launch(tmp_path, "python -c 'print(43)'", name="j2")
    assert (await run_to_end(LocalExecutor(), again)).exit_code == 0
    assert forkserver.shared(sys.executable) is server and server.process.poll() is None


def job_cgroups(job_id: str) -> list:
    """Return the cgroup folders of a job that exist (v1 hierarchies or v2)."""
    return [path for path in CGROUP_ROOT.glob(f"*/{PARENT}/job-{job_id}")] + [
        path for path in CGROUP_ROOT.glob(f"{PARENT}/job-{job_id}")
    ]


async def test_start_makes_the_run_folder_while_the_supervisor_is_prepared(tmp_path, fresh):
    launch = make_launch(tmp_path, "python -c 'import os; print(os.getcwd())'", job_id="ahead1")
    executor = LocalExecutor()
    handle = await executor.start(launch)  # the forkserver prepares the start, then the folder is made
    # not our child (a zombie one would be listed too): forked by the forkserver
    assert handle["supervisor_pid"] not in [child.pid for child in psutil.Process().children()]
    while (state := await executor.poll(launch, handle)).running:
        await asyncio.sleep(0.05)
    assert (state.exit_code, state.reason) == (0, None)
    assert (launch.run_dir / "output.log").read_text() == f"{launch.algorithm_dir}\n"
    assert json.loads((launch.run_dir / "job.json").read_text())["job_id"] == "ahead1"


def test_a_start_failing_part_way_through_its_workers_leaves_no_cgroup(tmp_path, monkeypatch):
    launch = make_launch(
        tmp_path, "python -c 'print(42)'", job_id="partway1", limits=Resources(cpu=0.5, memory=64, workers=2)
    )
    remove_cgroups("job-partway1-*")  # what a failed run of this test left
    made = []
    find_home = JobLimits.find_home

    def failing_on_the_second(limits):
        made.append(limits)
        if len(made) == 2:
            raise RuntimeError("cannot read this thread's cgroups")
        find_home(limits)

    monkeypatch.setattr(JobLimits, "find_home", failing_on_the_second)
    supervisor = Supervisor(launch.run_dir, launch, {})
    supervisor.prepare(dict(os.environ))
    assert isinstance(supervisor.ready, RuntimeError) and len(made) == 2
    if made[0].version:  # cgroups here: the first rank's were made, then removed
        assert {path.name for path in made[0].paths.values()} == {"job-partway1-worker-0"}
    assert job_cgroups("partway1-worker-0") == job_cgroups("partway1-worker-1") == []


async def test_an_aborted_start_leaves_no_process_cgroup_or_run_folder(tmp_path, fresh, monkeypatch):
    launch = make_launch(tmp_path, "python -c 'print(42)'", job_id="abort1")
    executor = LocalExecutor()
    server = forkserver.shared(executor.python)
    pending = server.prepare(launch.run_dir, launch.to_json(), executor._supervision())
    probe = JobLimits.create("kpl-test-probe-abort", 64, 0.5)
    probe.remove()
    deadline = time.monotonic() + 60
    while probe.version and not job_cgroups("abort1"):  # prepared: its cgroups are made
        assert time.monotonic() < deadline
        time.sleep(0.01)
    supervisor = pending.abort()["pid"]  # forked and prepared, then told to leave
    wait_gone(supervisor)
    assert not launch.run_dir.exists() and job_cgroups("abort1") == []

    async def no_folder(launch):
        raise OSError("disk full")

    aborted = []
    abort = forkserver.Pending.abort
    monkeypatch.setattr(forkserver.Pending, "abort", lambda pending: aborted.append(abort(pending)))
    executor.before_start = no_folder
    with pytest.raises(OSError, match="disk full"):
        await executor.start(launch)  # the run folder failed: the prepared supervisor is sent away
    wait_gone(aborted[0]["pid"])
    assert not launch.run_dir.exists() and job_cgroups("abort1") == []
    del executor.before_start
    again = make_launch(tmp_path, "python -c 'print(43)'", job_id="abort2", name="j2")
    handle = await executor.start(again)  # the forkserver serves the next job as before
    while (await executor.poll(again, handle)).running:
        await asyncio.sleep(0.05)
    assert (again.run_dir / "output.log").read_text() == "43\n"
    assert forkserver.shared(executor.python) is server and server.process.poll() is None


async def test_the_next_job_starts_in_a_spare_supervisor(tmp_path, fresh):
    """Forked and rehearsed while the forkserver idles, a spare takes the next start: no fork on its path."""
    executor = LocalExecutor()
    first = make_launch(tmp_path, "python -c 'print(42)'", job_id="spare1")
    assert (await run_to_end(executor, first)).exit_code == 0
    server = forkserver.shared(executor.python)
    spare = spare_of(server)
    deadline = time.monotonic() + 30
    while os.getsid(spare) != spare:  # seen just after its fork: its session comes before any request
        assert time.monotonic() < deadline, "the spare waits in the forkserver's session"
        time.sleep(0.02)
    second = make_launch(tmp_path, "python -c 'import os; print(os.getcwd())'", job_id="spare2", name="j2")
    handle = await executor.start(second)
    assert handle["supervisor_pid"] == spare
    while (state := await executor.poll(second, handle)).running:
        await asyncio.sleep(0.05)
    assert (state.exit_code, state.reason) == (0, None)
    assert (second.run_dir / "output.log").read_text() == f"{second.algorithm_dir}\n"
    assert job_cgroups(f"rehearsal-{spare}") == []  # its rehearsal's, made and removed before
    replaced = spare_of(server)  # the next one
    assert replaced != spare
    server.close()
    wait_gone(replaced)  # a spare leaves with its forkserver, and removes the cgroups it made ahead
    assert job_cgroups(f"rehearsal-{replaced}") == []


async def test_a_spare_takes_over_its_rehearsals_cgroups(tmp_path, fresh):
    """Where cgroups can be renamed (v1) the spare keeps its rehearsal's, and renames them to the next job's."""
    executor = LocalExecutor()
    first = make_launch(tmp_path, "python -c 'print(42)'", job_id="ahead2")
    handle = await executor.start(first)  # prepared: the next spare rehearses it
    while (await executor.poll(first, handle)).running:
        await asyncio.sleep(0.05)
    spare = spare_of(forkserver.shared(executor.python))
    probe = JobLimits.create("kpl-test-probe", 64, 0.5)
    probe.remove()
    deadline = time.monotonic() + 30
    while probe.renamable and not job_cgroups(f"rehearsal-{spare}"):
        assert time.monotonic() < deadline, "the spare made no cgroups ahead"
        time.sleep(0.02)
    rehearsed = job_cgroups(f"rehearsal-{spare}")
    assert len(rehearsed) == (len(probe.paths) if probe.renamable else 0)
    launch = make_launch(
        tmp_path, "sleep 30", job_id="ahead3", name="j3", limits=Resources(memory=300, cpu=0.5)
    )
    handle = await executor.start(launch)
    assert handle["supervisor_pid"] == spare
    while "limits" not in (full := read_json(launch.run_dir / "handle.json") or {}):
        await asyncio.sleep(0.02)
    paths = {controller: Path(path) for controller, path in full["limits"]["paths"].items()}
    assert all(path.name == "job-ahead3" for path in paths.values())
    assert job_cgroups(f"rehearsal-{spare}") == []
    if "memory" in paths:  # v1: the job's limits, not the rehearsal's (1024 MB, 1 CPU)
        assert (paths["memory"] / "memory.limit_in_bytes").read_text().strip() == str(300 * 1024 * 1024)
        assert (paths["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
    await executor.stop(launch, handle, grace_seconds=0)
    while (await executor.poll(launch, handle)).running:
        await asyncio.sleep(0.05)


async def test_a_killed_spare_is_replaced_by_a_fork(tmp_path, fresh, caplog):
    executor = LocalExecutor()
    assert (await run_to_end(executor, make_launch(tmp_path, "python -c 'print(42)'"))).exit_code == 0
    server = forkserver.shared(executor.python)
    spare = spare_of(server)
    os.kill(spare, signal.SIGKILL)
    wait_gone(spare)
    again = make_launch(tmp_path, "python -c 'print(43)'", name="j2")
    with caplog.at_level(logging.WARNING):
        handle = await executor.start(again)  # the forkserver finds the spare gone and forks
    assert [record.message for record in caplog.records] == []  # no fallback in the launcher
    assert handle["supervisor_pid"] != spare
    assert job_cgroups(f"rehearsal-{spare}") == []  # the forkserver removed those it made ahead
    while (await executor.poll(again, handle)).running:
        await asyncio.sleep(0.05)
    assert (again.run_dir / "output.log").read_text() == "43\n"
    assert forkserver.shared(executor.python) is server and server.process.poll() is None


async def test_a_spare_takes_a_request_larger_than_the_sockets_buffer(tmp_path, fresh, monkeypatch):
    for i in range(6):  # the launcher's environment goes with each request (one variable: 128 KiB at most)
        monkeypatch.setenv(f"KPL_TEST_LARGE_{i}", "x" * 100_000)
    executor = LocalExecutor(passed_environment=["KPL_TEST_LARGE_*"])  # the job gets them too
    assert (await run_to_end(executor, make_launch(tmp_path, "python -c 'print(42)'"))).exit_code == 0
    spare = spare_of(forkserver.shared(executor.python))
    again = make_launch(
        tmp_path,
        "python -c 'import os; print(sum(len(v) for k, v in os.environ.items() if \"_LARGE_\" in k))'",
        name="j2",
    )
    handle = await executor.start(again)
    assert handle["supervisor_pid"] == spare
    while (await executor.poll(again, handle)).running:
        await asyncio.sleep(0.05)
    assert (again.run_dir / "output.log").read_text() == "600000\n"


def test_a_spare_killed_mid_request_takes_the_forkserver_with_it(tmp_path, fresh):
    """Part of a request read by a spare that died is lost: the forkserver exits, the launcher starts a new one."""
    executor = LocalExecutor()
    launch = make_launch(tmp_path, "python -c 'print(42)'")
    asyncio.run(run_to_end(executor, launch))
    server = forkserver.shared(executor.python)
    spare, first = spare_of(server), server.pid
    deadline = time.monotonic() + 30
    while (waiting := _blocked_in(spare)) is None:  # still rehearsing
        assert time.monotonic() < deadline, "the spare does not wait"
        time.sleep(0.02)
    server._socket.sendall(b'{"run_dir": ')  # the spare reads it and waits for the rest of the line
    while _blocked_in(spare) in (None, waiting):
        assert time.monotonic() < deadline, "the spare did not take the request"
        time.sleep(0.02)
    os.kill(spare, signal.SIGKILL)
    assert server.process.wait(timeout=30) == 0
    again = make_launch(tmp_path, "python -c 'print(43)'", name="j2")
    state = asyncio.run(run_to_end(executor, again))  # a new forkserver starts it
    assert (state.exit_code, (again.run_dir / "output.log").read_text()) == (0, "43\n")
    assert server.pid not in (None, first)


def _blocked_in(pid: int) -> str | None:
    """Return the system call a sleeping process waits in (its number), None while it runs."""
    call = Path(f"/proc/{pid}/syscall").read_text().split()[0]
    return call if call.isdigit() and psutil.Process(pid).status() == psutil.STATUS_SLEEPING else None


def mapped(pid: int, name: str) -> bool:
    """Say whether process `pid` has a file whose path holds `name` mapped (a loaded C extension)."""
    with open(f"/proc/{pid}/maps") as maps:
        return name in maps.read()


def test_supervisors_forked_after_a_first_job_have_its_callbacks_imported(lab, fresh):
    """Idle after a first job, the forkserver imports the callbacks module; later supervisors share it."""
    lab = lab()
    lab.algorithm("wait", "python wait.py", {"wait.py": WAIT_RELEASE})
    lab.release_file.touch()
    first = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    server = forkserver.shared(sys.executable)
    assert lab.wait(first.id).state == "succeeded"
    # pydantic's core is a C extension the callbacks' platform loads, and `python -S` never does
    lab.wait_for(lambda: mapped(server.pid, "pydantic_core"), "the forkserver to import the callbacks")
    second = lab.jobs.submit(JobRequest(project="p", algorithm="wait"))
    supervisor = second.handle["supervisor_pid"]
    assert parent_of(supervisor) == server.pid
    assert mapped(supervisor, "pydantic_core")  # from its fork on, before its first tick
    assert lab.wait(second.id).state == "succeeded"


async def test_a_forkserver_without_callbacks_imports_nothing_more(tmp_path, fresh):
    """Jobs whose supervision names no callbacks (an executor on its own) leave the forkserver lean."""
    executor = LocalExecutor()
    first = make_launch(tmp_path, "python -c 'print(42)'", job_id="lean1")
    assert (await run_to_end(executor, first)).exit_code == 0
    server = forkserver.shared(executor.python)
    spare_of(server)  # it idled after the job: a preload would have come before this spare
    assert not mapped(server.pid, "pydantic_core")


def test_a_go_pipe_received_is_close_on_exec():
    """The forkserver's and a spare's copies of a go pipe reach no job (Python's recvmsg keeps them inheritable)."""
    import socket

    ours, theirs = socket.socketpair()
    wait, go = os.pipe()
    with ours, theirs:
        socket.send_fds(ours, [b"request\n"], [wait])
        chunk, fds = forkserver.receive(theirs, 100)
    os.close(wait)
    os.close(go)
    assert chunk == b"request\n" and len(fds) == 1
    assert not os.get_inheritable(fds[0])
    os.close(fds[0])
