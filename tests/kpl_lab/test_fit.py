"""The magics' job defaults: capped at what is free now on the machine and in the quota, with notes."""

from __future__ import annotations

from kpl_lab.fit import fit_now, room


def devices(cpu=2.0, used_cpu=0.0, gpus=(), used_gpus=(), quota=None, project_cpu=0.0) -> dict:
    return {
        "capacity": {"cpu": cpu, "memory": 8192, "devices": {"gpu": list(gpus)} if gpus else {}},
        "used": {"cpu": used_cpu, "memory": 512, "devices": {"gpu": list(used_gpus)} if used_gpus else {}},
        "project_used": {"cpu": project_cpu, "memory": 0, "devices": {}},
        "quota": quota,
        "devices": [],
    }


def test_what_fits_is_left_as_it_is():
    assert fit_now({"cpu": 2, "memory": 2048}, devices()) == ({}, [])


def test_your_notebook_holding_a_core_caps_the_job_at_the_other():
    assert fit_now({"cpu": 2, "memory": 2048}, devices(used_cpu=1)) == (
        {"cpu": 1.0},
        ["cpu capped at 1: environment.yml asks 2 CPUs, 1 free now"],
    )


def test_what_the_user_gave_is_never_changed():
    assert fit_now({"cpu": 2}, devices(used_cpu=1), given={"cpu": 2}) == ({}, [])


def test_nothing_free_leaves_the_default_to_wait_in_the_queue():
    assert fit_now({"cpu": 1}, devices(used_cpu=2)) == ({}, [])


def test_the_quota_caps_too_and_workers_share_what_is_free():
    assert room(devices(cpu=8, quota={"cpu": 3}, project_cpu=1))["cpu"] == (2.0, 3.0)
    assert fit_now({"cpu": 2, "workers": 2}, devices(cpu=8, quota={"cpu": 3}, project_cpu=0)) == (
        {"cpu": 1.5},
        ["cpu capped at 1.5: environment.yml asks 2 CPUs, 3 free now for 2 workers"],
    )


def test_a_gpu_the_machine_never_has_becomes_0_and_a_busy_one_waits():
    assert fit_now({"cpu": 1, "gpu": 1}, devices()) == (
        {"gpu": 0},
        ["gpu 0: environment.yml asks 1 GPU; none can be had here"],
    )
    assert fit_now({"cpu": 1, "gpu": 1}, devices(gpus=[0], used_gpus=[0])) == ({}, [])
