"""A real Jupyter server with the KPL Lab extension, for the kernel-side tests (client, magics, widgets)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kpl_lab.client import Client
from kpl_lab.errors import KPLError

START_TIMEOUT = 120.0  # seconds: a cold start on two busy cores


@dataclass
class KPLServer:
    """A running `jupyter server` subprocess and where it keeps its files."""

    url: str
    token: str
    pid: int
    root: Path
    runtime_dir: Path
    home: Path

    def client(self) -> Client:
        """Return a client of this server's API."""
        return Client(self.url, self.token)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def kpl_server(tmp_path_factory):
    """Start `jupyter server` with only the kpl_lab extension and a fresh KPL_LAB_HOME."""
    base = tmp_path_factory.mktemp("kpl-server")
    root, config, runtime, home = (base / name for name in ("root", "config", "runtime", "home"))
    for folder in (root, config, runtime):
        folder.mkdir()
    extensions = {
        "kpl_lab": True,
        "jupyterlab": False,
        "jupyter_lsp": False,
        "jupyter_server_terminals": False,
    }
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": extensions}})
    )
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "KPL_LAB_HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(runtime),
    }
    env.pop("KPL_API_URL", None)
    log = open(base / "server.log", "wb")  # noqa: SIM115 - closed at teardown
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "server",
            "--allow-root",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.token={token}",
            f"--ServerApp.root_dir={root}",
        ],
        env=env,
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = KPLServer(f"http://127.0.0.1:{port}/", token, process.pid, root, runtime, home)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"jupyter server exited: {(base / 'server.log').read_text()[-3000:]}")
            try:
                server.client().version()
                break
            except KPLError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no answer: {(base / 'server.log').read_text()[-3000:]}") from None
                time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


ENVIRONMENT = """\
version: 1
image:
  runs: []
train:
  resource:
    limits:
      cpu: 1
      memory: 512
  inputs:
    - key: data
      name: data
  outputs:
    - key: model
      name: toy-net
  cmd: python train.py
infer:
  resource:
    limits:
      cpu: 1
      memory: 512
  inputs:
    - key: data
      name: data
  cmd: python infer.py
"""

TRAIN = """\
import os, time
import kpl_helper
from kpl_helper import io, metric, progress

p = kpl_helper.get_parameter(default="./parameter.yml")
data = io.get_input_path(key="data", default="./data")
out = io.get_output_path(key="model", default="./out")
print("training on", sorted(os.listdir(data)), "lr", p.lr, flush=True)
fig = metric.MetricFigure("training", y1_name="loss", y2_name="accuracy")
for step in range(p.steps):
    fig.push_metric(x=step, y1=1.0 / (step + 1), y2=step / p.steps)
    progress.send_progress((step + 1) / p.steps)
    print("step", step, flush=True)
    time.sleep(p.pause)
with open(os.path.join(out, "weights.txt"), "w") as f:
    f.write(str(p.steps))
kpl_helper.done()
"""

INFER = """\
import kpl_helper
from kpl_helper import io, progress

data = io.get_input_path(key="data", default="./data")
print("inferring on", data, flush=True)
progress.send_progress(1.0)
kpl_helper.done()
"""


def _zip(path: Path, files: dict[str, bytes]) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return path


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


@dataclass
class KPLData:
    """What the session's server holds: a toy algorithm and a small image dataset."""

    algorithm: dict
    dataset: dict
    images: dict[str, bytes]
    upload_progress: list[tuple[int, int]]


@pytest.fixture(scope="session")
def kpl_data(kpl_server, tmp_path_factory) -> KPLData:
    """Upload the toy algorithm and a dataset of 5 PNG images and a text file through the API."""
    base = tmp_path_factory.mktemp("kpl-data")
    client = kpl_server.client()
    algorithm_zip = _zip(
        base / "toy.zip",
        {
            "toy/environment.yml": ENVIRONMENT.encode(),
            "toy/parameter.yml": b"steps: 3\npause: 0.0\nlr: 0.1\n",
            "toy/train.py": TRAIN.encode(),
            "toy/infer.py": INFER.encode(),
        },
    )
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255)]
    images = {f"images/{i}.png": _png(colour) for i, colour in enumerate(colours)}
    dataset_zip = _zip(base / "shapes.zip", {**images, "notes.txt": b"five squares, one colour each"})
    seen: list[tuple[int, int]] = []
    dataset = client.upload_dataset(
        dataset_zip,
        "shapes",
        description="coloured squares",
        progress=lambda sent, total: seen.append((sent, total)),
    )
    algorithm = client.upload_algorithm(algorithm_zip, name="toy", description="a toy that learns nothing")
    return KPLData(algorithm, dataset, images, seen)


def _wait_final(client: Client, job_id: str) -> dict:
    """Return the job once it has ended."""
    while True:
        job = client.job(job_id)
        if job["state"] not in ("queued", "running"):
            return job
        time.sleep(0.2)


@pytest.fixture
def wait_job_end():
    """Return a function that waits for a job to end and returns it."""
    return _wait_final
