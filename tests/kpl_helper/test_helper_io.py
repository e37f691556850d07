"""io.get_input_path and io.get_output_path outside, in a notebook and inside a job."""

from __future__ import annotations

import pytest

import kpl_helper as helper


def test_outside_returns_the_defaults(tmp_path):
    assert helper.io.get_input_path(key="data", default="local/data") == "local/data"
    assert helper.io.get_output_path(key="save_model", default="local/out") == "local/out"
    assert helper.get_input_path("data") == ""
    assert not (tmp_path / "local").exists()


def test_notebook_returns_the_defaults(job, monkeypatch):
    monkeypatch.setenv("KPL_ENV", "notebook")
    assert helper.io.get_input_path(key="data", default="d") == "d"
    assert helper.io.get_output_path(key="m", default="o") == "o"
    assert list(job.outputs.iterdir()) == []


def test_input_inside_a_job(job):
    (job.inputs / "data").mkdir()
    assert helper.io.get_input_path(key="data", default="ignored") == str(job.inputs / "data")


def test_missing_input_names_key_path_and_inputs(job):
    (job.inputs / "data").mkdir()
    (job.inputs / "model").mkdir()
    with pytest.raises(FileNotFoundError) as error:
        helper.io.get_input_path(key="pretrain_model", default="ignored")
    message = str(error.value)
    assert "'pretrain_model'" in message
    assert str(job.inputs / "pretrain_model") in message
    assert "data, model" in message


def test_output_folder_is_created(job):
    path = helper.io.get_output_path(key="save_model")
    assert path == str(job.outputs / "save_model")
    assert (job.outputs / "save_model").is_dir()
    assert helper.io.get_output_path(key="save_model") == path  # existing folder is fine


@pytest.mark.parametrize("key", ["", "..", "a/b", "../escape"])
def test_keys_cannot_leave_the_roots(job, key):
    with pytest.raises(ValueError, match="invalid input/output key"):
        helper.io.get_output_path(key)
    with pytest.raises(ValueError, match="invalid input/output key"):
        helper.io.get_input_path(key)


def test_job_without_roots(job, monkeypatch):
    monkeypatch.delenv("KPL_ENV_INPUT_ROOT_PATH")
    monkeypatch.delenv("KPL_ENV_OUTPUT_ROOT_PATH")
    with pytest.raises(FileNotFoundError, match="no KPL_ENV_INPUT_ROOT_PATH"):
        helper.io.get_input_path("data")
    with pytest.raises(FileNotFoundError, match="no KPL_ENV_OUTPUT_ROOT_PATH"):
        helper.io.get_output_path("out")
