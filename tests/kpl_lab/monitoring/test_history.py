"""The usage history: a row per machine, project and user, averaged into a chart's points, kept a bounded time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kpl_lab.monitoring import history

from .conftest import snapshot

pytestmark = pytest.mark.databases


def busy(at: float, memory_percent: float = 50.0):
    """Return a snapshot at `at` of a 4-core machine: alice's job and notebook, bob's replica."""
    seen = snapshot(memory_percent=memory_percent, gpus=(80.0, 20.0))
    seen.time = at
    seen.reservations = [
        {
            "project": "vision",
            "kind": "job",
            "owner": "j1",
            "user": "alice",
            "cpu": 2,
            "memory": 200,
            "devices": {"gpu": [0]},
        },
        {
            "project": "vision",
            "kind": "notebook",
            "owner": "alice/",
            "user": "alice",
            "cpu": 1,
            "memory": 100,
            "devices": {},
        },
        {
            "project": "audio",
            "kind": "deployment",
            "owner": "r1",
            "user": "bob",
            "cpu": 1,
            "memory": 100,
            "devices": {"gpu": [1]},
        },
    ]
    seen.running = [
        {
            "id": "j1",
            "project": "vision",
            "user": "alice",
            "latest": {"cpu_percent": 200.0, "memory_mb": 150.0},
        }
    ]
    return seen


def test_rows_of_the_machine_each_project_and_each_user():
    rows = {(row["scope"], row["name"]): row["use"] for row in history.rows(busy(1000.0))}
    assert set(rows) == {
        ("machine", "node-1"),
        ("project", "vision"),
        ("project", "audio"),
        ("user", "alice"),
        ("user", "bob"),
    }
    machine = rows[("machine", "node-1")]
    assert machine["memory_percent"] == 50.0 and machine["gpu_percent"] == 50.0
    assert machine["cpu_held_percent"] == 100.0 and machine["memory_held_percent"] == 40.0
    vision = rows[("project", "vision")]
    assert vision["cpu_percent"] == 50.0  # its running job's two cores of four
    assert vision["memory_percent"] == 15.0 and vision["cpu_held_percent"] == 75.0
    assert vision["gpu_percent"] == 80.0 and vision["gpus_held"] == 1
    audio = rows[("project", "audio")]
    assert "cpu_percent" not in audio  # nothing of it is measured: only what it holds
    assert audio["gpu_percent"] == 20.0
    assert rows[("user", "alice")]["cpu_held_percent"] == 75.0


def test_a_period_is_averaged_into_points_and_old_rows_go(platform):
    start = datetime.now(UTC) - timedelta(hours=1)
    start = start.replace(second=0, microsecond=0)
    for offset, memory in ((0, 40.0), (10, 60.0), (70, 30.0)):
        history.add(platform, busy((start + timedelta(seconds=offset)).timestamp(), memory), keep_days=7)
    found = history.series(platform, "machine", "", 5 * 3600)
    assert found.name == "node-1"
    assert [point.use["memory_percent"] for point in found.points] == [50.0, 30.0]
    assert found.names == {"machine": ["node-1"], "project": ["audio", "vision"], "user": ["alice", "bob"]}
    assert [p.use["cpu_held_percent"] for p in history.series(platform, "user", "bob", 5 * 3600).points] == [
        25.0,
        25.0,
    ]
    history.add(platform, busy(datetime.now(UTC).timestamp()), keep_days=1 / 24 / 2)  # keep half an hour
    assert len(history.series(platform, "machine", "node-1", 5 * 3600).points) == 1
