"""Storage paths, names and hashed copies."""

from __future__ import annotations

import os

import pytest

from kpl_lab.catalog.storage import Storage, check_name, copy_hashed, link_files
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


def test_copy_hashed_reads_no_file_through_a_link_above_or_inside_it(tmp_path):
    """A job's user who swaps her outputs folder (or a file in it) for a link gets an error, not root's files."""
    secret = tmp_path / "hub"
    secret.mkdir()
    (secret / "secrets.json").write_text('{"cookie_secret": "x"}')
    run = tmp_path / "run"  # a job's run folder: its user controls everything in it
    (run / "outputs" / "model").mkdir(parents=True)
    (run / "outputs" / "model" / "weights.bin").write_bytes(b"w")
    assert copy_hashed(run / "outputs" / "model", tmp_path / "copy1", within=run).files == ["weights.bin"]

    os.rename(run / "outputs", run / "outputs.real")  # her outputs/ now leads to root's folder
    (run / "outputs").symlink_to(tmp_path)
    with pytest.raises(BadRequest, match="symbolic links"):
        copy_hashed(run / "outputs" / "hub", tmp_path / "copy2", within=run)
    assert not (tmp_path / "copy2" / "secrets.json").exists()
    (run / "outputs.real" / "model" / "weights.bin").unlink()  # a link to root's file in her folder
    (run / "outputs.real" / "model" / "weights.bin").symlink_to(secret / "secrets.json")
    with pytest.raises(BadRequest, match="symbolic links"):
        copy_hashed(run / "outputs.real" / "model", tmp_path / "copy3", within=run)


def test_publish_and_remove_refuse_a_folder_a_user_put_on_the_way(tmp_path):
    """A member's link (or folder) in place of `datasets/NAME` would have root move or delete files where it leads."""
    storage = Storage(tmp_path / "storage")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    datasets = storage.kind_dir("vision", "datasets")
    datasets.mkdir(parents=True)
    (datasets / "mine").symlink_to(elsewhere)
    staged = tmp_path / "storage" / "staged"
    staged.mkdir()
    (staged / "part-0").write_text("upload")
    with pytest.raises(BadRequest, match="mine is a symbolic link"):
        storage.publish(staged, storage.dataset_dir("vision", "mine", "abc"))
    (elsewhere / "abc").mkdir()
    with pytest.raises(BadRequest, match="mine is a symbolic link"):
        storage.remove(storage.dataset_dir("vision", "mine", "abc"))
    assert os.listdir(elsewhere) == ["abc"] and staged.is_dir()

    assert storage.publish(staged, storage.dataset_dir("vision", "theirs", "abc"))  # made by the platform
    assert (storage.dataset_dir("vision", "theirs", "abc") / "part-0").read_text() == "upload"
    storage.remove(storage.dataset_dir("vision", "theirs", "abc"))
    assert os.listdir(datasets / "theirs") == []
    storage.remove(storage.dataset_dir("vision", "gone", "abc"))  # nothing there: nothing to do


def test_publish_refuses_a_folder_another_account_made(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder away")
    storage = Storage(tmp_path / "storage")
    theirs = storage.kind_dir("vision", "datasets") / "mine"
    theirs.mkdir(parents=True)
    os.chown(theirs, 65534, 65534)  # a member made it from her notebook
    staged = tmp_path / "storage" / "staged"
    staged.mkdir()
    with pytest.raises(BadRequest, match="made by another account"):
        storage.publish(staged, theirs / "abc")
    assert os.listdir(theirs) == []


def test_link_files_links_its_own_files_and_copies_another_accounts(tmp_path, monkeypatch):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x").write_bytes(b"1")
    (src / "y").write_bytes(b"2")
    linked = link_files(src, tmp_path / "one")
    assert [rel for rel, _ in linked] == ["a/x", "y"]
    assert all(path.samefile(src / rel) for rel, path in linked)  # no byte written
    # files another account owns (a sandboxed worker's) are copied: it could change a shared file later
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(src / "y").st_uid + 1)
    copied = link_files(src, tmp_path / "two")
    assert [(rel, path.read_bytes()) for rel, path in copied] == [("a/x", b"1"), ("y", b"2")]
    assert not any(path.samefile(src / rel) for rel, path in copied)
    (src / "z").symlink_to(src / "y")
    with pytest.raises(BadRequest, match="z: symbolic links"):
        link_files(src, tmp_path / "three")
