"""Crash safety for real: a writer process is SIGKILLed mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from kpl_dataset import BasicType, KPLDatasetError, ReadOnlyDataset, WriteOnlyDataset, list_parts

RT = {"i": BasicType.Int, "blob": BasicType.ByteArray}

CHILD = textwrap.dedent(
    """
    import sys
    from kpl_dataset import BasicType, WriteOnlyDataset
    data_dir, mode = sys.argv[1], sys.argv[2]
    w = WriteOnlyDataset(data_dir, "part", {"i": BasicType.Int, "blob": BasicType.ByteArray},
                         mode=mode, batch_rows=7, shard_rows=21)
    i = 1000
    while True:
        w.write({"i": i, "blob": bytes(100)})
        i += 1
        if i == 1100:
            print("ready", flush=True)  # several shards are finished, more are being written
    """
)


def kill_mid_write(data_dir, mode: str) -> None:
    """Run a writer in a subprocess and SIGKILL it while it writes."""
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir), mode], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout.readline().strip() == "ready"
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL


def committed(data_dir, n: int) -> None:
    with WriteOnlyDataset(data_dir, "part", RT, batch_rows=4) as w:
        for i in range(n):
            w.write({"i": i, "blob": bytes([i]) * i})


def expect(data_dir, n: int) -> None:
    reader = ReadOnlyDataset(data_dir, "part")
    assert list(reader) == [{"i": i, "blob": bytes([i]) * i} for i in range(n)]
    reader.verify()


def test_killed_first_write_leaves_nothing(tmp_path):
    kill_mid_write(tmp_path, "w")
    assert os.listdir(tmp_path / "part.kpl")  # the killed writer did leave files behind
    assert list_parts(tmp_path) == []
    with pytest.raises(KPLDatasetError):
        ReadOnlyDataset(tmp_path, "part")
    committed(tmp_path, 3)
    expect(tmp_path, 3)
    assert len(os.listdir(tmp_path / "part.kpl")) == 1  # the next writer removed the leftovers


@pytest.mark.parametrize("mode", ["w", "a"])
def test_killed_rewrite_keeps_previous_commit(tmp_path, mode):
    committed(tmp_path, 10)
    kill_mid_write(tmp_path, mode)
    expect(tmp_path, 10)
    with WriteOnlyDataset(tmp_path, "part", None, mode="a") as w:
        w.write({"i": 10, "blob": bytes([10]) * 10})
    expect(tmp_path, 11)
    reader = ReadOnlyDataset(tmp_path, "part")
    named = {s.path.split("/")[1] for s in reader.manifest.shards}
    assert set(os.listdir(tmp_path / "part.kpl")) == named
