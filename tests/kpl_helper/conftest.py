"""Fixtures for kpl_helper: a clean environment, and a job environment writing events to a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kpl_helper import events, parameter


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Start every test outside the platform, with no writer and no cached parameters."""
    for name in list(os.environ):
        if name.startswith("KPL_"):
            monkeypatch.delenv(name)
    parameter._cache.clear()
    yield
    if events._writer is not None:
        events._writer.close()
    events._writer = None
    events._writer_key = None
    parameter._cache.clear()


class Job:
    """A job's folders and environment, as the platform sets them (docs/job-contract.md)."""

    def __init__(self, root: Path):
        self.root = root
        self.inputs = root / "inputs"
        self.outputs = root / "outputs"
        self.events_file = root / "events.jsonl"
        self.inputs.mkdir(parents=True)
        self.outputs.mkdir()
        self.env = {
            "KPL_INNER": "1",
            "KPL_ENV": "job",
            "KPL_ENV_TASK_ID": "42",
            "KPL_ENV_FUNCTION": "train",
            "KPL_ENV_INPUT_ROOT_PATH": str(self.inputs),
            "KPL_ENV_OUTPUT_ROOT_PATH": str(self.outputs),
            "KPL_ENV_PARAMETER": json.dumps({"lr": 0.1, "net": {"depth": 18}}),
            "KPL_EVENTS_FILE": str(self.events_file),
            "KPL_RUN_DIR": str(root),
        }

    def events(self) -> list[dict]:
        """Flush this process's writer and return every event in the file."""
        events.flush()
        if not self.events_file.exists():
            return []
        return [json.loads(line) for line in self.events_file.read_text().splitlines()]

    def run(self, code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
        """Run Python code in a real subprocess inside this job."""
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            env={**os.environ, **self.env, **env},
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture
def job(tmp_path, monkeypatch) -> Job:
    """Set this process's environment to a job's; return the job."""
    job = Job(tmp_path / "job")
    for name, value in job.env.items():
        monkeypatch.setenv(name, value)
    return job
