"""Fixtures of the monitoring tests: a local SMTP server (aiosmtpd), a webhook receiver, machine samples."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from aiosmtpd.controller import Controller

from kpl_lab.monitoring.snapshot import Snapshot

MB = 1 << 20


def machine(memory_percent: float = 10.0, disk_percent: float = 20.0, gpus: tuple[float, ...] = ()) -> dict:
    """Return a machine sample of a 4-core, 1000 MB machine with this much memory and disk in use."""
    return {
        "time": time.time(),
        "machine": "node-1",
        "cpu_percent": 25.0,
        "cpu_count": 4,
        "memory_used_mb": int(memory_percent * 10),
        "memory_total_mb": 1000,
        "disks": [
            {"path": "/srv", "used_bytes": int(disk_percent), "total_bytes": 100, "percent": disk_percent}
        ],
        "gpus": [
            {
                "index": i,
                "name": "Fake GPU",
                "utilization_percent": use,
                "memory_used_mb": 100,
                "memory_total_mb": 1000,
                "processes": [],
            }
            for i, use in enumerate(gpus)
        ],
        "gpu_error": None if gpus else "no NVIDIA GPU here",
        "npus": [],
        "npu_error": "no NPU reader configured",
    }


def snapshot(**kwargs) -> Snapshot:
    """Return a snapshot of an idle platform on a machine sampled with `machine(**kwargs)`."""
    return Snapshot(time=time.time(), machine=machine(**kwargs))


@dataclass
class Mailbox:
    """What the local SMTP server received."""

    host: str
    port: int
    messages: list[Message] = field(default_factory=list)

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook name
        message = message_from_bytes(envelope.content)
        message["X-Rcpt-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(message)
        return "250 Message accepted for delivery"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def mailbox():
    """Run a local SMTP server (aiosmtpd) on 127.0.0.1 and return what it receives."""
    box = Mailbox("127.0.0.1", _free_port())
    controller = Controller(box, hostname=box.host, port=box.port)
    controller.start()
    yield box
    controller.stop()


@dataclass
class Receiver:
    """A webhook receiver: the JSON bodies posted to it, and the statuses it answers (200 once these run out)."""

    url: str = ""
    bodies: list[dict] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


@pytest.fixture
def receiver():
    """Run a webhook receiver on 127.0.0.1 and return it."""
    found = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            found.bodies.append(json.loads(body))
            self.send_response(found.statuses.pop(0) if found.statuses else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield found
    server.shutdown()
    server.server_close()


class FakeNVML:
    """The few pynvml calls the sampler makes, over two declared GPUs."""

    def __init__(self, gpus: list[dict], fail_init: Exception | None = None) -> None:
        self.gpus = gpus
        self.fail_init = fail_init
        self.open = 0

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        if self.fail_init:
            raise self.fail_init
        self.open += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.open -= 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict:  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetUtilizationRates(self, gpu: dict) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=gpu["utilization"], memory=0)

    def nvmlDeviceGetMemoryInfo(self, gpu: dict) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=gpu["used"] * MB, total=gpu["total"] * MB, free=0)

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: dict) -> list[SimpleNamespace]:  # noqa: N802
        return [SimpleNamespace(pid=pid, usedGpuMemory=memory * MB) for pid, memory in gpu["processes"]]

    def nvmlDeviceGetName(self, gpu: dict) -> bytes:  # noqa: N802
        return gpu["name"]


def two_gpus() -> FakeNVML:
    return FakeNVML(
        [
            {
                "name": b"Fake A100",
                "utilization": 75,
                "used": 1000,
                "total": 40960,
                "processes": [(os.getpid(), 900)],
            },
            {"name": "Fake A100", "utilization": 0, "used": 0, "total": 40960, "processes": []},
        ]
    )
