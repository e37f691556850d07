"""The platform object: configuration defaults, sessions, SQLite settings."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError
from traitlets.config import Config

from kpl_lab.catalog.models import Project
from kpl_lab.engine.local import LocalExecutor
from kpl_lab.platform import Platform, with_moved_settings


def test_defaults_follow_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KPL_LAB_HOME", str(tmp_path / "h"))
    plat = Platform()
    assert plat.home == str(tmp_path / "h")
    assert plat.storage_url == str(tmp_path / "h" / "storage")
    assert plat.database_url == f"sqlite:///{tmp_path / 'h' / 'kpl.sqlite'}"
    assert plat.default_project == "default"


def test_traitlets_config(tmp_path):
    config = Config()
    config.Platform.home = str(tmp_path / "a")
    config.Platform.storage_url = str(tmp_path / "elsewhere")
    plat = Platform(config=config)
    assert plat.storage.root == (tmp_path / "elsewhere").resolve()
    assert plat.storage.root.is_dir()
    plat.close()


def test_sqlite_settings(platform):
    with platform.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000


def test_session_commits_and_rolls_back(platform):
    with platform.session() as session:
        session.add(Project(name="kept"))
    with pytest.raises(RuntimeError), platform.session() as session:
        session.add(Project(name="dropped"))
        session.flush()
        raise RuntimeError("boom")
    with platform.session() as session:
        names = session.scalars(select(Project.name)).all()
    assert names == ["kept"]


def test_immediate_session_takes_the_write_lock(platform):
    with platform.session(immediate=True) as session:
        session.execute(select(func.count(Project.id)))
        # another connection cannot write while this transaction holds the lock
        other = platform.engine.connect()
        other.exec_driver_sql("PRAGMA busy_timeout=0")
        with pytest.raises(OperationalError, match="locked"):
            other.execute(
                text("INSERT INTO projects (name, description, created) VALUES ('x', '', '2020-01-01')")
            )
            other.commit()
        other.rollback()
        other.close()


def test_two_platforms_share_one_database(tmp_path):
    first = Platform(home=str(tmp_path))
    second = Platform(home=str(tmp_path))
    with first.session() as session:
        session.add(Project(name="p"))
    with second.session() as session:
        assert session.scalar(select(Project.name)) == "p"
    first.close()
    second.close()


def test_relative_home_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plat = Platform(home="rel")
    assert plat.home == str(tmp_path / "rel")
    assert plat.database_url == f"sqlite:///{tmp_path / 'rel' / 'kpl.sqlite'}"


def test_deprecated_app_settings_move_to_the_platform_classes(tmp_path, caplog):
    config = Config()
    config.KPLLab.home = str(tmp_path)
    config.KPLLab.storage_url = str(tmp_path / "old")
    config.KPLLab.cpu = 3.0
    config.KPLLab.executor_class = LocalExecutor
    config.KPLLab.projects = ["a"]
    config.Platform.storage_url = str(tmp_path / "new")
    log = logging.getLogger("test")
    with caplog.at_level(logging.WARNING, "test"):
        moved = with_moved_settings(config, "KPLLab", log)
    assert "c.KPLLab.storage_url is deprecated: set c.Platform.storage_url instead" in caplog.text
    assert moved.KPLLab == {"projects": ["a"]} and config.KPLLab.cpu == 3.0  # the given config is kept
    assert moved.JobService.executor_class == "kpl_lab.engine.local.LocalExecutor"
    platform = Platform(config=moved)
    assert platform.home == str(tmp_path) and platform.storage_url == str(tmp_path / "new")
    assert platform.jobs.ledger.cpu == 3.0
    assert with_moved_settings(moved, "KPLLab", log) is moved
