"""Accelerator inventory: declared, NVML without a driver, npu-smi output."""

from __future__ import annotations

import pytest

from kpl_lab.engine.devices import (
    Device,
    declared_devices,
    discover,
    npu_smi_npus,
    nvml_gpus,
    parse_npu_smi_list,
)


def test_declared_inventory():
    inventory = discover({"gpu": [{"index": 0, "name": "A100", "memory_mb": 40960}, {"index": 1}]})
    assert inventory == {"gpu": [Device("gpu", 0, "A100", 40960), Device("gpu", 1)]}


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"gpu": {"index": 0}}, "devices.gpu: expected a list"),
        ({"gpu": [{"name": "A100"}]}, r"devices.gpu\[0\]: expected an object with an integer 'index'"),
        ({"npu": [{"index": 0}, {"index": 0}]}, "devices.npu: the same index is declared twice"),
    ],
)
def test_declared_inventory_errors(declared, message):
    with pytest.raises(ValueError, match=message):
        declared_devices(declared)


def test_nvml_without_a_driver_means_no_gpus():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert nvml_gpus() == []
    else:
        pynvml.nvmlShutdown()
        assert all(device.kind == "gpu" for device in nvml_gpus())


def test_npu_smi_list_is_parsed():
    text = "Totally 2 NPU in the server\nNPU ID : 0\n  Chip Name : 910B\nNPU ID : 4\n  Chip Name : 910B\n"
    assert parse_npu_smi_list(text) == [Device("npu", 0, "910B"), Device("npu", 4, "910B")]
    assert npu_smi_npus(run=lambda argv: text) == parse_npu_smi_list(text)
