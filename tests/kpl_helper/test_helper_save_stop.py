"""save_dataset, save_model, save_algorithm and kill: checks, events, and outside the platform."""

from __future__ import annotations

import pytest

import kpl_helper as helper
from kpl_helper.save import ALGORITHM_SIZE_LIMIT, save


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.pt").write_bytes(b"w" * 10)
    return folder


@pytest.fixture
def algorithm_dir(tmp_path):
    folder = tmp_path / "algo"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "environment.yml").write_text("version: 1\n")
    (folder / "train.py").write_text("print('hi')\n")
    return folder


def test_outside_logs_and_does_nothing(model_dir, capsys):
    assert helper.save_model(str(model_dir), "m", "desc") is None  # the original returned None
    assert "not in a platform job" in capsys.readouterr().out


def test_save_events_with_absolute_paths(job, model_dir, algorithm_dir, monkeypatch):
    monkeypatch.chdir(model_dir.parent)
    helper.save_dataset("model", "ds", "a dataset", as_serialized=True)
    helper.save_model(str(model_dir / "weights.pt"), "m", None)
    assert helper.save_algorithm(str(algorithm_dir), "algo", "v2") is None
    found = job.events()
    assert [(e["type"], e["kind"], e["path"], e["name"]) for e in found] == [
        ("save", "dataset", str(model_dir), "ds"),
        ("save", "model", str(model_dir / "weights.pt"), "m"),
        ("save", "algorithm", str(algorithm_dir), "algo"),
    ]
    assert found[0]["as_serialized"] is True
    assert found[1]["description"] == ""
    assert found[2]["as_serialized"] is False


def test_errors_are_logged_not_raised_like_the_original(job, tmp_path, capsys):
    assert helper.save_model(str(tmp_path / "missing"), "m", "d") is None
    assert "does not exist" in capsys.readouterr().out
    assert job.events() == []


def test_missing_path(job, tmp_path):
    with pytest.raises(FileNotFoundError, match="save model 'm': .*missing does not exist"):
        save("model", str(tmp_path / "missing"), "m", "d")


def test_symlink_is_refused(job, model_dir, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(model_dir)
    with pytest.raises(ValueError, match="is symbol link"):
        save("model", str(link), "m", "d")


def test_empty_name_is_refused(job, model_dir):
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        save("model", str(model_dir), " ", "d")


def test_algorithm_needs_environment_yml(job, algorithm_dir):
    (algorithm_dir / "environment.yml").unlink()
    with pytest.raises(ValueError, match="has no environment.yml"):
        save("algorithm", str(algorithm_dir), "a", "d")


def test_algorithm_size_limit_ignores_pycache(job, algorithm_dir):
    with open(algorithm_dir / "__pycache__" / "big.pyc", "wb") as file:
        file.truncate(ALGORITHM_SIZE_LIMIT + 1)  # sparse: costs no disk
    save("algorithm", str(algorithm_dir), "a", "d")
    with open(algorithm_dir / "data.bin", "wb") as file:
        file.truncate(ALGORITHM_SIZE_LIMIT + 1)
    with pytest.raises(ValueError, match="over the limit of 50 MB"):
        save("algorithm", str(algorithm_dir), "a", "d")


def test_algorithm_archive_or_folder(job, tmp_path):
    archive = tmp_path / "algo.tar.gz"
    archive.write_bytes(b"x")
    assert save("algorithm", str(archive), "a", "d") is True
    script = tmp_path / "train.py"
    script.write_text("")
    with pytest.raises(ValueError, match="neither a folder nor a .tar/.tar.gz/.zip archive"):
        save("algorithm", str(script), "a", "d")


def test_kill_outside_does_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    helper.kill()
    assert list(tmp_path.iterdir()) == []


def test_original_stop_task_class_sends_stop(job):
    helper.stop.StopTask().stop()
    assert [e["type"] for e in job.events()] == ["stop"]


def test_kill_sends_stop_after_queued_metrics(job):
    figure = helper.metric.MetricFigure("t", y1_name="loss")
    figure.push_metric(1, 1.0)
    helper.kill()
    assert [line.split('"type":"')[1].split('"')[0] for line in job.events_file.read_text().splitlines()] == [
        "figure",
        "metric",
        "stop",
    ]
