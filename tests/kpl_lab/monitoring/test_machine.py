"""Live use of the machine with a fake NVML, without GPUs, with an NPU reader, and its disks."""

from __future__ import annotations

import os

from kpl_lab.engine.usage import read_gpus
from kpl_lab.monitoring.machine import disks, sample

from .conftest import FakeNVML, two_gpus


def test_each_gpu_with_its_use_and_processes():
    nvml = two_gpus()
    record = sample(nvml=nvml)
    gpus = record["gpus"]
    assert record["gpu_error"] is None
    assert [gpu["name"] for gpu in gpus] == ["Fake A100", "Fake A100"]
    assert gpus[0]["utilization_percent"] == 75
    assert (gpus[0]["memory_used_mb"], gpus[0]["memory_total_mb"]) == (1000, 40960)
    [process] = gpus[0]["processes"]
    assert process["pid"] == os.getpid()
    assert process["memory_mb"] == 900
    assert process["user"]  # this test's user (or its JUPYTERHUB_USER)
    assert gpus[1]["processes"] == []
    assert nvml.open == 0  # NVML shut down again


def test_a_process_that_ended_is_named_by_its_pid():
    nvml = FakeNVML([{"name": "g", "utilization": 1, "used": 1, "total": 2, "processes": [(2**22 + 7, 1)]}])
    gpus = sample(nvml=nvml)["gpus"]
    assert gpus[0]["processes"][0]["user"] == f"pid {2**22 + 7}"


def test_the_one_gpu_reader_reads_the_indexes_asked_for():
    gpus, why = read_gpus([1], nvml=two_gpus())
    assert why is None and [(g["index"], g["utilization_percent"], g["processes"]) for g in gpus] == [
        (1, 0.0, [])
    ]


def test_no_gpus_says_why():
    gpus, why = read_gpus(nvml=FakeNVML([], fail_init=RuntimeError("NVML Shared Library Not Found")))
    assert gpus == []
    assert why == "no NVIDIA GPU here (NVML Shared Library Not Found)"


def test_sample_without_gpus_still_has_cpu_and_memory():
    record = sample(nvml=FakeNVML([], fail_init=RuntimeError("Driver Not Loaded")))
    assert record["gpus"] == []
    assert "Driver Not Loaded" in record["gpu_error"]
    assert record["cpu_count"] >= 1
    assert 0 < record["memory_used_mb"] <= record["memory_total_mb"]
    assert record["npus"] == []
    assert record["npu_error"] == "no NPU reader configured"


def test_sample_with_an_npu_reader():
    npus = [{"index": 0, "name": "Ascend 910", "utilization_percent": 40}]
    record = sample(nvml=two_gpus(), npu_reader=lambda: npus)
    assert record["npus"] == npus
    assert record["npu_error"] is None
    assert len(record["gpus"]) == 2


def test_a_failing_npu_reader_is_reported_not_raised():
    def broken() -> list[dict]:
        raise OSError("npu-smi: not found")

    record = sample(nvml=two_gpus(), npu_reader=broken)
    assert record["npus"] == []
    assert record["npu_error"] == "the NPU reader failed: npu-smi: not found"


def test_disks_are_counted_once_each(tmp_path):
    (tmp_path / "a").mkdir()
    found = disks([str(tmp_path), str(tmp_path / "a"), str(tmp_path / "missing")])
    assert len(found) == 1 and found[0]["path"] == str(tmp_path)
    assert 0 < found[0]["used_bytes"] <= found[0]["total_bytes"]
    assert found[0]["percent"] > 0
