"""Sandboxed workers: real processes answering calls, limited, killed on overrun, reused per project."""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import threading
import time

import pytest
from traitlets.config import Config

from kpl_lab.errors import BadRequest
from kpl_lab.platform import Platform
from kpl_lab.privileged.rules import sandbox_account
from kpl_lab.sandbox.pool import SandboxFailed, Stopped

PROBES = "kpl_lab.testing.probes"


@pytest.fixture
def sandbox(platform):
    platform.sandbox.memory_mb = 256
    yield platform.sandbox
    platform.sandbox.close()


def test_a_call_answers_json_bytes_and_logs(sandbox):
    lines = []
    assert sandbox.call("vision", f"{PROBES}:echo", [1, "two", {"3": None}], log=lines.append) == [
        1,
        "two",
        {"3": None},
    ]
    assert lines == ["item 1", "item two", "item {'3': None}"]
    assert sandbox.call("vision", f"{PROBES}:blob", 3 << 20) == b"x" * (3 << 20)


def test_errors_come_back_as_their_type_or_as_a_sandbox_failure(sandbox):
    with pytest.raises(BadRequest) as refused:
        sandbox.call("vision", f"{PROBES}:refuse", "not an image", "thumbnail")
    assert (refused.value.message, refused.value.field) == ("not an image", "thumbnail")
    with pytest.raises(SandboxFailed, match="ZeroDivisionError: a bug in the worker"):
        sandbox.call("vision", f"{PROBES}:crash")
    with pytest.raises(SandboxFailed, match="not a function a sandboxed worker runs"):
        sandbox.call("vision", "os:system", "true")


def test_a_worker_is_reused_within_its_project_only(sandbox):
    first = sandbox.call("vision", f"{PROBES}:whoami")["pid"]
    assert sandbox.call("vision", f"{PROBES}:whoami")["pid"] == first
    assert sandbox.call("audio", f"{PROBES}:whoami")["pid"] != first
    assert first != os.getpid()


def test_a_call_past_its_time_limit_is_killed_with_a_clear_error(sandbox):
    pid = sandbox.call("vision", f"{PROBES}:whoami")["pid"]
    started = time.monotonic()
    with pytest.raises(SandboxFailed, match="the nap: ran past its time limit of 0.5 s and was stopped"):
        sandbox.call("vision", f"{PROBES}:sleep", 30, what="the nap", timeout=0.5)
    assert time.monotonic() - started < 30
    with pytest.raises(ProcessLookupError):  # the worker is gone, not left sleeping
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
    assert sandbox.call("vision", f"{PROBES}:echo", "next") == "next"  # a fresh worker


def test_a_worker_past_its_memory_is_stopped(sandbox):
    with pytest.raises((SandboxFailed, BadRequest)) as failed:
        sandbox.call("vision", f"{PROBES}:allocate", 1024, what="the hog")
    message = str(failed.value)
    assert "the hog: ran out of its memory limit of 256 MB" in message or "MemoryError" in message, message


def test_a_stop_kills_the_call_at_once(sandbox):
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped):
        sandbox.call("vision", f"{PROBES}:sleep", 30, stop=stop)
    assert time.monotonic() - started < 5


def test_a_session_keeps_state_until_it_ends(sandbox):
    with sandbox.session("vision") as session:
        session.call(f"{PROBES}:keep", "a")
        session.call(f"{PROBES}:keep", "b")
        assert session.call(f"{PROBES}:kept") == ["a", "b"]
    assert sandbox.call("vision", f"{PROBES}:kept") == []  # the same worker, reset


def test_a_slow_project_does_not_hold_up_another(sandbox):
    async def both() -> float:
        slow = [
            asyncio.ensure_future(sandbox.run("vision", lambda: sandbox.call("vision", f"{PROBES}:sleep", 3)))
        ]
        slow += [
            asyncio.ensure_future(sandbox.run("vision", lambda: sandbox.call("vision", f"{PROBES}:sleep", 3)))
            for _ in range(40)
        ]  # more than every thread of the sandbox's executor
        await asyncio.sleep(0.5)
        started = time.monotonic()
        assert await sandbox.run("audio", lambda: sandbox.call("audio", f"{PROBES}:echo", 1)) == 1
        waited = time.monotonic() - started
        for task in slow:
            task.cancel()
        return waited

    sandbox.workers_per_project = 2
    assert asyncio.run(both()) < 3  # answered while vision's calls still sleep


def test_with_the_helper_a_worker_runs_as_the_projects_sandbox_account(
    privileged_helper, account_prefix, user_python
):
    home = privileged_helper.parents[1]
    config = Config(
        {"Platform": {"helper_socket": str(privileged_helper)}, "Sandbox": {"python": user_python}}
    )
    platform = Platform(home=str(home), config=config)
    try:
        found = platform.sandbox.call("vision", f"{PROBES}:whoami")
        account = pwd.getpwnam(sandbox_account("vision", account_prefix))
        vision = grp.getgrnam(f"{account_prefix.rstrip('-')}p-vision").gr_gid
        assert found["uid"] == account.pw_uid and found["groups"] == [vision]
        assert set(found["env"]) <= {
            "PATH",
            "LANG",
            "LC_ALL",
            "HOME",
            "TZ",
            "TERM",
            "TMPDIR",
            "LD_LIBRARY_PATH",
        }
    finally:
        platform.close()
