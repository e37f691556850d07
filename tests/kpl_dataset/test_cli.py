"""The kpl-dataset command: info, head, export, verify, exit codes and the progress bar."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from importlib.metadata import entry_points

import pytest

from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset
from kpl_dataset._progress import Progress
from kpl_dataset.cli import main, parse_size

FILES = {"图片/猫.png": b"\x89PNG cat", "docs/说明.txt": "你好".encode(), "a.json": b'{"k": 1}'}


def run(argv, capsys):
    code = main(["-q", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def raw_dataset(tmp_path, capsys):
    src = tmp_path / "up.zip"
    with zipfile.ZipFile(src, "w") as zf:
        for name, data in FILES.items():
            zf.writestr(name, data)
    dest = tmp_path / "raw"
    assert run(["import", src, dest], capsys)[0] == 0
    return dest


@pytest.fixture
def detection_dataset(tmp_path):
    dest = tmp_path / "det"
    record_type = {
        "path": BasicType.String,
        "content": BasicType.ByteArray,
        "object": [{"name": BasicType.String, "xmin": BasicType.Int}],
    }
    with WriteOnlyDataset(str(dest), None, record_type) as writer:
        for i in range(7):
            writer.write({"path": f"{i}.jpg", "content": bytes(i), "object": [{"name": "猫", "xmin": i}]})
    return dest


def test_entry_point_is_registered():
    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "kpl-dataset"]
    assert ep.value == "kpl_dataset.cli:main"


def test_info(raw_dataset, capsys):
    code, out, _ = run(["info", raw_dataset], capsys)
    assert code == 0
    assert "1 part(s)" in out
    assert "part root: 3 records" in out
    assert "  content: ByteArray" in out
    code, out, _ = run(["info", raw_dataset, "--json"], capsys)
    doc = json.loads(out)
    (part,) = doc["parts"]
    assert part["part"] == "root" and part["records"] == 3 and part["bytes"] > 0
    assert part["record_type"] == {"path": "String", "contentType": "String", "content": "ByteArray"}


def test_head_shows_bytes_as_sizes(detection_dataset, capsys):
    code, out, _ = run(["head", detection_dataset, "-n", "2"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "# part root: 7 records"
    assert [json.loads(line) for line in lines[1:]] == [
        {"path": "0.jpg", "content": "<0 bytes>", "object": [{"name": "猫", "xmin": 0}]},
        {"path": "1.jpg", "content": "<1 bytes>", "object": [{"name": "猫", "xmin": 1}]},
    ]
    code, _, err = run(["head", detection_dataset, "--part", "nope"], capsys)
    assert code == 2 and "no part 'nope'" in err


def test_export_files_round_trip(raw_dataset, tmp_path, capsys):
    out_dir = tmp_path / "exported"
    code, out, err = run(["export", raw_dataset, out_dir], capsys)
    assert code == 0, err
    written = {p.relative_to(out_dir).as_posix(): p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    assert written == FILES
    code, _, err = run(["export", raw_dataset, out_dir], capsys)
    assert code == 2 and "already exists" in err


def test_export_jsonl_for_other_shapes(detection_dataset, tmp_path, capsys):
    out_dir = tmp_path / "exported"
    code, out, err = run(["export", detection_dataset, out_dir], capsys)
    assert code == 0, err
    lines = (out_dir / "root.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 7
    assert json.loads(lines[3]) == {
        "path": "3.jpg",
        "content": {"$bytes": "AAAA"},
        "object": [{"name": "猫", "xmin": 3}],
    }
    code, _, err = run(["export", detection_dataset, tmp_path / "x", "--format", "files"], capsys)
    assert code == 0, err  # it has path and content: the files can be written
    assert (tmp_path / "x" / "3.jpg").read_bytes() == bytes(3)


def test_export_refuses_hostile_paths_in_a_dataset(tmp_path, capsys):
    src = tmp_path / "evil"
    with WriteOnlyDataset(str(src), None, {"path": BasicType.String, "content": BasicType.ByteArray}) as w:
        w.write({"path": "ok.txt", "content": b"ok"})
        w.write({"path": "../../escaped.txt", "content": b"x"})
    code, _, err = run(["export", src, tmp_path / "out" / "x", "--format", "files"], capsys)
    assert code == 2
    assert "record 1: path '../../escaped.txt'" in err
    assert not list(tmp_path.rglob("escaped.txt"))


def test_verify_ok(raw_dataset, capsys):
    code, out, err = run(["verify", raw_dataset], capsys)
    assert code == 0, err
    assert "part root: 3 records ok" in out


def _shards(dataset):
    return sorted(p for p in dataset.rglob("*") if p.is_file() and p.parent.name.endswith(".kpl"))


def test_verify_damaged_shard_exits_1(detection_dataset, capsys):
    (shard,) = _shards(detection_dataset)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, _, err = run(["verify", detection_dataset], capsys)
    assert code == 1
    assert "verify failed" in err and "part 'root'" in err


def test_verify_truncated_or_missing_shard_exits_1(detection_dataset, capsys):
    (shard,) = _shards(detection_dataset)
    shard.write_bytes(shard.read_bytes()[:100])
    code, _, err = run(["verify", detection_dataset], capsys)
    assert code == 1 and "part 'root'" in err
    shard.unlink()
    code, _, err = run(["verify", detection_dataset], capsys)
    assert code == 1 and "part 'root'" in err


def test_verify_empty_folder_exits_1(tmp_path, capsys):
    code, _, err = run(["verify", tmp_path], capsys)
    assert code == 1 and "no dataset parts" in err


def test_subprocess_bad_input_exits_2_without_traceback(tmp_path):
    missing = tmp_path / "missing.zip"
    for argv in (
        ["import", str(missing), str(tmp_path / "ds")],
        ["info", str(tmp_path / "nothing")],
        ["voc"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "kpl_dataset.cli", *argv], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stderr.strip()
    assert not (tmp_path / "ds").exists()


def test_subprocess_import_and_info(tmp_path):
    src = tmp_path / "src"
    (src / "子目录").mkdir(parents=True)
    (src / "子目录" / "a.txt").write_text("a")
    dest = tmp_path / "ds"
    cmd = [sys.executable, "-m", "kpl_dataset.cli"]
    proc = subprocess.run([*cmd, "import", str(src), str(dest)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # not a terminal: no progress bar
    proc = subprocess.run([*cmd, "head", str(dest)], capture_output=True, text=True, timeout=120)
    assert '"path": "子目录/a.txt"' in proc.stdout
    with ReadOnlyDataset(str(dest), None) as reader:
        assert reader[0]["content"] == b"a"


def test_parse_size():
    assert parse_size("1024") == 1024
    assert parse_size("500M") == 500 << 20
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("2k") == 2048


def test_bad_size_option_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["import", str(tmp_path), str(tmp_path / "ds"), "--max-size", "lots"])
    assert exc.value.code == 2
    assert "not a size" in capsys.readouterr().err


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal():
    stream = Terminal()
    with Progress("import", 4, stream=stream) as progress:
        for _ in range(4):
            progress.update()
    text = stream.getvalue()
    assert "import [" in text and "4/4 records" in text and "ETA" in text
    assert text.endswith("\n")


def test_progress_quiet_or_not_a_terminal():
    for stream, quiet in ((Terminal(), True), (io.StringIO(), False)):
        with Progress("x", 3, stream=stream, quiet=quiet) as progress:
            progress.update(3)
        assert stream.getvalue() == ""
    unknown = Progress("x", None, stream=io.StringIO())
    unknown.update(5)
    assert "5 records" in unknown.line()
