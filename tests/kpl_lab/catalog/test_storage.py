"""Storage paths, names and hashed copies."""

from __future__ import annotations

import os

import pytest

from kpl_lab.catalog.storage import Storage, check_name, copy_hashed
from kpl_lab.errors import BadRequest


def test_layout_follows_the_job_contract(tmp_path):
    storage = Storage(f"file://{tmp_path}")
    assert storage.job_dir("p", "abc") == tmp_path.resolve() / "projects" / "p" / "jobs" / "abc"
    assert storage.dataset_dir("p", "d", "v1") == tmp_path.resolve() / "projects/p/datasets/d/v1"
    assert storage.relative(storage.model_dir("p", "m", "v")) == "projects/p/models/m/v"
    with pytest.raises(BadRequest, match="only local folders"):
        Storage("s3://bucket/prefix")


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a\\b", "-x", "x y", "a:b", "\x00"])
def test_unsafe_names(name):
    with pytest.raises(BadRequest):
        check_name(name)


def test_hash_depends_on_paths_and_bytes_only(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        (folder / "d").mkdir(parents=True)
        (folder / "d" / "a.txt").write_text("A")
        (folder / "b.txt").write_text("B")
    os.utime(two / "b.txt", (0, 0))
    first = copy_hashed(one, tmp_path / "c1")
    second = copy_hashed(two, tmp_path / "c2")
    assert first.digest == second.digest and first.files == ["b.txt", "d/a.txt"]
    (two / "d" / "a.txt").rename(two / "a.txt")
    assert copy_hashed(two, tmp_path / "c3").digest != first.digest


def test_special_files_are_refused(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    os.mkfifo(folder / "pipe")
    with pytest.raises(BadRequest, match="pipe: not a regular file"):
        copy_hashed(folder, tmp_path / "dest")
