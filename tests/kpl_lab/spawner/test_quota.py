"""Quotas from group properties, reserved in the ledger: refusal messages, sharing, no over-allocation."""

from __future__ import annotations

import threading

import pytest
from traitlets.config import Config

from kpl_lab.catalog.rules import QUOTA
from kpl_lab.engine.launch import Resources
from kpl_lab.engine.ledger import Ledger
from kpl_lab.errors import BadRequest
from kpl_lab.platform import Platform
from kpl_lab.spawner.quota import (
    MachineFull,
    QuotaExceeded,
    hub_quota,
    release_notebook,
    reserve_notebook,
)

from .conftest import GPUS, Group

pytestmark = pytest.mark.databases  # notebooks reserve in the same ledger as jobs


@pytest.fixture
def ledger(tmp_path, database_url):
    config = Config({"Ledger": {"cpu": 64.0, "memory": 65536, "devices": GPUS}})
    if database_url:
        config.Platform.database_url = database_url
    platform = Platform(home=str(tmp_path / "home"), config=config)
    yield Ledger(platform)
    platform.close()


def reserve(ledger, project, owner, resources, quota, sharing=False):
    """Reserve a notebook with `quota` as the project's rule (an empty one: not limited)."""
    ledger.rules.set(QUOTA, project, quota or None)
    return reserve_notebook(ledger, project, owner, resources, sharing=sharing)


def test_quota_from_group_properties():
    groups = [Group("vision", {"kpl_quota": {"gpu": 2, "notebooks": 3}}), Group("nlp")]
    assert hub_quota(groups, "vision") == {"gpu": 2, "notebooks": 3}
    assert hub_quota(groups, "nlp") == {}
    assert hub_quota(groups, "other") == {}


@pytest.mark.parametrize(
    ("quota", "message"),
    [
        ({"gpus": 1}, r"group 'vision' properties\.kpl_quota\.gpus: unknown quota"),
        ({"gpu": -1}, r"group 'vision' properties\.kpl_quota\.gpu: expected a number >= 0, got -1"),
        ({"cpu": "8"}, r"group 'vision' properties\.kpl_quota\.cpu: expected a number >= 0, got '8'"),
        ([1], r"group 'vision' properties\.kpl_quota: expected an object such as .*, got list"),
    ],
)
def test_bad_quota_is_named(quota, message):
    with pytest.raises(BadRequest, match=message):
        hub_quota([Group("vision", {"kpl_quota": quota})], "vision")


def test_refusal_says_used_asked_allowed(ledger):
    quota = {"gpu": 2}
    first = reserve(ledger, "vision", "alice/", Resources(devices={"gpu": 1}), quota)
    assert first.devices == {"gpu": [0]}
    with pytest.raises(QuotaExceeded) as caught:
        reserve(ledger, "vision", "bob/", Resources(devices={"gpu": 2}), quota)
    assert caught.value.message == "asks 2 GPUs; project vision allows 2, 1 in use"
    assert caught.value.status == 403
    # another project is not limited by vision's quota
    assert reserve(ledger, "nlp", "carol/", Resources(devices={"gpu": 2}), {}).devices == {"gpu": [1, 2]}


def test_cpu_memory_and_notebook_count(ledger):
    quota = {"cpu": 3, "memory": 4096, "notebooks": 2}
    reserve(ledger, "p", "a/", Resources(cpu=2, memory=1024), quota)
    with pytest.raises(QuotaExceeded, match=r"^asks 2 CPUs; project p allows 3, 2 in use$"):
        reserve(ledger, "p", "b/", Resources(cpu=2, memory=1024), quota)
    with pytest.raises(QuotaExceeded, match=r"^asks 4000 MB of memory; project p allows 4096, 1024 in use$"):
        reserve(ledger, "p", "b/", Resources(cpu=1, memory=4000), quota)
    reserve(ledger, "p", "b/", Resources(cpu=1, memory=1024), quota)
    with pytest.raises(QuotaExceeded, match=r"^asks 1 notebook; project p allows 2, 2 in use$"):
        reserve(ledger, "p", "c/", Resources(cpu=0.1, memory=64), quota)
    release_notebook(ledger, "a/")
    reserve(ledger, "p", "c/", Resources(cpu=0.1, memory=64), quota)


def test_restart_replaces_a_stale_reservation(ledger):
    reserve(ledger, "p", "a/", Resources(devices={"gpu": 2}), {})
    again = reserve(ledger, "p", "a/", Resources(devices={"gpu": 1}), {"gpu": 1})
    assert again.devices == {"gpu": [0]}


def test_machine_busy(ledger):
    reserve(ledger, "a", "a/", Resources(devices={"gpu": 3}), {})
    with pytest.raises(
        MachineFull, match=r"^the machine is busy: asks 1 GPU, 3 of 3 in use; try again later$"
    ):
        reserve(ledger, "b", "b/", Resources(devices={"gpu": 1}), {})


def test_sharing_notebooks_share_a_gpu_jobs_do_not(ledger):
    one = reserve(ledger, "v", "a/", Resources(devices={"gpu": 1}), {"gpu": 1}, sharing=True)
    two = reserve(ledger, "v", "b/", Resources(devices={"gpu": 1}), {"gpu": 1}, sharing=True)
    assert one.devices == two.devices == {"gpu": [0], "shared": ["gpu"]}
    # an exclusive notebook or job never lands on the shared GPU
    exclusive = reserve(ledger, "w", "c/", Resources(devices={"gpu": 2}), {})
    assert exclusive.devices == {"gpu": [1, 2]}
    with pytest.raises(MachineFull):
        reserve(ledger, "w", "d/", Resources(devices={"gpu": 1}), {})
    assert ledger.reserve("w", "job", "j1", Resources(devices={"gpu": 1})) is None
    # nor does a sharing notebook land on an exclusive GPU
    release_notebook(ledger, "a/")
    release_notebook(ledger, "b/")
    release_notebook(ledger, "c/")
    reserve(ledger, "w", "c/", Resources(devices={"gpu": 1}), {})
    assert reserve(ledger, "v", "a/", Resources(devices={"gpu": 1}), {}, sharing=True).devices["gpu"] == [1]


def test_twenty_simultaneous_starts_against_a_quota_of_five(ledger):
    quota = {"gpu": 5, "notebooks": 20}
    ledger.devices = {"gpu": [{"index": i} for i in range(8)]}
    ledger.load_config()  # the machine's capacity is a rule
    barrier = threading.Barrier(20)
    granted, refused, errors = [], [], []

    def start(number: int) -> None:
        barrier.wait()
        try:
            granted.append(reserve(ledger, "vision", f"user{number}/", Resources(devices={"gpu": 1}), quota))
        except QuotaExceeded as error:
            refused.append(error.message)
        except Exception as error:  # noqa: BLE001 - any other failure fails the test below
            errors.append(error)

    threads = [threading.Thread(target=start, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(granted) == 5 and len(refused) == 15
    assert sorted(i for r in granted for i in r.devices["gpu"]) == [0, 1, 2, 3, 4]
    assert set(refused) == {"asks 1 GPU; project vision allows 5, 5 in use"}
    with ledger.locked() as session:
        assert len(ledger.usage(session, "vision").devices["gpu"]) == 5
