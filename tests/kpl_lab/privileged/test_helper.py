"""The privileged helper, a real root process on a socket: each command does its job and refuses the rest."""

from __future__ import annotations

import grp
import json
import os
import pwd
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from kpl_lab.engine.identity import account_name, group_name
from kpl_lab.engine.runfolder import is_alive
from kpl_lab.privileged import rules
from kpl_lab.privileged.client import HelperClient, HelperError
from kpl_lab.privileged.rules import sandbox_account

ALICE = {"user": "alice", "projects": ["vision"]}


@pytest.fixture
def helper(privileged_helper) -> HelperClient:
    return HelperClient(privileged_helper)


@pytest.fixture
def home(privileged_helper) -> Path:
    return privileged_helper.parents[1]


@pytest.fixture
def storage(home) -> Path:
    return home / "storage"


@pytest.fixture
def alice(helper, account_prefix) -> pwd.struct_passwd:
    """Alice, a member of project vision."""
    helper.account("alice")
    helper.projects("alice", ["vision"])
    return pwd.getpwnam(account_name("alice", account_prefix))


def run(helper: HelperClient, who: dict, script: str, cwd: Path, **options) -> tuple[int, str]:
    """Run a shell script as `who`; return its exit code and output."""
    read, write = os.pipe()
    try:
        process = helper.spawn(
            who, ["/bin/sh", "-c", script], {"PATH": "/usr/bin:/bin"}, cwd, (0, write, write), **options
        )
    finally:
        os.close(write)
    with os.fdopen(read) as output:
        text = output.read()
    return process.wait(), text


def test_an_account_is_made_with_its_home_and_workspace_once(helper, home, account_prefix):
    first = helper.account("alice")
    assert helper.account("alice") == first
    account = pwd.getpwnam(account_name("alice", account_prefix))
    assert first["uid"] == account.pw_uid and account.pw_dir == str(home / "users" / "alice")
    assert account.pw_gecos == f"kpl-lab {home}"
    found = (home / "users" / "alice").stat()
    assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (account.pw_uid, 0o700)
    assert (home / "users" / "alice" / "workspace").stat().st_uid == account.pw_uid


def test_an_account_of_another_home_still_there_is_refused_with_the_fix(helper, account_prefix, open_folder):
    other = open_folder / "other-home"
    other.mkdir()
    name = account_name("bob", account_prefix)
    subprocess.run(["useradd", "--no-create-home", "--comment", f"kpl-lab {other}", name], check=True)
    with pytest.raises(HelperError) as refused:
        helper.account("bob")
    assert refused.value.denied
    assert f"belongs to the KPL Lab home {other}" in str(refused.value)
    assert f"userdel {name}" in str(refused.value) and "--account-prefix" in str(refused.value)
    other.rmdir()  # that home is gone (a reinstall): the account is taken over
    assert helper.account("bob")["home"].endswith("/users/bob")
    assert pwd.getpwnam(name).pw_dir.endswith("/users/bob")


def test_projects_make_groups_folders_and_sandboxes_and_sync_membership(helper, storage, account_prefix):
    helper.account("alice")
    gids = helper.projects("alice", ["vision", "audio"])["gids"]
    name = account_name("alice", account_prefix)
    assert name in grp.getgrnam(group_name("audio", account_prefix)).gr_mem
    helper.projects("alice", ["vision"])  # she left audio
    assert name not in grp.getgrnam(group_name("audio", account_prefix)).gr_mem
    assert name in grp.getgrnam(group_name("vision", account_prefix)).gr_mem
    folder = (storage / "projects" / "vision").stat()
    assert (folder.st_uid, folder.st_gid, stat.S_IMODE(folder.st_mode)) == (0, gids["vision"], 0o2750)
    sandbox = sandbox_account("vision", account_prefix)
    assert sandbox in grp.getgrnam(group_name("vision", account_prefix)).gr_mem
    assert pwd.getpwnam(sandbox).pw_shell == "/usr/sbin/nologin"


def test_a_process_runs_as_its_user_in_her_project_under_limits(helper, alice, account_prefix, open_folder):
    gid = grp.getgrnam(group_name("vision", account_prefix)).gr_gid
    code, output = run(
        helper,
        ALICE,
        "id -u; id -G; umask; cat /proc/self/cgroup | grep -c kpl-lab; echo $PATH; exit 3",
        open_folder,
        limits={"name": f"{account_prefix}test-1", "memory_mb": 64, "cpu": 0.5},
    )
    uid, groups, umask, in_cgroups, path = output.splitlines()
    assert code == 3
    assert int(uid) == alice.pw_uid
    assert sorted(int(g) for g in groups.split()) == sorted({alice.pw_gid, gid})
    assert umask == "0007"
    assert int(in_cgroups) >= 1  # born in its cgroups (v1 here: one per controller)
    assert path == "/usr/bin:/bin"


def test_the_exit_of_a_process_arrives_when_it_ends(helper, alice, open_folder):
    process = helper.spawn(ALICE, ["/bin/sleep", "0.3"], {}, open_folder)
    assert process.poll() is None and process.pid > 0
    assert process.wait() == 0


@pytest.mark.parametrize(
    ("who", "why"),
    [
        ({"user": "alice", "projects": ["audio"]}, "is not a member of project 'audio'"),
        ({"user": "nobody-here", "projects": []}, "does not exist yet"),
        ({"user": "../etc", "projects": []}, "not a user name"),
        ({"user": "alice/..", "projects": []}, "not a user name"),
        ({"sandbox": "nowhere"}, "does not exist yet"),
        ({"uid": 0}, "not a user name"),
        ("root", "expected"),
    ],
)
def test_a_process_is_started_only_as_a_user_in_her_own_projects(helper, alice, open_folder, who, why):
    helper.project("audio")  # exists, alice is not in it
    with pytest.raises(HelperError) as refused:
        helper.spawn(who, ["/bin/true"], {}, open_folder)
    assert refused.value.denied and why in str(refused.value)


def test_root_and_the_platforms_own_account_are_never_started(monkeypatch, account_prefix):
    settings = rules.Settings(Path("/h"), Path("/s"), service_uid=999, service_gid=999, prefix=account_prefix)
    for uid, why in ((0, "is root"), (999, "is the platform's own account")):
        monkeypatch.setattr(
            rules.pwd, "getpwnam", lambda name, uid=uid: pwd.struct_passwd((name, "x", uid, uid, "", "/", ""))
        )
        with pytest.raises(rules.Denied, match=why):
            rules.process_identity({"user": "mallory", "projects": []}, settings)


def test_only_the_platforms_account_and_root_may_ask(privileged_helper, alice):
    client = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
        's.sendall(b\'{"command": "account", "user": "eve"}\\n\'); print(s.recv(4096).decode())'
    )
    # the socket's folder is closed to other accounts; opened here to reach the peer check itself
    os.chmod(privileged_helper.parent, 0o755)
    os.chmod(privileged_helper, 0o666)
    done = subprocess.run(
        ["/usr/bin/python3", "-c", client, str(privileged_helper)],
        user=alice.pw_uid,
        capture_output=True,
        text=True,
        timeout=30,
    )
    answer = json.loads(done.stdout)
    assert answer["denied"] and "only the platform's account" in answer["error"]


def test_a_signal_goes_as_the_user_and_only_to_her_processes(helper, alice, open_folder):
    process = helper.spawn(ALICE, ["/bin/sleep", "60"], {}, open_folder)
    assert helper.signal(ALICE, process.pid, process.start, signal.SIGTERM)
    assert process.wait() == -signal.SIGTERM
    mine = subprocess.Popen(["/bin/sleep", "60"])  # root's own process
    try:
        assert not helper.signal(ALICE, mine.pid, None, signal.SIGKILL)  # the kernel refuses her
        assert mine.poll() is None
    finally:
        mine.kill()
        mine.wait()
    with pytest.raises(HelperError, match="not one the platform sends"):
        helper.signal(ALICE, os.getpid(), None, signal.SIGSTOP)


def test_a_pid_reused_since_is_not_signalled(helper, alice, open_folder):
    process = helper.spawn(ALICE, ["/bin/sleep", "60"], {}, open_folder)
    assert not helper.signal(ALICE, process.pid, (process.start or 0) + 1, signal.SIGKILL)
    assert is_alive(process.pid, process.start)
    helper.signal(ALICE, process.pid, process.start, signal.SIGKILL)
    process.wait()


def test_release_removes_a_processs_cgroups_and_nothing_else(helper, alice, open_folder, account_prefix):
    process = helper.spawn(
        ALICE,
        ["/bin/sleep", "60"],
        {},
        open_folder,
        limits={"name": f"{account_prefix}test-2", "memory_mb": 64, "cpu": 0.5},
    )
    paths = [Path(p) for p in process.limits["paths"].values()]
    assert paths and all(path.is_dir() for path in paths)
    helper.release(process.limits)  # kills what is in them, then removes them
    assert process.wait() == -signal.SIGKILL
    assert not any(path.exists() for path in paths)
    for bogus in ({"paths": {"memory": "/sys/fs/cgroup/memory"}}, {"paths": {"x": "/etc"}}):
        with pytest.raises(HelperError, match="not a cgroup of the platform's"):
            helper.release(bogus)


def test_give_makes_a_platform_folder_hers_and_adopt_takes_a_sandbox_one_back(
    helper, alice, storage, account_prefix
):
    run_dir = storage / "projects" / "vision" / "jobs" / "j1"
    (run_dir / "outputs").mkdir(parents=True)
    (run_dir / "job.json").write_text("{}")
    (run_dir / "output.log").write_text("")
    helper.give(ALICE, run_dir, project="vision", keep=["job.json"])
    for path, mode in ((run_dir, 0o2770), (run_dir / "outputs", 0o2770), (run_dir / "output.log", 0o660)):
        found = path.stat()
        assert (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) == (alice.pw_uid, 0, mode), path
    assert (run_dir / "job.json").stat().st_uid == 0  # what runs and as whom stays the platform's
    staged = storage / "projects" / "vision" / ".staging" / "s1"
    staged.mkdir(parents=True)
    helper.give({"sandbox": "vision"}, staged, project="vision")
    sandbox = pwd.getpwnam(sandbox_account("vision", account_prefix))
    code, _ = run(helper, {"sandbox": "vision"}, f"mkdir {staged}/part && echo x > {staged}/part/f", staged)
    assert code == 0 and (staged / "part" / "f").stat().st_uid == sandbox.pw_uid
    helper.adopt("vision", staged)
    gid = grp.getgrnam(group_name("vision", account_prefix)).gr_gid
    for path in (staged, staged / "part", staged / "part" / "f"):
        assert (path.stat().st_uid, path.stat().st_gid) == (0, gid), path


def test_give_and_adopt_refuse_folders_outside_their_project_or_through_links(
    helper, alice, storage, open_folder
):
    helper.project("audio")
    outside = open_folder / "outside"
    outside.mkdir()
    audio = storage / "projects" / "audio" / "jobs" / "j1"
    audio.mkdir(parents=True)
    linked = storage / "projects" / "vision" / "jobs"
    linked.mkdir(parents=True)
    (linked / "via").symlink_to(outside)
    for path, project in ((outside, "vision"), (audio, "vision"), (linked / "via", "vision"), ("/etc", None)):
        with pytest.raises(HelperError) as refused:
            helper.give(ALICE, path, project=project)
        assert refused.value.denied, path
    assert outside.stat().st_uid == 0 and audio.stat().st_uid == 0
    with pytest.raises(HelperError, match="not a staged folder"):
        helper.adopt("vision", storage / "projects" / "vision" / "jobs")


def test_the_helper_answers_others_while_a_process_runs(helper, alice, open_folder):
    long = helper.spawn(ALICE, ["/bin/sleep", "5"], {}, open_folder)
    started = time.monotonic()
    helper.account("alice")
    assert time.monotonic() - started < 5 and long.poll() is None
    helper.signal(ALICE, long.pid, long.start, signal.SIGKILL)
    long.wait()


def test_a_line_that_is_not_json_is_refused(privileged_helper):
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(str(privileged_helper))
        raw.sendall(b"{not json\n")
        answer = json.loads(raw.recv(4096))
    assert answer["denied"] and "not JSON" in answer["error"]
