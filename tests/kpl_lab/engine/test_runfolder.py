"""Run folder files: what the platform reads as its own word."""

from __future__ import annotations

import os

import pytest

from kpl_lab.engine.runfolder import APPEND, Refused, open_in, read_own_json, write_atomic


def test_read_own_json_takes_only_a_plain_file_this_account_wrote(tmp_path):
    ours = tmp_path / "status.json"
    ours.write_text('{"pid": 1}')
    ours.chmod(0o640)
    assert read_own_json(ours) == {"pid": 1}
    assert read_own_json(tmp_path / "missing.json") is None

    link = tmp_path / "link.json"
    link.symlink_to(ours)
    assert read_own_json(link) is None  # a link could point anywhere the platform may read

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert read_own_json(fifo) is None  # and returns at once: no wait for a writer


def test_read_own_json_refuses_another_accounts_file(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file away")
    theirs = tmp_path / "replica.json"
    theirs.write_text('{"argv": ["sh"]}')
    os.chown(theirs, 65534, 65534)  # nobody's
    assert read_own_json(theirs) is None


def test_open_in_follows_no_link_on_the_way(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "output.log").write_text("mine")
    victim = tmp_path / "victim.txt"
    victim.write_text("root's")
    with open(open_in(run_dir, "output.log"), "rb") as log:
        assert log.read() == b"mine"
    (run_dir / "linked.log").symlink_to(victim)
    (run_dir / "logs").symlink_to(tmp_path)  # a folder on the way
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run-link").symlink_to(run_dir)  # the run folder itself
    for folder, relative, flags in (
        (run_dir, "linked.log", os.O_RDONLY),
        (run_dir, "linked.log", APPEND),
        (run_dir, "logs/worker-1.log", APPEND),
        (run_dir, run_dir / "logs" / "victim.txt", os.O_RDONLY),
        (tmp_path / "run-link", "output.log", os.O_RDONLY),
    ):
        with pytest.raises(Refused, match="symbolic link"):
            open_in(folder, relative, flags)
    assert victim.read_text() == "root's" and not (tmp_path / "worker-1.log").exists()

    os.mkfifo(run_dir / "events.jsonl")  # a FIFO would hold a reader until someone writes
    (run_dir / "folder.log").mkdir()
    for relative, flags in (
        ("events.jsonl", os.O_RDONLY),
        ("events.jsonl", APPEND),  # no reader: the open fails (ENXIO), a log is not written
        ("folder.log", os.O_RDONLY),
        ("folder.log", APPEND),
    ):
        with pytest.raises(Refused, match="not a plain file"):
            open_in(run_dir, relative, flags)

    fd = open_in(run_dir, "logs2/worker-1.log", APPEND)  # missing folders on the way are made
    os.write(fd, b"line\n")
    os.close(fd)
    assert (run_dir / "logs2" / "worker-1.log").read_text() == "line\n"


def test_write_atomic_writes_through_no_link_at_its_temporary_name(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("root's")
    for pid in (os.getpid(), os.getpid() + 1):  # the temporary names of the old scheme
        (tmp_path / f".status.json.{pid}.tmp").symlink_to(victim)
    write_atomic(tmp_path / "status.json", '{"state": "done"}')
    assert victim.read_text() == "root's"
    assert (tmp_path / "status.json").read_text() == '{"state": "done"}'
    assert not (tmp_path / "status.json").is_symlink()
