"""Fixtures shared by every test: a platform whose home is a temporary folder."""

from __future__ import annotations

import pytest

from kpl_lab.platform import Platform


@pytest.fixture
def platform(tmp_path, monkeypatch):
    """Return an embedded platform (SQLite + local storage) under tmp_path."""
    home = tmp_path / "kpl-home"
    monkeypatch.setenv("KPL_LAB_HOME", str(home))
    plat = Platform(home=str(home))
    yield plat
    plat.close()
