"""The accelerators of this machine: NVML GPUs, NPUs through a reader, or a declared inventory."""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .usage import read_gpus

log = logging.getLogger(__name__)

# The variable that tells a process which devices of a kind it may use.
VISIBLE_DEVICES_VARIABLE = {"gpu": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}


@dataclass(frozen=True)
class Device:
    """One accelerator: its kind, index on this machine, model name and memory."""

    kind: str
    index: int
    name: str = ""
    memory_mb: int = 0

    def to_json(self) -> dict:
        return asdict(self)


def nvml_gpus() -> list[Device]:
    """Return the NVIDIA GPUs NVML sees; none when there is no driver."""
    gpus, why = read_gpus()
    if why is not None:
        log.info("%s: no GPUs", why)
    return [Device("gpu", gpu["index"], gpu["name"], int(gpu["memory_total_mb"])) for gpu in gpus]


def npu_smi_npus(run: Callable[[list[str]], str] | None = None) -> list[Device]:
    """Return the Ascend NPUs `npu-smi info -l` lists; none when the tool is absent."""
    if run is None:
        if shutil.which("npu-smi") is None:
            return []

        def run(argv: list[str]) -> str:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout

    try:
        text = run(["npu-smi", "info", "-l"])
    except (OSError, subprocess.SubprocessError) as error:
        log.warning("npu-smi failed (%s): no NPUs", error)
        return []
    return parse_npu_smi_list(text)


def parse_npu_smi_list(text: str) -> list[Device]:
    """Parse `npu-smi info -l` output (`NPU ID : 0`, `Chip Name : 910B` ...)."""
    npus: list[Device] = []
    index: int | None = None
    name = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "npu id":
            if index is not None:
                npus.append(Device("npu", index, name))
            index, name = int(value), ""
        elif key in ("chip name", "product name", "name") and not name:
            name = value
    if index is not None:
        npus.append(Device("npu", index, name))
    return npus


def declared_devices(declared: dict) -> dict[str, list[Device]]:
    """Return the devices of a declared inventory: `{"gpu": [{"index": 0, "name": ..., "memory_mb": ...}]}`."""
    inventory: dict[str, list[Device]] = {}
    for kind, entries in declared.items():
        if not isinstance(entries, list):
            raise ValueError(f"devices.{kind}: expected a list of devices, got {type(entries).__name__}")
        devices = []
        for position, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("index"), int):
                raise ValueError(f"devices.{kind}[{position}]: expected an object with an integer 'index'")
            devices.append(
                Device(kind, entry["index"], str(entry.get("name", "")), int(entry.get("memory_mb", 0)))
            )
        indexes = [device.index for device in devices]
        if len(set(indexes)) != len(indexes):
            raise ValueError(f"devices.{kind}: the same index is declared twice")
        inventory[kind] = devices
    return inventory


def discover(declared: dict | None = None) -> dict[str, list[Device]]:
    """Return the accelerators by kind: the declared inventory if any, else NVML and npu-smi."""
    if declared:
        return declared_devices(declared)
    inventory = {}
    gpus = nvml_gpus()
    if gpus:
        inventory["gpu"] = gpus
    npus = npu_smi_npus()
    if npus:
        inventory["npu"] = npus
    return inventory
