"""What a writer leaves behind: nothing after abort, no lock after close, no pandas, fsync when durable."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from kpl_dataset import BasicType, KPLDatasetError, ReadOnlyDataset, WriteOnlyDataset

RT = {"i": BasicType.Int, "blob": BasicType.ByteArray}


def rec(i: int) -> dict:
    return {"i": i, "blob": bytes([i % 256]) * 100}


def test_abort_of_a_new_part_leaves_the_dataset_folder_as_it_was(tmp_path):
    with WriteOnlyDataset(tmp_path, "kept", RT) as w:
        w.write(rec(0))
    before = sorted(os.listdir(tmp_path))
    w = WriteOnlyDataset(tmp_path, "failed", RT, batch_rows=2)
    for i in range(5):
        w.write(rec(i))
    assert "failed.kpl" in os.listdir(tmp_path) and ".failed.lock" in os.listdir(tmp_path)
    w.abort()
    assert sorted(os.listdir(tmp_path)) == before


def test_exception_in_with_block_of_a_new_part_leaves_nothing(tmp_path):
    (tmp_path / "ds").mkdir()
    with pytest.raises(RuntimeError), WriteOnlyDataset(tmp_path / "ds", "p", RT, batch_rows=1) as w:
        w.write(rec(0))
        raise RuntimeError("import failed")
    assert os.listdir(tmp_path / "ds") == []


def test_abort_removes_the_dataset_folder_the_writer_made(tmp_path):
    WriteOnlyDataset(tmp_path / "new", None, RT).abort()
    assert not (tmp_path / "new").exists()


def test_failed_construction_leaves_nothing(tmp_path):
    with pytest.raises(KPLDatasetError, match="record_type"):
        WriteOnlyDataset(tmp_path / "new", None, {"x": "Nope"})
    assert not (tmp_path / "new").exists()


def test_abort_of_an_existing_part_keeps_its_commit(tmp_path):
    with WriteOnlyDataset(tmp_path, None, RT) as w:
        w.write(rec(1))
    w = WriteOnlyDataset(tmp_path, None, RT, mode="a", batch_rows=1)
    w.write(rec(2))
    w.abort()
    assert list(ReadOnlyDataset(tmp_path, None)) == [rec(1)]
    assert ".root.lock" not in os.listdir(tmp_path)


def test_close_removes_the_lock_and_the_next_writer_locks_again(tmp_path):
    WriteOnlyDataset(tmp_path, None, RT).close()
    assert ".root.lock" not in os.listdir(tmp_path)
    first = WriteOnlyDataset(tmp_path, None, RT, mode="a")
    with pytest.raises(KPLDatasetError, match="being written by another writer"):
        WriteOnlyDataset(tmp_path, None, RT, mode="a")
    first.close()


def test_empty_part_commits_without_a_part_folder(tmp_path):
    WriteOnlyDataset(tmp_path, None, RT).close()
    assert os.listdir(tmp_path) == ["root.manifest.json"]
    assert list(ReadOnlyDataset(tmp_path, None)) == []


def test_writing_and_reading_never_import_pandas(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 3000)
    code = textwrap.dedent(
        f"""
        import sys
        from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset, set_size_threshold
        set_size_threshold(1000)
        rt = {{"s": "String", "i": "Int", "f": "Float", "b": "Bool", "blob": "ByteArray",
              "file": "File", "objs": [{{"x": "Int", "tags": ["String"]}}]}}
        record = {{"s": "值", "i": 1, "f": 0.5, "b": True, "blob": b"ab", "file": {str(big)!r},
                  "objs": [{{"x": 2, "tags": ["a", "b"]}}]}}
        with WriteOnlyDataset({str(tmp_path / "ds")!r}, None, rt) as w:
            w.write(record)
        reader = ReadOnlyDataset({str(tmp_path / "ds")!r}, None)
        got = reader[0]
        reader.reset()
        assert list(reader) == [got] and got["objs"] == record["objs"] and got["file"]["size"] == 3000
        assert reader.read_file(got["file"]) == b"x" * 3000
        print("pandas" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_durable_writer_fsyncs_shards_and_manifest(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with WriteOnlyDataset(tmp_path, None, RT, shard_rows=2, batch_rows=1) as w:
        for i in range(3):
            w.write(rec(i))
    assert synced == []  # the default: atomic against crashes, no fsync
    with WriteOnlyDataset(tmp_path, None, RT, shard_rows=2, batch_rows=1, durable=True) as w:
        for i in range(3):
            w.write(rec(i))
    assert sum(p.endswith(".arrow.tmp") for p in synced) == 2
    assert any("root.manifest.json" in p for p in synced)
    assert list(ReadOnlyDataset(tmp_path, None)) == [rec(i) for i in range(3)]
