"""Fixtures of the engine tests: a platform with a small declared machine, algorithms, waiting."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from traitlets.config import Config

from kpl_lab.errors import Conflict
from kpl_lab.platform import Platform
from kpl_lab.rounds import Rounds

WAIT_SECONDS = 120
ROUND_SECONDS = 0.2  # a test's host runs rounds often: a stopped job's place is taken at once


def make_platform(
    home: Path, database_url: str | None = None, tick_seconds: float = 0.2, **ledger
) -> Platform:
    """Return a platform on this database whose ledger has the given capacity (cpu, memory, devices, quotas).

    `tick_seconds`: between a supervisor's ticks (its first opens the platform).
    """
    config = Config(
        {
            "Ledger": {"cpu": 4.0, "memory": 4096, **ledger},
            "JobService": {"grace_seconds": 1.0},
            "LocalExecutor": {"tick_seconds": tick_seconds, "usage_seconds": 0.2},
        }
    )
    if database_url:
        config.Platform.database_url = database_url
    return Platform(home=str(home), config=config)


def environment(cmd: str, memory: int = 256, cpu: float = 1, inputs=(), outputs=(), gpu: int = 0) -> str:
    """Return an environment.yml with one train function."""
    lines = ["version: 1", "image:", "  runs: []", "train:", "  resource:", "    limits:"]
    lines += [f"      cpu: {cpu}", f"      memory: {memory}"] + ([f"      gpu: {gpu}"] if gpu else [])
    for word, keys in (("inputs", inputs), ("outputs", outputs)):
        if keys:
            lines.append(f"  {word}:")
            lines += [f"    - key: {key}\n      name: {key}" for key in keys]
    lines.append(f"  cmd: {cmd}")
    return "\n".join(lines) + "\n"


class Lab:
    """A platform under test with helpers to add algorithms and wait for jobs."""

    def __init__(
        self,
        tmp_path: Path,
        database_url: str | None = None,
        hosted: bool = True,
        round_seconds: float = ROUND_SECONDS,
        tick_seconds: float = 0.2,
        **ledger,
    ) -> None:
        self.tmp_path = tmp_path
        self.home = tmp_path / "home"
        self.database_url = database_url
        self.ledger = ledger
        self.hosted = hosted
        self.round_seconds, self.tick_seconds = round_seconds, tick_seconds
        self.platform = make_platform(self.home, database_url, tick_seconds, **ledger)
        self.release_file = tmp_path / "release"
        self.rounds = Rounds(self.platform)
        if hosted:  # as a server runs it: queued jobs start when others end (else nothing schedules)
            self.rounds.start(round_seconds)

    def restart(self) -> Platform:
        """Drop the platform object (the "server") and open a new one on the same home."""
        self.rounds.stop()
        self.platform.close()
        self.platform = make_platform(self.home, self.database_url, self.tick_seconds, **self.ledger)
        self.rounds = Rounds(self.platform)
        if self.hosted:
            self.rounds.start(self.round_seconds)
        return self.platform

    @property
    def jobs(self):
        return self.platform.jobs

    def algorithm(
        self, name: str, cmd: str, files: dict[str, str] | None = None, parameters: str = "x: 1\n", **env
    ):
        """Add an algorithm folder with one train function to the catalog."""
        folder = self.tmp_path / "src" / name
        folder.mkdir(parents=True)
        (folder / "environment.yml").write_text(environment(cmd, **env))
        (folder / "parameter.yml").write_text(parameters)
        for file, text in (files or {}).items():
            (folder / file).write_text(text.replace("RELEASE_FILE", str(self.release_file)))
        return self.platform.catalog.add_algorithm("p", folder)

    def wait(self, job_id: str, states=("succeeded", "failed", "stopped", "lost")):
        """Wait until the job is in one of `states` and return it."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            job = self.jobs.get("p", job_id)
            if job.state in states:
                return job
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} still {job.state}: {job.reason}")

    def wait_for(self, predicate, what: str):
        """Wait until predicate() is true."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def cleanup(self) -> None:
        """Stop whatever still runs and wait for every supervisor to record the end."""
        self.release_file.touch()
        for job in self.jobs.list("p"):
            if not job.is_final:
                with contextlib.suppress(Conflict):  # it ended meanwhile
                    self.jobs.stop("p", job.id)
        for job in self.jobs.list("p"):
            self.wait(job.id)
        self.rounds.stop()
        self.platform.close()


@pytest.fixture
def lab(tmp_path, monkeypatch, database_url):
    monkeypatch.setenv("KPL_LAB_HOME", str(tmp_path / "home"))
    created = []

    def factory(**ledger) -> Lab:
        made = Lab(tmp_path, database_url, **ledger)
        created.append(made)
        return made

    yield factory
    for made in created:
        made.cleanup()
