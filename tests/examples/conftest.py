"""Fixtures shared by the example tests: loading example modules and running example scripts."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from kpl_lab.algorithms import read_algorithm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(relative: str) -> ModuleType:
    """Import an example file by its path below examples/, named after its stem."""
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clean_env() -> dict[str, str]:
    """Return this process's environment without any KPL_ setting."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("KPL_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep the example folder clean
    return env


def run_script(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a Python script in cwd and capture what it prints."""
    return subprocess.run([sys.executable, script], cwd=cwd, env=env, capture_output=True, text=True)


def run_ok(script: str, cwd: Path, env: dict[str, str]) -> str:
    """Run a Python script, assert it succeeded and return its stdout and stderr."""
    done = run_script(script, cwd, env)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(name="load_example", scope="session")
def load_example_fixture() -> Callable[[str], ModuleType]:
    return load_example


@pytest.fixture(scope="session")
def make_shapes() -> ModuleType:
    return load_example("datasets/make_shapes.py")


@pytest.fixture(scope="session")
def build_shapes(tmp_path_factory, make_shapes) -> Callable[[str, int, int], Path]:
    """Return a callable that writes a shapes dataset for a task and checks its part sizes."""

    def build(task: str, train: int, test: int) -> Path:
        folder = tmp_path_factory.mktemp("data") / "shapes"
        assert make_shapes.make_shapes(folder, task, train=train, test=test) == {"train": train, "test": test}
        return folder

    return build


@pytest.fixture(name="clean_env", scope="session")
def clean_env_fixture() -> Callable[[], dict[str, str]]:
    return clean_env


@pytest.fixture(name="run_script", scope="session")
def run_script_fixture() -> Callable[[str, Path, dict[str, str]], subprocess.CompletedProcess]:
    return run_script


@pytest.fixture(name="run_ok", scope="session")
def run_ok_fixture() -> Callable[[str, Path, dict[str, str]], str]:
    return run_ok


@pytest.fixture
def algorithm_copy(tmp_path) -> Callable[..., Path]:
    """Return a callable that copies an algorithm to tmp_path/algorithm with data/<name> linked to a dataset."""

    def copy(algorithm: Path, name: str, dataset: Path, **parameters) -> Path:
        work = tmp_path / "algorithm"
        shutil.copytree(algorithm, work)
        (work / "data").mkdir()
        (work / "data" / name).symlink_to(dataset)
        if parameters:
            values = yaml.safe_load((work / "parameter.yml").read_text())
            values.update(parameters)
            (work / "parameter.yml").write_text(yaml.safe_dump(values))
        return work

    return copy


@pytest.fixture
def train_in_job(tmp_path) -> Callable[..., tuple[Path, list[dict], str]]:
    """Return a callable that runs train.py as the platform would (docs/job-contract.md) in tmp_path/<name>.

    It gives back the model output folder, the events written and what train.py printed.
    """

    def train(
        algorithm: Path, name: str, data: Path, parameters: list[str], checkpoint: Path | None
    ) -> tuple[Path, list[dict], str]:
        run_dir = tmp_path / name
        (run_dir / "inputs").mkdir(parents=True)
        (run_dir / "outputs").mkdir()
        (run_dir / "inputs" / "data").symlink_to(data)
        if checkpoint is not None:
            (run_dir / "inputs" / "checkpoint").symlink_to(checkpoint)
        env = clean_env()
        env.update(
            KPL_INNER="1",
            KPL_ENV="job",
            KPL_ENV_TASK_ID=name,
            KPL_ENV_FUNCTION="train",
            KPL_ENV_INPUT_ROOT_PATH=str(run_dir / "inputs"),
            KPL_ENV_OUTPUT_ROOT_PATH=str(run_dir / "outputs"),
            KPL_ENV_PARAMETER=json.dumps(read_algorithm(algorithm).parameters.apply(parameters)),
            KPL_EVENTS_FILE=str(run_dir / "events.jsonl"),
            KPL_RUN_DIR=str(run_dir),
        )
        out = run_ok(str(algorithm / "train.py"), algorithm, env)
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        return run_dir / "outputs" / "model", events, out

    return train


@pytest.fixture
def serve_standalone():
    """Return a context manager running an example's deploy.py in its folder; it yields a POST function."""

    @contextlib.contextmanager
    def serve(work: Path, env: dict[str, str]):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [sys.executable, "deploy.py"],
            cwd=work,
            env={**env, "KPL_DEPLOY_PORT": str(port)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

        def post(body: bytes, content_type: str = "image/png") -> tuple[int, dict]:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/predict", body, {"Content-Type": content_type}
            )
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        try:
            deadline = time.monotonic() + 120
            while True:
                assert server.poll() is None, server.stdout.read().decode()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                        break
                except OSError:
                    assert time.monotonic() < deadline, "deploy.py never answered /health"
                    time.sleep(0.2)
            yield post
        finally:
            server.terminate()
            server.wait(timeout=30)
            server.stdout.close()

    return serve
