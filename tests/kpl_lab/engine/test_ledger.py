"""The ledger: capacity and quota refusals, device indexes, atomic reservations from threads and processes."""

from __future__ import annotations

import threading

import pytest
from traitlets.config import Config

from kpl_lab.engine.launch import Resources
from kpl_lab.engine.ledger import Ledger
from kpl_lab.errors import BadRequest
from kpl_lab.platform import Platform
from kpl_lab.testing.load import reserve_at_once

GPUS = {"gpu": [{"index": 0}, {"index": 1}, {"index": 2}]}


pytestmark = pytest.mark.databases


@pytest.fixture
def ledger(tmp_path, database_url):
    config = Config(
        {"Ledger": {"cpu": 5.0, "memory": 8192, "devices": GPUS, "quotas": {"small": {"gpu": 1}}}}
    )
    if database_url:
        config.Platform.database_url = database_url
    platform = Platform(home=str(tmp_path / "home"), config=config)
    yield Ledger(platform)
    platform.close()


def test_capacity_from_config(ledger):
    assert ledger.capacity() == {"cpu": 5.0, "memory": 8192, "devices": {"gpu": [0, 1, 2]}}


def test_a_host_that_declares_no_capacity_keeps_the_declared_one(ledger, database_url):
    """The hub's spawner declares the machine (c.Ledger in jupyterhub_config.py); the service, started after, does not."""
    ledger.load_config()
    config = Config({"Platform": {"database_url": database_url}} if database_url else {})
    service = Platform(home=ledger.platform.home, config=config)
    try:
        Ledger(service).load_config()  # its own view: this machine's cores, memory and no declared devices
        assert Ledger(service).capacity() == {"cpu": 5.0, "memory": 8192, "devices": {"gpu": [0, 1, 2]}}
    finally:
        service.close()


def test_defaults_are_this_machine(tmp_path):
    platform = Platform(home=str(tmp_path / "home"))
    machine = Ledger(platform)
    assert machine.cpu >= 1 and machine.memory > 0
    platform.close()


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        (Resources(cpu=6), "asks 6 CPUs; this machine has 5"),
        (Resources(memory=9000), "asks 9000 MB of memory; this machine has 8192"),
        (Resources(devices={"gpu": 4}), "asks 4 GPUs; this machine has 3"),
        (Resources(devices={"npu": 1}), "asks 1 NPU; this machine has 0"),
    ],
)
def test_refuses_what_never_fits(ledger, resources, message):
    with pytest.raises(BadRequest, match=message):
        ledger.check("p", resources)


def test_refuses_over_quota(ledger):
    with pytest.raises(BadRequest, match="asks 2 GPUs; project small allows 1"):
        ledger.check("small", Resources(devices={"gpu": 2}))


def test_workers_hold_their_amounts_each(ledger):
    with pytest.raises(BadRequest, match=r"asks 6 CPUs \(3 workers × 2 CPUs\); this machine has 5"):
        ledger.check("p", Resources(cpu=2, workers=3))
    with pytest.raises(BadRequest, match=r"asks 2 GPUs \(2 workers × 1 GPU\); project small allows"):
        ledger.check("small", Resources(devices={"gpu": 1}, workers=2))
    held = ledger.reserve("p", "job", "a", Resources(cpu=2, memory=1000, devices={"gpu": 1}, workers=2))
    assert (held.cpu, held.memory, held.devices) == (4, 2000, {"gpu": [0, 1]})
    assert ledger.reserve("p", "job", "b", Resources(cpu=1, memory=100, workers=2)) is None


def test_devices_are_picked_by_index_and_released(ledger):
    first = ledger.reserve("p", "job", "a", Resources(cpu=1, memory=100, devices={"gpu": 2}))
    second = ledger.reserve("p", "notebook", "b", Resources(cpu=1, memory=100, devices={"gpu": 1}))
    assert (first.devices, second.devices) == ({"gpu": [0, 1]}, {"gpu": [2]})
    assert ledger.reserve("p", "job", "c", Resources(cpu=1, memory=100, devices={"gpu": 1})) is None
    ledger.release("job", "a")
    third = ledger.reserve("p", "job", "c", Resources(cpu=1, memory=100, devices={"gpu": 2}))
    assert third.devices == {"gpu": [0, 1]}


def test_quota_holds_across_reservations(ledger):
    assert ledger.reserve("small", "job", "a", Resources(cpu=1, memory=100, devices={"gpu": 1})) is not None
    assert ledger.reserve("small", "job", "b", Resources(cpu=1, memory=100, devices={"gpu": 1})) is None
    assert ledger.reserve("other", "job", "c", Resources(cpu=1, memory=100, devices={"gpu": 1})) is not None


def test_concurrent_reservations_never_over_reserve(ledger):
    granted, errors = [], []

    def reserve(number: int) -> None:
        try:
            if ledger.reserve("p", "job", f"j{number}", Resources(cpu=1, memory=100)) is not None:
                granted.append(number)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=reserve, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(granted) == 5
    with ledger.locked() as session:
        assert ledger.usage(session).cpu == 5.0


def test_processes_reserving_at_once_never_exceed_a_small_quota(tmp_path, database_url):
    settings = {
        "Platform": {
            "home": str(tmp_path / "home"),
            **({"database_url": database_url} if database_url else {}),
        },
        "Ledger": {"cpu": 64.0, "memory": 8192, "devices": {"gpu": []}, "quotas": {"p": {"cpu": 5}}},
    }
    answers = reserve_at_once(settings, "p", processes=20)
    assert [error for *_, error in answers if error] == []
    assert sum(granted for _, _, granted, _ in answers) == 5
    platform = Platform(config=Config(settings))
    try:
        with Ledger(platform).locked() as session:
            assert Ledger(platform).usage(session, "p").cpu == 5.0
    finally:
        platform.close()
