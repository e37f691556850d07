"""The configuration read from the environment, ready() and done()."""

from __future__ import annotations

from kpl_helper import done, ready
from kpl_helper.base import Config, get_config


def test_outside_the_platform():
    config = get_config()
    assert not config.inner
    assert config.uses_defaults
    assert config.get_parameter() == "{}"  # as the original
    assert config.get_input_root() == ""


def test_inside_a_job(job):
    config = get_config()
    assert config.inner
    assert not config.uses_defaults
    assert config.task_id == "42"
    assert config.function == "train"
    assert config.get_input_root() == str(job.inputs)
    assert config.events_file == str(job.events_file)


def test_any_kpl_inner_value_means_inside():
    assert Config.from_env({"KPL_INNER": ""}).inner
    assert not Config.from_env({}).inner


def test_notebook_uses_defaults():
    assert Config.from_env({"KPL_INNER": "1", "KPL_ENV": "notebook"}).uses_defaults


def test_ready_and_done_outside_print_and_write_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ready()
    done()
    out = capsys.readouterr().out
    assert "[kpl-helper]: ready for using." in out
    assert "[kpl-helper]: execute kpl done()" in out
    assert list(tmp_path.iterdir()) == []


def test_ready_and_done_inside_write_events(job):
    ready()
    done()
    found = job.events()
    assert [e["type"] for e in found] == ["ready", "done"]
    assert all(isinstance(e["time"], float) for e in found)
