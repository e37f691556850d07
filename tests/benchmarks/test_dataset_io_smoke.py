"""Smoke-test benchmarks/dataset_io.py at --scale small for ours, its zero-copy read, memcpy and loose files.

No timing checks.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPT = BENCH / "dataset_io.py"
WORKER = BENCH / "_peers" / "worker.py"


def _load_script():
    if "dataset_io_bench" in sys.modules:
        return sys.modules["dataset_io_bench"]
    spec = importlib.util.spec_from_file_location("dataset_io_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_small_run_prints_every_column(tmp_path):
    bench = _load_script()
    out_json = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--scale", "small", "--only", "ours,ours-zerocopy,memcpy,loose"]
        + ["--repeat", "1"]
        + ["--lookups", "300", "--workdir", str(tmp_path), "--json", str(out_json)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    lines = done.stdout.splitlines()
    assert "warm page cache" in lines[0]
    header = next(line for line in lines if line.startswith("payload"))
    for title, *_ in bench.COLUMNS:
        assert title in header
    rows = [line for line in lines if line.startswith(("1,000 × 10 KiB", "200 × 64 KiB"))]
    assert len(rows) == 8  # four tools × two payloads
    for row in rows:
        assert "error" not in row and "n/a" not in row
        assert row.split()[4] in ("ours", "ours-zerocopy", "memcpy", "loose")
    assert any("(1.00×)" in row for row in rows if " ours " in row)
    assert any("random read p50" in line for line in lines)
    for clock in ("wall", "CPU"):
        assert any(f"seq read (bytes) ≥ 80% of memcpy, {clock} time" in line for line in lines)
        assert any(f"seq read (zero_copy=True), {clock} time" in line for line in lines)
    assert not any("write ≥ memcpy" in line or "write ≥ ours-" in line for line in lines)

    doc = json.loads(out_json.read_text())
    assert doc["cache"] == "warm page cache"
    assert {(r["tool"], r["records"], r["size"]) for r in doc["results"]} == {
        (tool, n, size)
        for tool in ("ours", "ours-zerocopy", "memcpy", "loose")
        for n, size in bench.SCALES["small"]
    }
    for result in doc["results"]:
        assert result["error"] is None
        for _, phase, key, _ in bench.COLUMNS:
            assert result[f"{phase}.{key}"] > 0, (result["tool"], phase, key)
        assert result["disk_bytes"] >= result["records"] * result["size"]
    # Nothing written is left behind in the scratch folder.
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_wrong_data_is_refused(tmp_path):
    """A reader that returns a damaged record must fail the run, not get credit."""
    (tmp_path / "bad_peer.py").write_text(
        "from loose import write, open_reader, get, close, scan as _scan\n"
        "def scan(reader):\n"
        "    for k, row in enumerate(_scan(reader)):\n"
        "        yield (row[0][:-1] + b'?', *row[1:]) if k == 0 else row\n"
    )
    data = tmp_path / "data"
    data.mkdir()
    common = ["--records", "50", "--size", "1024"]
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for phase, code in (("write", 0), ("seq", 3)):
        done = subprocess.run(
            [sys.executable, str(WORKER), "bad_peer", phase, str(data), *common],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == code, done.stderr
    assert "record 0 differs from what was written in field(s) ['data']" in done.stderr


@pytest.mark.parametrize(
    ("text", "size"), [("10240", 10240), ("10KiB", 10240), ("64KB", 65536), ("1m", 1 << 20)]
)
def test_parse_size(text, size):
    assert _load_script().parse_size(text) == size


def test_unknown_tool_is_named(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "ours,lmdb", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "unknown tool(s) ['lmdb']" in done.stderr
