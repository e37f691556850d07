"""The local executor alone (no database): run folder, environment contract, limits, stop, lost."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from kpl_lab.engine.launch import JobLaunch, Resources
from kpl_lab.engine.limits import PARENT, JobLimits
from kpl_lab.engine.local import LocalExecutor
from kpl_lab.engine.runfolder import is_alive, read_json
from kpl_lab.engine.spares import PREFIX
from kpl_lab.engine.supervisor import CommandNotFound, command_argv, spawn

SHOW_ENV = """\
import json, os
keys = [k for k in os.environ if k.startswith("KPL_") or k.endswith("_VISIBLE_DEVICES")]
print(json.dumps({k: os.environ[k] for k in keys}))
print(json.dumps({"cwd": os.getcwd(), "inputs": sorted(os.listdir(os.environ["KPL_ENV_INPUT_ROOT_PATH"]))}))
"""


def make_launch(tmp_path: Path, cmd: str, files: dict[str, str] | None = None, **fields) -> JobLaunch:
    algorithm = tmp_path / "algorithm"
    algorithm.mkdir(exist_ok=True)
    for name, text in (files or {}).items():
        (algorithm / name).write_text(text)
    return JobLaunch(
        job_id=fields.pop("job_id", "j1"),
        project="p",
        function="train",
        cmd=cmd,
        algorithm_dir=algorithm,
        run_dir=tmp_path / "run" / fields.get("name", "j1"),
        **{k: v for k, v in fields.items() if k != "name"},
    )


async def run_to_end(executor: LocalExecutor, launch: JobLaunch):
    await executor.before_start(launch)
    handle = await executor.execute(launch)
    while (state := await executor.poll(launch, handle)).running:
        await asyncio.sleep(0.05)
    return state


async def test_run_folder_and_environment_contract(tmp_path):
    data = tmp_path / "mnist"
    data.mkdir()
    launch = make_launch(
        tmp_path,
        "python show.py",
        {"show.py": SHOW_ENV},
        inputs={"data": data},
        outputs=["model"],
        parameters={"lr": 0.1, "net": {"depth": 18}},
        assigned_devices={"gpu": [1, 3]},
    )
    state = await run_to_end(LocalExecutor(), launch)
    assert (state.exit_code, state.reason) == (0, None)
    run = launch.run_dir
    env_line, where_line = (run / "output.log").read_text().splitlines()[:2]
    env, where = json.loads(env_line), json.loads(where_line)
    assert env["KPL_INNER"] == "1" and env["KPL_ENV"] == "job"
    assert env["KPL_ENV_TASK_ID"] == "j1" and env["KPL_ENV_FUNCTION"] == "train"
    assert env["KPL_ENV_INPUT_ROOT_PATH"] == str(run / "inputs")
    assert env["KPL_ENV_OUTPUT_ROOT_PATH"] == str(run / "outputs")
    assert json.loads(env["KPL_ENV_PARAMETER"]) == {"lr": 0.1, "net": {"depth": 18}}
    assert env["KPL_EVENTS_FILE"] == str(run / "events.jsonl")
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3" and env["ASCEND_RT_VISIBLE_DEVICES"] == ""
    assert where == {"cwd": str(launch.algorithm_dir), "inputs": ["data"]}
    assert (run / "inputs" / "data").resolve() == data.resolve()
    assert (run / "outputs" / "model").is_dir()
    assert "net:\n  depth: 18" in (run / "parameter.yml").read_text()
    assert JobLaunch.from_json(json.loads((run / "job.json").read_text())) == launch


async def test_a_new_run_folder_is_a_spare_one_filled_and_renamed(tmp_path):
    runs = tmp_path / "run"
    runs.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    (runs / f"{PREFIX}{gone.pid}-0").mkdir()  # left by a server that was killed
    executor = LocalExecutor()
    first = make_launch(tmp_path, "python -c 'print(1)'")
    assert (await run_to_end(executor, first)).exit_code == 0  # no spare yet: made as before
    spares = [p for p in runs.iterdir() if p.name.startswith(PREFIX)]
    assert [p.name.partition("-")[2].partition("-")[0] for p in spares] == [str(os.getpid())]
    data = tmp_path / "data"
    data.mkdir()
    second = make_launch(
        tmp_path,
        "python show.py",
        {"show.py": SHOW_ENV},
        name="j2",
        job_id="j2",
        inputs={"data": data},
        outputs=["model"],
        parameters={"lr": 0.5},
    )
    state = await run_to_end(executor, second)
    assert (state.exit_code, state.reason) == (0, None)
    run = second.run_dir
    assert not spares[0].exists()  # it became j2's run folder
    assert JobLaunch.from_json(json.loads((run / "job.json").read_text())) == second
    assert (run / "parameter.yml").read_text() == "lr: 0.5\n"
    assert (run / "inputs" / "data").resolve() == data.resolve() and (run / "outputs" / "model").is_dir()
    assert json.loads((run / "output.log").read_text().splitlines()[1])["inputs"] == ["data"]
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    assert len([p for p in runs.iterdir() if p.name.startswith(PREFIX)]) == 1  # the next one


def test_command_argv(tmp_path):
    assert command_argv("python train.py --lr 0.1", os.environ["PATH"], tmp_path)[0][1:] == [
        "train.py",
        "--lr",
        "0.1",
    ]
    assert command_argv("python a.py && python b.py", "", tmp_path) == (
        ["/bin/sh", "-c", "python a.py && python b.py"],
        True,
    )
    with pytest.raises(CommandNotFound, match="./run.sh"):
        command_argv("./run.sh", "", tmp_path)


async def test_shell_command_not_found(tmp_path):
    launch = make_launch(tmp_path, "echo preparing && no-such-tool --fast")
    state = await run_to_end(LocalExecutor(), launch)
    assert (state.exit_code, state.reason) == (127, "command not found: no-such-tool")


async def test_fallback_watchdog_reports_memory(tmp_path):
    hog = "import time\nblocks = []\nfor _ in range(100):\n    blocks.append(b'x' * 10_000_000)\n    time.sleep(0.02)\n"
    launch = make_launch(tmp_path, "python hog.py", {"hog.py": hog}, limits=Resources(memory=64))
    state = await run_to_end(LocalExecutor(use_cgroups=False), launch)
    assert state.reason in (
        "exceeded its memory limit of 64 MB (RSS watchdog)",  # the watchdog saw it first
        "exited with code 1: MemoryError",  # RLIMIT_DATA refused the allocation first
    ), state.reason
    assert state.handle["enforcement"].startswith("fallback:")


def test_cgroup_enforcement_is_stated():
    limits = JobLimits.create("kpl-test-probe", 64, 0.5)
    try:
        if limits.version:
            assert limits.enforcement.startswith(f"cgroup v{limits.version}: ")
            assert all(path.is_dir() for path in limits.paths.values())
        else:
            assert limits.enforcement.startswith("fallback:")
    finally:
        limits.remove()
    assert not any(path.exists() for path in limits.paths.values())


async def test_job_and_its_children_run_in_its_cgroups(tmp_path):
    launch = make_launch(tmp_path, "sh -c 'cat /proc/self/cgroup'", job_id="cg1")
    state = await run_to_end(LocalExecutor(), launch)
    limits = state.handle["limits"]
    if not limits["version"]:
        pytest.skip("cgroups are not writable here")
    assert state.exit_code == 0
    member_of = (launch.run_dir / "output.log").read_text()  # e.g. "4:memory:/kpl-lab/job-cg1"
    assert member_of.count(f":/{PARENT}/job-cg1\n") == len(limits["paths"]), member_of


@pytest.mark.parametrize("use_cgroups", [True, False])  # posix_spawn, and a Popen with RLIMIT_DATA
async def test_job_process_gets_its_group_folder_signals_and_three_descriptors(tmp_path, use_cgroups):
    """Whichever way it starts, the job has its own process group, no terminal, its folder, default SIGPIPE, fds 0-2."""
    launch = make_launch(
        tmp_path, "grep SigIgn /proc/self/status; cut -d' ' -f5-7 /proc/self/stat; pwd; ls /proc/self/fd"
    )
    state = await run_to_end(LocalExecutor(use_cgroups=use_cgroups), launch)
    assert state.exit_code == 0
    lines = (launch.run_dir / "output.log").read_text().split("\n")
    ignored = int(lines[0].split()[1], 16)
    assert ignored & (1 << (signal.SIGPIPE - 1)) == 0  # Python ignores SIGPIPE; the job must not
    group, session, terminal = map(int, lines[1].split())
    assert group == state.handle["pgid"]  # the group of the job's first process
    assert session != os.getsid(0) and terminal == 0  # no Ctrl-C of the server's terminal reaches it
    assert lines[2] == str(launch.algorithm_dir)
    assert lines[3:] == ["0", "1", "2", "3", ""]  # 3: the listing ls opened


@pytest.mark.parametrize("preexec", [None, os.getpid])
def test_a_job_gets_no_descriptor_its_supervisor_left_inheritable(tmp_path, preexec):
    """A descriptor without close-on-exec (a C library's, one received over a socket) stays with the supervisor."""
    stray = os.open(tmp_path, os.O_RDONLY)  # Python's own are close-on-exec: this one is not
    os.set_inheritable(stray, True)
    output = os.open(tmp_path / "output.log", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC)
    try:
        process = spawn([shutil.which("ls"), "/proc/self/fd"], tmp_path, dict(os.environ), output, preexec)
        assert process.wait() == 0
    finally:
        os.close(output)
        os.close(stray)
    assert (tmp_path / "output.log").read_text().split() == ["0", "1", "2", "3"], stray  # 3: ls's listing


def test_fallback_limits_start_children_through_preexec():
    limits = JobLimits.create("kpl-test-fallback", 64, 0.5, use_cgroups=False)
    with limits.starting() as preexec:
        assert preexec == limits.enter  # RLIMIT_DATA is set in the child


async def test_killed_job_and_supervisor_are_lost(tmp_path):
    launch = make_launch(tmp_path, "python -c 'import time; time.sleep(60)'")
    executor = LocalExecutor()
    await executor.before_start(launch)
    handle = await executor.execute(launch)
    while (full := read_json(launch.run_dir / "handle.json")) is None:
        await asyncio.sleep(0.05)
    os.kill(full["supervisor_pid"], signal.SIGKILL)
    os.killpg(full["pgid"], signal.SIGKILL)
    while is_alive(full["pid"], full["pid_start"]) or is_alive(
        full["supervisor_pid"], full["supervisor_start"]
    ):
        await asyncio.sleep(0.05)
    state = await executor.attach(launch, handle)
    assert not state.running
    assert state.reason.startswith("lost:")
    await executor.on_failure(launch, state)
    assert not any(Path(path).exists() for path in full["limits"]["paths"].values())


WORKER = """\
import json, os, sys, time
keys = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES")
print(json.dumps({k: os.environ.get(k) for k in keys}), flush=True)
if os.environ["RANK"] == os.environ.get("FAIL_RANK"):
    print("worker gave up", flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("SLEEP", "0")))
"""


async def test_workers_get_the_distributed_environment_and_their_own_logs(tmp_path):
    launch = make_launch(
        tmp_path,
        "python worker.py",
        {"worker.py": WORKER},
        limits=Resources(cpu=0.5, memory=256, devices={"gpu": 1}, workers=3),
        assigned_devices={"gpu": [2, 5, 7]},
    )
    state = await run_to_end(LocalExecutor(), launch)
    assert (state.exit_code, state.reason) == (0, None)
    logs = [launch.run_dir / "output.log", *(launch.run_dir / "logs" / f"worker-{r}.log" for r in (1, 2))]
    seen = [json.loads(log.read_text().splitlines()[0]) for log in logs]
    assert [s["RANK"] for s in seen] == ["0", "1", "2"] == [s["LOCAL_RANK"] for s in seen]
    assert {s["WORLD_SIZE"] for s in seen} == {"3"} and {s["MASTER_ADDR"] for s in seen} == {"127.0.0.1"}
    port = state.handle["master_port"]
    assert {s["MASTER_PORT"] for s in seen} == {str(port)} and port > 0
    assert [s["CUDA_VISIBLE_DEVICES"] for s in seen] == ["2", "5", "7"]  # each its share
    workers = state.handle["workers"]
    assert [w["rank"] for w in workers] == [0, 1, 2] and len({w["pgid"] for w in workers}) == 3
    assert state.handle["pid"] == workers[0]["pid"]


async def test_a_failing_worker_stops_the_others_and_fails_the_job(tmp_path):
    launch = make_launch(
        tmp_path,
        "python worker.py",
        {"worker.py": WORKER},
        limits=Resources(cpu=0.5, memory=256, workers=2),
        env={"FAIL_RANK": "1", "SLEEP": "60"},
    )
    state = await run_to_end(LocalExecutor(grace_seconds=1), launch)
    assert (state.exit_code, state.reason) == (3, "worker 1 exited with code 3: worker gave up")
    status = read_json(launch.run_dir / "status.json")
    assert not status["stopped"] and status["last_log_lines"].endswith("worker gave up")
    assert not any(is_alive(w["pid"], w["pid_start"]) for w in state.handle["workers"])


async def test_stop_reaches_every_worker(tmp_path):
    launch = make_launch(
        tmp_path,
        "python worker.py",
        {"worker.py": WORKER},
        limits=Resources(cpu=0.5, memory=256, workers=2),
        env={"SLEEP": "60"},
    )
    executor = LocalExecutor(grace_seconds=1)
    await executor.before_start(launch)
    handle = await executor.execute(launch)
    while (full := read_json(launch.run_dir / "handle.json")) is None:
        await asyncio.sleep(0.05)
    await executor.stop(launch, handle)
    while (state := await executor.poll(launch, handle)).running:
        await asyncio.sleep(0.05)
    assert state.reason == "stopped on request"
    assert read_json(launch.run_dir / "status.json")["stopped"]
    assert not any(is_alive(w["pid"], w["pid_start"]) for w in full["workers"])


async def test_a_new_supervisor_adopts_every_worker(tmp_path):
    launch = make_launch(
        tmp_path,
        "python worker.py",
        {"worker.py": WORKER},
        limits=Resources(cpu=0.5, memory=256, workers=2),
        env={"SLEEP": "60"},
    )
    executor = LocalExecutor(grace_seconds=1)
    await executor.before_start(launch)
    handle = await executor.execute(launch)
    while (full := read_json(launch.run_dir / "handle.json")) is None:
        await asyncio.sleep(0.05)
    os.kill(full["supervisor_pid"], signal.SIGKILL)
    while is_alive(full["supervisor_pid"], full["supervisor_start"]):
        await asyncio.sleep(0.05)
    state = await executor.attach(launch, handle)
    adopter = state.handle["supervisor_pid"]
    assert state.running and adopter != full["supervisor_pid"]
    while read_json(launch.run_dir / "handle.json")["supervisor_pid"] != adopter:
        await asyncio.sleep(0.05)  # it took over
    await executor.stop(launch, state.handle)
    while (state := await executor.poll(launch, state.handle)).running:
        await asyncio.sleep(0.05)
    assert state.reason == "stopped on request"
    assert not any(is_alive(w["pid"], w["pid_start"]) for w in full["workers"])


@pytest.mark.parametrize("version", [1, 2])
def test_a_job_weighs_the_cpus_it_holds_under_contention(tmp_path, version):
    # a cgroup tree laid out as the kernel's (the files it would hold), in a folder
    if version == 2:
        (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    else:
        for controller in ("memory", "cpu", "pids"):
            (tmp_path / controller).mkdir()
        (tmp_path / "memory" / "memory.limit_in_bytes").write_text("max\n")
    limits = JobLimits.create("job-w", 512, 2.5, root=tmp_path)
    assert limits.version == version
    cpus = os.cpu_count()
    if version == 2:
        job = limits.paths["unified"]
        assert (job / "cpu.weight").read_text() == "250"
        assert (job.parent / "cpu.weight").read_text() == str(min(10000, 100 * cpus))
    else:
        job = limits.paths["cpu"]
        assert (job / "cpu.shares").read_text() == "2560"
        assert (job.parent / "cpu.shares").read_text() == str(1024 * cpus)
        assert (job / "cpu.cfs_quota_us").read_text() == "250000"


def test_cgroups_made_ahead_are_renamed_and_set_to_the_jobs_limits(tmp_path):
    """A spare supervisor's cgroups (v1) become the job's by a rename, with the job's limits written."""
    for controller in ("memory", "cpu", "pids"):  # a v1 tree laid out as the kernel's, in a folder
        (tmp_path / controller).mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("max\n")
    ahead = JobLimits.create("job-rehearsal-1", 1024, 1.0, root=tmp_path)
    assert ahead.renamable
    limits = JobLimits.create("job-x", 300, 0.5, root=tmp_path, ahead=ahead)
    assert limits is ahead and set(limits.paths) == {"memory", "cpu", "pids"}
    assert all(path.name == "job-x" and path.is_dir() for path in limits.paths.values())
    assert not list(tmp_path.glob(f"*/{PARENT}/job-rehearsal-1"))
    assert (limits.paths["memory"] / "memory.limit_in_bytes").read_text() == str(300 * 1024 * 1024)
    assert (limits.paths["cpu"] / "cpu.cfs_quota_us").read_text() == "50000"
    assert (limits.paths["cpu"] / "cpu.shares").read_text() == "512"
    ahead = JobLimits.create(
        "kpl-test-ahead", 64, 1.0
    )  # the kernel's: memory+swap is kept at or over the limit
    raised = JobLimits.create("kpl-test-raised", 512, 1.0, ahead=ahead)
    try:
        assert (raised is ahead) == ahead.renamable
        if raised.version == 1:
            assert (raised.paths["memory"] / "memory.limit_in_bytes").read_text().strip() == str(512 << 20)
    finally:
        raised.remove()
    ahead = JobLimits.create("kpl-test-ahead", 64, 1.0)  # real ones: a fake tree's folders cannot be removed
    assert JobLimits.create("kpl-test-y", 64, 1.0, use_cgroups=False, ahead=ahead).version == 0
    assert not any(path.exists() for path in ahead.paths.values())  # taken over by nobody: removed
