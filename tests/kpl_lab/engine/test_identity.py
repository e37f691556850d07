"""Users and projects as OS accounts and groups: the name mapping, group sync, dropping to a user."""

from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kpl_lab.engine import identity
from kpl_lab.engine.forkserver import PACKAGE_PARENT
from kpl_lab.engine.identity import account_name, group_name, unix_name
from kpl_lab.engine.launch import JobLaunch, Resources
from kpl_lab.engine.local import LocalExecutor
from kpl_lab.engine.runfolder import read_own_json, worker_log

VALID = re.compile(r"[a-z_][a-z0-9_-]*")


@pytest.mark.parametrize(
    ("hub_name", "account"),
    [
        ("alice", "kpl-alice"),
        ("bob_2", "kpl-bob_2"),
        ("Alice", "kpl-alice--" + identity.hashlib.sha256(b"Alice").hexdigest()[:12]),
        (
            "a.smith@lab.org",
            "kpl-a-smith-lab-or--" + identity.hashlib.sha256(b"a.smith@lab.org").hexdigest()[:12],
        ),
    ],
)
def test_hub_names_map_to_accounts(hub_name, account):
    assert account_name(hub_name) == account


def test_an_escaped_name_never_equals_a_kept_one():
    escaped = account_name("Alice")
    impostor = escaped.removeprefix("kpl-")  # a hub user who names herself like the escaped account
    assert account_name(impostor) != escaped
    assert "--" in account_name(impostor)  # a kept name never holds "--": hers is escaped too


def test_long_names_are_cut_and_stay_apart():
    first, second = "x" * 40 + "1", "x" * 40 + "2"
    assert len(account_name(first)) == identity.NAME_MAX
    assert account_name(first) != account_name(second)
    assert group_name("vision") == "kplp-vision"


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
def test_every_name_maps_to_a_valid_distinct_unix_name(one, other):
    for name in (one, other):
        mapped = unix_name(name, "kpl-")
        assert VALID.fullmatch(mapped) and len(mapped) <= identity.NAME_MAX, mapped
    if one != other:
        assert unix_name(one, "kpl-") != unix_name(other, "kpl-")


def members(group: str) -> list[str]:
    return grp.getgrnam(group).gr_mem


def test_accounts_are_made_once_and_groups_follow_the_projects(account_prefix, open_folder):
    name = account_name("alice", account_prefix)
    home = open_folder / "users" / "alice"
    made = identity.ensure_account(name, home)
    assert identity.ensure_account(name, home).pw_uid == made.pw_uid  # idempotent
    assert made.pw_uid != 0 and made.pw_dir == str(home)
    assert (home.stat().st_uid, stat.S_IMODE(home.stat().st_mode)) == (made.pw_uid, 0o700)

    gids = identity.sync_groups(name, ["vision", "audio"], account_prefix)
    vision, audio = group_name("vision", account_prefix), group_name("audio", account_prefix)
    assert sorted(gids) == sorted([grp.getgrnam(vision).gr_gid, grp.getgrnam(audio).gr_gid])
    assert name in members(vision) and name in members(audio)
    assert sorted(os.getgrouplist(name, made.pw_gid)) == sorted([made.pw_gid, *gids])

    identity.sync_groups(name, ["audio"], account_prefix)  # she left vision
    assert name not in members(vision) and name in members(audio)


def test_a_project_folder_is_its_groups_only(account_prefix, open_folder):
    gid = identity.ensure_group(group_name("vision", account_prefix))
    project = open_folder / "projects" / "vision"
    version = project / "datasets" / "digits" / "1"
    version.mkdir(parents=True, mode=0o750)
    (version / "part-0.arrow").write_text("records")
    (version / "part-0.arrow").chmod(0o400)  # stored before the group existed: root's only
    (project / "jobs").mkdir()
    identity.secure_project(project, gid)
    for folder, mode in ((project, 0o2750), (project / "jobs", 0o2750), (project / "datasets", 0o3770)):
        assert folder.stat().st_gid == gid
        assert stat.S_IMODE(folder.stat().st_mode) == mode
    assert (version.stat().st_gid, stat.S_IMODE(version.stat().st_mode)) == (gid, 0o2750)
    part = (version / "part-0.arrow").stat()
    assert (part.st_gid, stat.S_IMODE(part.st_mode)) == (gid, 0o440)  # the group reads it, still read-only


def run_as(who: identity.Identity, code: str) -> dict:
    """Run Python code in a child dropped to `who`; return what it reported."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop, run, report, never return into pytest
        os.close(read)
        try:
            who.become()
            scope: dict = {}
            exec(code, scope)
            report = scope["report"]
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            report = {"error": repr(error)}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def test_a_dropped_process_reads_its_project_and_nothing_else(account_prefix, open_folder):
    name = account_name("alice", account_prefix)
    identity.ensure_account(name, open_folder / "users" / "alice")
    mine = identity.ensure_group(group_name("vision", account_prefix))
    other = identity.ensure_group(group_name("audio", account_prefix))
    for project, gid in (("vision", mine), ("audio", other)):
        folder = open_folder / "projects" / project
        folder.mkdir(parents=True)
        (folder / "data.txt").write_text(project)
        identity.secure_project(folder, gid)
    secret = open_folder / "secrets.json"
    secret.write_text("{}")
    secret.chmod(0o600)
    who = identity.identity_of(name, [mine])
    report = run_as(
        who,
        f"""
import os
report = {{"uid": os.getuid(), "groups": os.getgroups(), "umask": os.umask(0)}}
report["mine"] = open({str(open_folder / "projects/vision/data.txt")!r}).read()
for key, path in (("other", {str(open_folder / "projects/audio/data.txt")!r}), ("secret", {str(secret)!r})):
    try:
        open(path).read()
        report[key] = "read"
    except PermissionError:
        report[key] = "refused"
""",
    )
    assert report == {
        "uid": pwd.getpwnam(name).pw_uid,
        "groups": [mine],
        "umask": identity.USERS_UMASK,
        "mine": "vision",
        "other": "refused",
        "secret": "refused",
    }


def test_a_job_runs_as_its_submitter_in_its_projects_group(account_prefix, open_folder, privileged_helper):
    storage = open_folder / "home" / "storage"
    algorithm = storage / "projects" / "vision" / "algorithms" / "a" / "1"
    algorithm.mkdir(parents=True)
    secret = open_folder / "kpl.sqlite"
    secret.write_text("catalog")
    secret.chmod(0o600)
    launch = JobLaunch(
        job_id="j1",
        project="vision",
        function="train",
        cmd=f"id -u; id -G; touch $KPL_ENV_OUTPUT_ROOT_PATH/model/weights; cat {secret}; echo $HOME",
        algorithm_dir=algorithm,
        run_dir=storage / "projects" / "vision" / "jobs" / "j1",
        outputs=["model"],
        user="alice",
    )
    executor = LocalExecutor(helper_socket=str(privileged_helper))

    async def run() -> None:
        await executor.before_start(launch)
        handle = await executor.execute(launch)
        while (await executor.poll(launch, handle)).running:
            await asyncio.sleep(0.05)

    asyncio.run(run())
    account = pwd.getpwnam(account_name("alice", account_prefix))
    gid = grp.getgrnam(group_name("vision", account_prefix)).gr_gid
    uid, groups, *rest = (launch.run_dir / "output.log").read_text().splitlines()
    assert int(uid) == account.pw_uid
    assert [int(g) for g in groups.split()] == [account.pw_gid, gid]
    assert "Permission denied" in rest[0]
    assert rest[1] == str(open_folder / "home" / "users" / "alice")
    weights = launch.run_dir / "outputs" / "model" / "weights"
    assert weights.stat().st_uid == account.pw_uid
    assert weights.stat().st_gid == os.getegid()  # the platform's group reads her outputs
    run_dir = launch.run_dir.stat()
    assert (run_dir.st_uid, run_dir.st_gid) == (account.pw_uid, os.getegid())
    assert stat.S_IMODE(run_dir.st_mode) == 0o2770  # hers; the platform's group reads and writes it
    for name in ("job.json", "supervisor.json"):  # what runs and as whom: the platform's word only
        assert (launch.run_dir / name).stat().st_uid == os.geteuid()


def test_a_supervisor_refuses_a_supervisor_json_its_user_wrote(account_prefix, open_folder):
    name = account_name("mallory", account_prefix)
    account = identity.ensure_account(name, open_folder / "users" / "mallory")
    run_dir = open_folder / "jobs" / "j3"
    run_dir.mkdir(parents=True)
    marker = open_folder / "ran-as-root"
    launch = JobLaunch(
        job_id="j3", project="vision", function="train", cmd="true", algorithm_dir=run_dir, run_dir=run_dir
    )
    (run_dir / "job.json").write_text(json.dumps(launch.to_json()))
    # what the job's user could write in her run folder: callbacks the root supervisor would import and call
    (run_dir / "supervisor.json").write_text(
        json.dumps({"callbacks": "os:system", "callbacks_config": f"touch {marker}"})
    )
    os.chown(run_dir / "supervisor.json", account.pw_uid, account.pw_gid)
    done = subprocess.run(
        [sys.executable, "-m", "kpl_lab.engine.supervisor", str(run_dir)],
        env={**os.environ, "PYTHONPATH": PACKAGE_PARENT},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "supervisor.json: missing, or not written by this account" in done.stderr
    assert not marker.exists() and not (run_dir / "status.json").exists()


def test_every_worker_runs_as_the_submitter_and_owns_its_log(account_prefix, open_folder, privileged_helper):
    storage = open_folder / "home" / "storage"
    algorithm = storage / "projects" / "vision" / "algorithms" / "a" / "1"
    algorithm.mkdir(parents=True)
    launch = JobLaunch(
        job_id="j2",
        project="vision",
        function="train",
        cmd="id -u; echo $HOME",
        algorithm_dir=algorithm,
        run_dir=storage / "projects" / "vision" / "jobs" / "j2",
        limits=Resources(cpu=0.5, memory=256, workers=2),
        user="alice",
    )
    executor = LocalExecutor(helper_socket=str(privileged_helper))

    async def run() -> None:
        await executor.before_start(launch)
        handle = await executor.execute(launch)
        while (await executor.poll(launch, handle)).running:
            await asyncio.sleep(0.05)

    asyncio.run(run())
    account = pwd.getpwnam(account_name("alice", account_prefix))
    for rank in (0, 1):
        log = worker_log(launch.run_dir, rank)
        assert log.read_text().splitlines() == [
            str(account.pw_uid),
            str(open_folder / "home" / "users" / "alice"),
        ]
        assert log.stat().st_uid == account.pw_uid


def test_a_child_born_under_its_limits_only_drops_to_the_user(account_prefix, open_folder):
    name = account_name("alice", account_prefix)
    identity.ensure_account(name, open_folder / "users" / "alice")
    who = identity.identity_of(name, [])
    pid = os.fork()
    if pid == 0:  # the child: the preexec of a cgroup v1 start (no limits to enter), then report
        code = 1
        try:
            who.preexec(None)()
            code = 0 if os.getuid() == who.uid else 1
        finally:
            os._exit(code)  # never return into pytest
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_supervisor_writes_through_no_link_its_user_put_in_the_run_folder(
    account_prefix, open_folder, privileged_helper
):
    """Her run folder is hers: links in place of a log, the logs folder or the lock lead root nowhere."""
    storage = open_folder / "home" / "storage"
    algorithm = storage / "projects" / "vision" / "algorithms" / "a" / "1"
    algorithm.mkdir(parents=True)
    victim = open_folder / "victim.txt"  # a file of root's she wants written
    victim.write_text("root's")
    victim.chmod(0o600)
    victims = open_folder / "victims"  # a folder of root's she wants a file made in
    victims.mkdir(mode=0o700)
    executor = LocalExecutor(helper_socket=str(privileged_helper))
    planted = {
        "j4": ("output.log", victim),
        "j5": ("logs", victims),
        "j6": ("supervisor.lock", victims / "lock"),
        "j7": ("output.log", None),  # a FIFO no one reads: opening it to append would fail
    }
    ends = {}

    async def run(job_id: str) -> None:
        launch = JobLaunch(
            job_id=job_id,
            project="vision",
            function="train",
            cmd="echo ran",
            algorithm_dir=algorithm,
            run_dir=storage / "projects" / "vision" / "jobs" / job_id,
            limits=Resources(cpu=0.5, memory=256, workers=2),
            user="alice",
        )
        await executor.before_start(launch)  # the run folder is hers from here on
        name, target = planted[job_id]
        if (launch.run_dir / name).is_dir():
            shutil.rmtree(launch.run_dir / name)
        (launch.run_dir / name).unlink(missing_ok=True)
        if target is None:
            os.mkfifo(launch.run_dir / name)
        else:
            (launch.run_dir / name).symlink_to(target)
        handle = await executor.execute(launch)
        for _ in range(1200):
            if not (await executor.poll(launch, handle)).running:
                break
            await asyncio.sleep(0.05)
        ends[job_id] = read_own_json(launch.run_dir / "status.json") or {}

    for job_id in planted:
        asyncio.run(run(job_id))
    assert victim.read_text() == "root's" and list(victims.iterdir()) == []
    for job_id in ("j4", "j5"):  # the job could not start: it says why
        assert "symbolic link" in ends[job_id].get("reason", ""), ends[job_id]
    assert ends["j6"] == {}  # the supervisor left at once: no lock, no job
    assert "not a plain file" in ends["j7"].get("reason", ""), ends["j7"]
