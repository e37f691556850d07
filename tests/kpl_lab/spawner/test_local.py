"""The local spawner: a real process in its cgroup with its devices and workspace; state; refusals."""

from __future__ import annotations

import json
import os
import pwd
import re
import threading
import time
from pathlib import Path

import pytest
from tornado import web

from kpl_lab.engine.launch import Resources
from kpl_lab.spawner.local import KPLLocalSpawner

from .conftest import Group, make_user

START_TIMEOUT = 60.0


def wait_for_report(path: Path) -> dict:
    deadline = time.monotonic() + START_TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, "the notebook process never wrote its report"
        time.sleep(0.05)
    return json.loads(path.read_text())


def reservations(spawner: KPLLocalSpawner, project: str) -> dict:
    with spawner.platform.session() as session:
        return spawner.ledger.usage(session, project).to_json()


@pytest.fixture
def probe_out(tmp_path, monkeypatch):
    out = tmp_path / "report.json"
    monkeypatch.setenv("PROBE_OUT", str(out))
    return out


async def test_start_in_cgroup_with_devices_workspace_and_datasets(make_spawner, probe_out):
    vision = Group("vision", {"kpl_quota": {"gpu": 2}})
    spawner = make_spawner(make_user("alice", vision))
    spawner.user_options = {"profile": "gpu", "accelerators": 2, "memory": 2048}
    ip, port = await spawner.start()
    try:
        report = wait_for_report(probe_out)
        env = report["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert env["ASCEND_RT_VISIBLE_DEVICES"] == ""
        assert env["KPL_PROJECT"] == "vision"
        assert env["KPL_PROFILE"] == "gpu"
        assert env["JUPYTERHUB_USER"] == "alice"
        workspace = Path(spawner.platform.home) / "users" / "alice" / "workspace"
        assert report["cwd"] == str(workspace)
        assert env["JUPYTERHUB_ROOT_DIR"] == str(workspace)
        assert (workspace / "datasets").resolve() == spawner.platform.storage.kind_dir("vision", "datasets")
        assert env["JUPYTERHUB_SERVICE_URL"].endswith(f":{port}/")
        if spawner.limits.version:
            assert "kpl-lab/notebook-alice-" in report["cgroup"]
            assert env["KPL_LIMITS"].startswith("cgroup")
        else:
            assert report["rlimit_data"] == 2048 * 1024 * 1024
        assert spawner.user_options["profile"] == "gpu"
        assert reservations(spawner, "vision")["devices"] == {"gpu": [0, 1]}
        assert await spawner.poll() is None
        cgroups = list(spawner.limits.paths.values())
    finally:
        await spawner.stop(now=True)
    assert reservations(spawner, "vision")["devices"] == {}
    assert cgroups == [] or not any(path.exists() for path in cgroups)


async def test_a_notebook_that_exits_gives_back_its_reservation(make_spawner, probe_out):
    spawner = make_spawner(make_user("alice", Group("vision")))
    spawner.user_options = {"profile": "gpu"}
    await spawner.start()
    wait_for_report(probe_out)
    spawner.proc.kill()
    spawner.proc.wait()
    assert await spawner.poll() is not None
    assert reservations(spawner, "vision")["devices"] == {}
    assert spawner.get_state() == {}


async def test_fallback_limits_when_cgroups_are_off(make_spawner, probe_out):
    spawner = make_spawner(make_user("bob", Group("nlp")), use_cgroups=False)
    spawner.user_options = {"memory": 1024}
    await spawner.start()
    try:
        report = wait_for_report(probe_out)
        assert report["rlimit_data"] == 1024 * 1024 * 1024
        assert report["env"]["KPL_LIMITS"].startswith("fallback")
        assert report["env"]["CUDA_VISIBLE_DEVICES"] == ""  # no GPU asked: none visible
    finally:
        await spawner.stop(now=True)


async def test_devices_survive_a_hub_restart(make_spawner, probe_out):
    user = make_user("alice", Group("vision"))
    spawner = make_spawner(user)
    spawner.user_options = {"profile": "gpu"}
    await spawner.start()
    wait_for_report(probe_out)
    state = json.loads(json.dumps(spawner.get_state()))  # the hub stores it as JSON
    # a new hub process: a fresh spawner loads the stored state
    restored = make_spawner(user)
    restored.load_state(state)
    # the old hub's child: reap it when it dies, as init would after a real restart
    reaper = threading.Thread(target=spawner.proc.wait)
    reaper.start()
    try:
        assert restored.devices == {"gpu": [0]}
        assert restored.project == "vision"
        assert restored.limits.enforcement == spawner.limits.enforcement
        assert await restored.poll() is None
        assert json.loads(json.dumps(restored.get_state())) == state
    finally:
        await restored.stop(now=True)
        reaper.join()
        spawner.proc.__exit__(None, None, None)  # close its pipes
    assert reservations(restored, "vision")["devices"] == {}


async def test_over_quota_is_refused_with_the_message(make_spawner, probe_out):
    vision = Group("vision", {"kpl_quota": {"gpu": 1}})
    first = make_spawner(make_user("alice", vision))
    first.user_options = {"profile": "gpu"}
    await first.start()
    try:
        second = make_spawner(make_user("bob", vision))
        second.user_options = {"profile": "gpu"}
        with pytest.raises(web.HTTPError) as caught:
            await second.start()
        assert caught.value.status_code == 403
        assert caught.value.jupyterhub_message == "asks 1 GPU; project vision allows 1, 1 in use"
        assert second.proc is None
        # the admin raises the quota live: the next start reads it
        vision.properties["kpl_quota"]["gpu"] = 2
        await second.start()
        assert second.devices == {"gpu": [1]}
        await second.stop(now=True)
    finally:
        await first.stop(now=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"profile": "gpu", "project": "vision", "accelerators": 3},
            "accelerators 3 is over the maximum 2 of profile 'gpu'",
        ),
        ({"profile": "gpu", "project": "nlp"}, "profile 'gpu' is not available to project 'nlp'"),
        ({"profile": "root", "project": "vision"}, "unknown profile 'root'"),
        ({"cmd": ["sh"]}, "unknown option(s) cmd"),
    ],
)
async def test_crafted_user_options_are_refused(make_spawner, options, message):
    spawner = make_spawner(make_user("eve", Group("vision"), Group("nlp")))
    spawner.user_options = options
    with pytest.raises(web.HTTPError) as caught:
        await spawner.apply_user_options(spawner, spawner.user_options)  # the hub's hook
    assert caught.value.status_code == 400
    assert caught.value.jupyterhub_message.startswith(message)
    with pytest.raises(web.HTTPError):
        await spawner.start()  # start checks again: no bypass
    assert spawner.proc is None
    assert reservations(spawner, "vision")["devices"] == {}


async def test_nothing_leaks_between_spawns(make_spawner, probe_out):
    spawner = make_spawner(make_user("alice", Group("vision")))
    spawner.user_options = {"profile": "gpu", "accelerators": 2}
    await spawner.start()
    wait_for_report(probe_out)
    await spawner.stop(now=True)
    spawner.clear_state()
    probe_out.unlink()
    spawner.user_options = {"profile": "cpu"}
    await spawner.start()
    try:
        report = wait_for_report(probe_out)
        assert report["env"]["CUDA_VISIBLE_DEVICES"] == ""
        assert report["env"]["KPL_PROFILE"] == "cpu"
        assert spawner.devices == {}
    finally:
        await spawner.stop(now=True)


async def test_shared_gpu_profile_puts_two_notebooks_on_one_gpu(make_spawner, probe_out, tmp_path):
    vision = Group("vision")
    alice = make_spawner(make_user("alice", vision))
    bob = make_spawner(make_user("bob", vision))
    alice.user_options = bob.user_options = {"profile": "shared"}
    await alice.start()
    await bob.start()
    try:
        assert alice.devices == bob.devices == {"gpu": [0]}
    finally:
        await alice.stop(now=True)
        await bob.stop(now=True)


async def test_form_shows_the_users_profiles_and_quota(make_spawner):
    spawner = make_spawner(make_user("carol", Group("nlp", {"kpl_quota": {"memory": 2048}})))
    form = await spawner.get_options_form()
    assert 'value="cpu"' in form and 'value="shared"' in form and 'value="gpu"' not in form
    assert 'name="cpu-memory" value="512" min="1" max="2048"' in form
    assert "memory 0 of 2048 in use" in form


def test_environment_without_python_is_named(make_spawner, tmp_path):
    spawner = make_spawner(make_user("dan"))
    (profile,) = [p for p in spawner.parsed_profiles() if p.slug == "cpu"]
    from dataclasses import replace

    with pytest.raises(web.HTTPError) as caught:
        spawner.notebook_cmd(replace(profile, environment=str(tmp_path / "venv")))
    assert "has no Python at" in caught.value.jupyterhub_message
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    os.symlink(os.sys.executable, venv / "python")
    cmd = spawner.notebook_cmd(replace(profile, environment=str(tmp_path / "venv")))
    assert cmd == [str(venv / "python"), "-m", "jupyterhub.singleuser"]


async def test_a_python_the_users_account_cannot_run_is_refused(
    make_spawner, config, account_prefix, privileged_helper
):
    # the hub's own Python under /root (mode 700) as the notebook's command
    config.Platform.home = str(privileged_helper.parents[1])
    config.Platform.helper_socket = str(privileged_helper)
    spawner = make_spawner(make_user("alice", Group("vision")))
    spawner.cmd = ["/root/.pyenv/shims/python"]
    spawner.user_options = {"profile": "cpu"}
    with pytest.raises(web.HTTPError) as caught:
        await spawner.start()
    assert caught.value.status_code == 500
    assert "cannot be run by alice's account" in caught.value.log_message
    assert "user_python" in caught.value.log_message
    assert reservations(spawner, "vision") == reservations(spawner, "nobody")  # nothing held
    assert pwd.getpwnam(f"{account_prefix}alice").pw_dir == str(
        Path(spawner.platform.home) / "users" / "alice"
    )


def form_defaults(form: str) -> dict[str, list[str]]:
    """Return what a browser posts of the spawn form as it is: the checked profile, the selected project, every field."""
    posted = {"profile": re.findall(r'name="profile" value="([^"]+)" checked', form)}
    posted["project"] = re.findall(r'<option value="([^"]+)" selected', form)
    for name, value in re.findall(r'<input type="number" name="([^"]+)" value="([^"]*)"', form):
        posted[name] = [value]
    return posted


async def test_a_second_member_on_a_busy_two_core_machine_starts_with_the_forms_defaults(
    make_spawner, config, probe_out
):
    config.Ledger.cpu = 2.0
    demo = Group("demo", {"kpl_quota": {"cpu": 4, "notebooks": 3}})
    first = make_spawner(make_user("alice", demo))
    first.ledger.reserve("demo", "job", "gateway", Resources(cpu=0.5, memory=0))
    first.user_options = {"profile": "cpu"}
    await first.start()  # the profile's 1 CPU
    second = make_spawner(make_user("bob", demo))
    try:
        form = await second.get_options_form()
        assert "(max 2)" in form and "(max 4)" not in form  # the machine's 2 cores, under profile and quota
        assert "cpu capped at 0.5: profile cpu asks 1 CPU, 0.5 free now" in form
        second.user_options = second.options_from_form(form_defaults(form))
        assert second.user_options["cpu"] == 0.5
        await second.start()
        assert second.choice.cpu == 0.5
        assert reservations(second, "demo")["cpu"] == 2.0
        await second.stop(now=True)

        second.user_options = {}  # the REST API naming no amounts: the same defaults, capped so
        await second.start()
        assert second.choice.cpu == 0.5 and second.user_options["cpu"] == 0.5
        await second.stop(now=True)

        second.user_options = {"cpu": 1}  # an amount asked is never changed: refused, saying why
        with pytest.raises(web.HTTPError) as caught:
            await second.start()
        assert "the machine is busy: asks 1 CPU, 1.5 of 2 in use" in caught.value.jupyterhub_message
    finally:
        await first.stop(now=True)
