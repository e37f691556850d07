"""Deployments as supervised replicas: ready, restarted after a crash, failed with logs, freed on delete."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest
from sqlalchemy import select

from kpl_lab.catalog.jobs import Reservation
from kpl_lab.engine.runfolder import is_alive
from kpl_lab.errors import BadRequest, Conflict, Unavailable
from kpl_lab.serving import replicas

from .conftest import port_algorithm, post, ready_url

WAIT = 120.0


def reservations(platform) -> list[Reservation]:
    with platform.session() as session:
        return list(session.scalars(select(Reservation).where(Reservation.owner_kind == "deployment")))


def until(check, timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_create_wait_predict_and_delete_frees_reservations(serving_platform, toy):
    service = serving_platform.deployments
    model = toy("cat")
    deployment = service.create("default", "pets", model, replica_count=2, algorithm="toy-serve")
    assert deployment.model_version.ref == model and len(deployment.replica_rows) == 2
    assert len(reservations(serving_platform)) == 2
    service.wait("default", "pets", WAIT)
    assert service.state(service.get("default", "pets")) == ("ready", "")
    status, body = post(ready_url(serving_platform, "default", "pets"), b"img-123")
    assert (status, body["class_name"], body["width"]) == (200, "cat", 7)
    with pytest.raises(Conflict):
        service.create("default", "pets", model, algorithm="toy-serve")
    with pytest.raises(Conflict, match="served by deployment 'pets'"):
        serving_platform.catalog.delete_model("default", model)
    assert service.delete("default", "pets") == ["pets"]
    assert reservations(serving_platform) == []
    assert service.list("default") == []


def test_a_replica_recorded_before_its_spawn_is_starting(serving_platform, toy, monkeypatch):
    """Between its row and its supervisor's start a replica is starting: a wait or a view meanwhile is not told 'stopped'."""
    service = serving_platform.deployments
    model = toy("cat")
    recorded, go = threading.Event(), threading.Event()
    spawn = replicas.spawn

    def held_spawn(run_dir):
        recorded.set()
        assert go.wait(WAIT)
        return spawn(run_dir)

    monkeypatch.setattr(replicas, "spawn", held_spawn)
    creating = threading.Thread(
        target=service.create, args=("default", "early", model), kwargs={"algorithm": "toy-serve"}
    )
    creating.start()
    try:
        assert recorded.wait(WAIT)
        [state] = service.replica_states(service.get("default", "early"))
        assert (state["state"], state.get("reason")) == ("starting", None)
        assert service.state(service.get("default", "early"))[0] == "starting"
    finally:
        go.set()
        creating.join(WAIT)
    service.wait("default", "early", WAIT)


def test_crashed_replica_is_restarted(serving_platform, toy):
    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    service.wait("default", "pets", WAIT)
    url = ready_url(serving_platform, "default", "pets")
    with pytest.raises((OSError, ValueError)):  # it died answering
        post(url, b"crash")
    (replica,) = until(
        lambda: [s for s in service.replica_states(service.get("default", "pets")) if s["restarts"]]
    )
    assert replica["reason"] == "the server exited with status 3"
    service.wait("default", "pets", WAIT)
    (replica,) = service.replica_states(service.get("default", "pets"))
    assert replica["state"] == "ready" and replica["restarts"] == 1
    os.kill(replica["pid"], signal.SIGKILL)  # killed from outside: restarted too
    until(lambda: service.replica_states(service.get("default", "pets"))[0]["restarts"] == 2)
    service.wait("default", "pets", WAIT)
    assert post(ready_url(serving_platform, "default", "pets"), b"img")[0] == 200


def test_a_server_on_a_unix_socket_or_on_its_port_is_reached(serving_platform, toy, tmp_path):
    service = serving_platform.deployments
    model = toy("cat")
    # a deploy script with a server of its own, listening on the port it is given
    serving_platform.catalog.add_algorithm(
        "default", port_algorithm(tmp_path / "own-server"), name="own-server"
    )
    service.create("default", "sock", model, algorithm="toy-serve")
    service.create("default", "tcp", model, algorithm="own-server")
    for name, scheme in (("sock", "unix:"), ("tcp", "http://127.0.0.1:")):
        service.wait("default", name, WAIT)
        url = ready_url(serving_platform, "default", name)
        assert url.startswith(scheme)
        assert post(url, b"img")[1]["class_name"] == "cat"
        (replica,) = service.replica_states(service.get("default", name))
        assert replica["url"] == url
        assert service.metrics(service.get("default", name))[model]["requests"] == 1


def test_a_model_that_cannot_load_fails_with_its_log(serving_platform, toy):
    service = serving_platform.deployments
    service.create("default", "bad", toy("broken"), algorithm="toy-serve")
    with pytest.raises(Unavailable, match="cannot load model: broken"):
        service.wait("default", "bad", WAIT)
    until(lambda: service.state(service.get("default", "bad"))[0] == "failed")
    (replica,) = service.replica_states(service.get("default", "bad"))
    assert "cannot load model: broken" in replica["last_log_lines"]
    assert replica["restarts"] == serving_platform.deployments.max_failures - 1


def test_algorithm_comes_from_lineage_or_must_be_named(serving_platform, toy):
    model = toy("cat")
    with pytest.raises(BadRequest, match="was not made by a job"):
        serving_platform.deployments.create("default", "pets", model)
    with pytest.raises(BadRequest, match="replicas"):
        serving_platform.deployments.create("default", "pets", model, replica_count=0, algorithm="toy-serve")


def test_replicas_survive_a_platform_restart_and_lost_supervisors_are_restarted(serving_platform, toy):
    from kpl_lab.platform import Platform

    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    service.wait("default", "pets", WAIT)
    again = Platform(home=serving_platform.home, config=serving_platform.config)
    try:
        assert again.deployments.reconcile() == []
        assert post(ready_url(again, "default", "pets"), b"img")[1]["class_name"] == "cat"
        (row,) = again.deployments.get("default", "pets").replica_rows
        os.kill(row.handle["supervisor_pid"], signal.SIGKILL)  # a reboot, as far as this replica knows
        until(lambda: again.deployments.state(again.deployments.get("default", "pets"))[0] != "ready")
        assert again.deployments.reconcile() == [row.id]
        again.deployments.wait("default", "pets", WAIT)
        assert post(ready_url(again, "default", "pets"), b"img")[0] == 200
    finally:
        again.close()


def test_a_suspended_platform_stops_replicas_and_gateway_and_its_next_start_restarts_them(
    serving_platform, toy
):
    from kpl_lab.serving import gateway_process

    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    service.wait("default", "pets", WAIT)
    gateway = until(lambda: gateway_process.state(serving_platform.home))
    (row,) = service.get("default", "pets").replica_rows
    (replica,) = service.replica_states(service.get("default", "pets"))
    assert service.suspend() == [row.id]  # `kpl-lab up` stopping
    assert not replicas.supervised(row.handle)
    assert not is_alive(replica["pid"], replica.get("pid_start"))
    assert not is_alive(gateway["pid"], gateway["pid_start"])
    (replica,) = service.replica_states(service.get("default", "pets"))
    assert replica["state"] == "suspended"
    assert len(reservations(serving_platform)) == 1  # the deployment keeps its place
    assert service.reconcile() == [row.id]  # the service's next start
    service.wait("default", "pets", WAIT)
    assert post(ready_url(serving_platform, "default", "pets"), b"img")[1]["class_name"] == "cat"
    assert until(lambda: gateway_process.state(serving_platform.home))
    assert service.suspend() == [row.id] and service.suspend() == []  # nothing left to stop


def test_a_replica_whose_run_folder_is_removed_stops(serving_platform, toy):
    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    service.wait("default", "pets", WAIT)
    (row,) = service.get("default", "pets").replica_rows
    (replica,) = service.replica_states(service.get("default", "pets"))
    supervisor, server = row.handle["supervisor_pid"], replica["pid"]
    shutil.rmtree(service.run_dir(row))  # the platform's home deleted under a running replica

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    until(lambda: gone(server) and gone(supervisor))
