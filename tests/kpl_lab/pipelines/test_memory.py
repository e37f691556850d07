"""A flow over a dataset four times larger than the memory its process may use completes.

The run goes in a child process whose resident anonymous memory is watched: past LIMIT it is
killed, as an out-of-memory killer would. The dataset's mapped pages are page cache (the
kernel drops them under pressure), so they are not counted; everything the process
allocates is. Every record is read (checksums, paths, the join), one image in ten written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

from kpl_dataset import ReadOnlyDataset, WriteOnlyDataset
from kpl_lab.platform import Platform

LIMIT = 320 << 20  # the child's whole anonymous memory: interpreter, libraries, platform and the run
BLOB = 512 << 10
IMAGES = 4 * LIMIT // BLOB + 16  # their blobs alone are four times the limit
FLOW = """\
version: 1
name: big
nodes:
  raw:     {type: dataset, dataset: big}
  extract: {type: regex_extract, input: raw, field: path, pattern: '^[^/]+/(?P<type>[^/]+)/(?P<id>[^/]+)\\.[a-z]+$'}
  images:  {type: select, input: extract, where: "type = 'JPEGImages' AND id LIKE '%3'"}
  labels:  {type: select, input: extract, where: "type = 'Labels'"}
  named:   {type: rename, input: labels, fields: {contentType: label}}
  joined:  {type: left_join, left: images, right: named, on: id, fields: [label]}
  ids:     {type: label_id, input: joined, field: label, output: label_id}
"""
CHILD = """
import json, sys
from kpl_lab.pipelines.runner import PipelineRunner
from kpl_lab.platform import Platform
platform = Platform(home=sys.argv[1])
run = PipelineRunner(platform, memory_limit="64MB").run("p", sys.argv[2])
print(json.dumps({n.node: [n.state, n.rows_out, n.outputs, n.log] for n in run.nodes}))
"""


def _blob(i: int) -> bytes:
    return i.to_bytes(8, "little") * (BLOB // 8)


def _anonymous(pid: int) -> int:
    """Return a process's resident anonymous memory (the mapped dataset is page cache, not counted)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) << 10
    return 0


def test_a_flow_over_four_times_its_memory_limit_completes(tmp_path):
    folder = tmp_path / "upload"
    with WriteOnlyDataset(
        folder, "root", {"path": "String", "contentType": "String", "content": "ByteArray"}
    ) as w:
        for start in range(0, IMAGES, 16):
            ids = range(start, min(IMAGES, start + 16))
            labelled = [i for i in ids if i % 5]  # every fifth image has no label
            w.write_batch(
                pa.record_batch(
                    {
                        "path": [f"F/JPEGImages/{i:06d}.jpg" for i in ids]
                        + [f"F/Labels/{i:06d}.txt" for i in labelled],
                        "contentType": ["image/jpeg"] * len(ids) + [f"c{i % 3}" for i in labelled],
                        "content": pa.array([_blob(i) for i in ids] + [b"l"] * len(labelled), pa.binary()),
                    }
                )
            )
    platform = Platform(home=str(tmp_path / "home"))
    platform.catalog.add_dataset("p", "big", folder)
    stored = platform.catalog.path(platform.catalog.get_dataset("p", "big"))
    size = sum(f.stat().st_size for f in Path(stored).rglob("*") if f.is_file())
    assert size > 4 * LIMIT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "home"), FLOW],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    peak = 0
    while child.poll() is None:  # the limit: past it the child is killed, as an OOM killer would
        try:
            peak = max(peak, _anonymous(child.pid))
        except OSError:
            break
        if peak > LIMIT:
            child.send_signal(signal.SIGKILL)
        time.sleep(0.002)
    out, err = child.communicate()
    assert peak <= LIMIT, f"the run used {peak >> 20} MiB of anonymous memory (limit {LIMIT >> 20} MiB)"
    assert child.returncode == 0, err
    nodes = json.loads(out.splitlines()[-1])
    assert {n: v[0] for n, v in nodes.items()} == dict.fromkeys(nodes, "succeeded"), nodes
    kept = [i for i in range(IMAGES) if i % 10 == 3]
    assert nodes["ids"][1] == len(kept) and nodes["images"][1] == len(kept)

    result = ReadOnlyDataset(platform.storage.absolute(nodes["ids"][2]["out"]["path"]))
    assert result.get_meta_db().get("label_id.label_id") == {"field": "label", "labels": ["c0", "c1", "c2"]}
    for row, i in enumerate(kept):
        record = result[row]
        assert record["path"] == f"F/JPEGImages/{i:06d}.jpg" and record["content"] == _blob(i)
        assert record["type"] == "JPEGImages" and record["id"] == f"{i:06d}"  # type: a dictionary column
        assert record["label"] == (f"c{i % 3}" if i % 5 else None)
        assert record["label_id"] == (i % 3 if i % 5 else None)
    platform.close()


LEAN_CHILD = """
import json, sys
from kpl_lab.pipelines.runner import PipelineRunner
from kpl_lab.platform import Platform
platform = Platform(home=sys.argv[1])
run = PipelineRunner(platform).run("p", sys.argv[2])
print(json.dumps({"states": sorted({n.state for n in run.nodes}), "pandas": "pandas" in sys.modules}))
"""


def test_a_run_leaves_pandas_unimported(tmp_path):
    # pandas costs a process ~30 MB of resident memory; pyarrow loads it for pa.scalar(), pa.array()
    # and Boolean to_numpy(), which the sink's batch cutting used
    folder = tmp_path / "upload"
    with WriteOnlyDataset(folder, "root", {"path": "String", "contentType": "String"}) as w:
        w.write_batch(
            pa.record_batch(
                {
                    "path": [f"F/JPEGImages/{i:06d}.jpg" for i in range(50)]
                    + [f"F/Labels/{i:06d}.txt" for i in range(0, 50, 2)],
                    "contentType": ["image/jpeg"] * 50 + [f"c{i % 3}" for i in range(0, 50, 2)],
                }
            )
        )
    platform = Platform(home=str(tmp_path / "home"))
    platform.catalog.add_dataset("p", "big", folder)
    platform.close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    flow = FLOW.replace(" AND id LIKE '%3'", "")
    out = subprocess.run(
        [sys.executable, "-c", LEAN_CHILD, str(tmp_path / "home"), flow],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(out.stdout.splitlines()[-1]) == {"states": ["succeeded"], "pandas": False}


def _mapped(pid: int | str = "self") -> int:
    """Return a process's resident file-backed memory (mapped shards among it)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) << 10
    return 0


def test_a_reader_drops_the_pages_it_touched_and_reads_them_again(tmp_path):
    # how a fused query streams past its inputs: the checksums touch every page, each step then
    # touches only what it reads, and nothing stays resident for the whole run
    blob = 64 << 10
    with WriteOnlyDataset(tmp_path / "d", "root", {"content": "ByteArray"}) as w:
        for start in range(0, 512, 64):
            w.write_batch(
                pa.record_batch({"content": pa.array([_blob(i)[:blob] for i in range(start, start + 64)])})
            )
    reader = ReadOnlyDataset(tmp_path / "d")
    table = pa.Table.from_batches(reader.iter_batches())  # checks every batch: 32 MiB touched
    touched = _mapped()
    reader.drop_pages()
    assert touched - _mapped() >= 24 << 20, (touched >> 20, _mapped() >> 20)
    assert table.column("content")[300].as_py() == _blob(300)[:blob]  # read again from the page cache
    reader.close()
