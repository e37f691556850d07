"""Fixtures of the pipeline tests: a platform with a small declared machine and generated fruit data."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets.config import Config

from kpl_lab.platform import Platform
from kpl_lab.testing.fruit import fruit_files, voc_xml, write_raw


@pytest.fixture
def lab(tmp_path, monkeypatch, database_url):
    """Return a platform whose ledger declares 4 CPUs and 4 GiB (jobs run as local processes)."""
    home = tmp_path / "home"
    monkeypatch.setenv("KPL_LAB_HOME", str(home))
    config = Config(
        {
            "Ledger": {"cpu": 4.0, "memory": 4096},
            "JobService": {"grace_seconds": 1.0},
            "LocalExecutor": {"tick_seconds": 0.2, "usage_seconds": 0.2},
        }
    )
    if database_url:
        config.Platform.database_url = database_url
    platform = Platform(home=str(home), config=config)
    yield platform
    platform.close()


class Fruit:
    """The data helpers, for tests (conftest is not importable under importlib mode)."""

    files = staticmethod(fruit_files)
    write_raw = staticmethod(write_raw)
    voc_xml = staticmethod(voc_xml)

    def __init__(self, platform: Platform, tmp_path: Path):
        self.platform = platform
        self.tmp_path = tmp_path

    def add(self, name: str, records: list[dict]) -> None:
        """Register records as catalog dataset NAME of project p."""
        self.platform.catalog.add_dataset("p", name, write_raw(self.tmp_path / "upload" / name, records))

    def saved(self, name: str) -> list[dict]:
        """Return the records of the latest version of catalog dataset NAME."""
        from kpl_dataset import ReadOnlyDataset

        return list(ReadOnlyDataset(self.platform.catalog.path(self.platform.catalog.get_dataset("p", name))))


@pytest.fixture
def fruit(lab, tmp_path):
    return Fruit(lab, tmp_path)
