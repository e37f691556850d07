"""Hostile uploads are refused by name, and a refused import leaves no dataset behind."""

from __future__ import annotations

import gzip
import io
import mmap
import os
import re
import stat
import tarfile
import tracemalloc
import zipfile
import zlib

import pytest

from kpl_dataset import ReadOnlyDataset, list_parts
from kpl_dataset.cli import main
from kpl_dataset.importers import ImportFailed, Limits, UnsafeEntry, import_raw, open_source
from kpl_dataset.importers.archive import SPOOL_ABOVE, TarSource
from kpl_dataset.importers.safety import decode_name, safe_name

MiB = 1 << 20


def run(argv, capsys):
    code = main(["-q", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_nothing_left(dest):
    """No dataset and no staging folder beside it."""
    assert not dest.exists()
    if dest.parent.exists():
        assert not [p for p in dest.parent.iterdir() if p.name.startswith(f".{dest.name}.importing-")]


class RawNameInfo(zipfile.ZipInfo):
    """A zip entry whose name bytes are written as given, without the UTF-8 flag."""

    def __init__(self, raw: bytes):
        super().__init__(raw.decode("cp437"))

    def _encodeFilenameFlags(self):
        return self.filename.encode("cp437"), self.flag_bits


def make_zip(path, entries):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return path


def make_tar(path, members, mode="w:gz"):
    with tarfile.open(path, mode, format=tarfile.GNU_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def tar_file(name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


# --- names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, reason",
    [
        ("../evil.txt", "traversal"),
        ("a/../../evil.txt", "traversal"),
        ("/etc/passwd", "absolute"),
        ("\\windows\\evil.txt", "absolute"),
        ("C:\\evil.txt", "drive letter"),
        ("c:evil.txt", "drive letter"),
        ("a\x00b", "NUL"),
    ],
)
def test_safe_name_refuses(name, reason):
    with pytest.raises(UnsafeEntry, match=reason):
        safe_name(name)


def test_safe_name_cleans():
    assert safe_name("./a//b/./c.txt") == "a/b/c.txt"
    assert safe_name("dir\\子目录\\文件.txt") == "dir/子目录/文件.txt"


def test_decode_name_tries_utf8_then_gbk_then_cp437():
    assert decode_name("水果/苹果.jpg".encode()) == "水果/苹果.jpg"
    assert decode_name("水果/苹果.jpg".encode("gbk")) == "水果/苹果.jpg"
    assert decode_name("café.txt".encode("cp437")) == "café.txt"


# --- hostile archives through the command -------------------------------------------


@pytest.mark.parametrize("name", ["../evil.txt", "/tmp/evil.txt", "C:\\evil.txt", "ok/../../evil.txt"])
def test_zip_with_escaping_name_is_refused(tmp_path, capsys, name):
    src = make_zip(tmp_path / "up.zip", [("good.txt", b"fine"), (name, b"evil")])
    dest = tmp_path / "out" / "ds"
    code, _, err = run(["import", src, dest], capsys)
    assert code == 2
    assert repr(name) in err and "refused" in err
    assert "Traceback" not in err
    assert_nothing_left(dest)
    assert not (tmp_path / "evil.txt").exists()
    assert not (tmp_path / "out" / "evil.txt").exists()


def test_zip_symlink_is_refused(tmp_path, capsys):
    src = tmp_path / "up.zip"
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr("a.txt", b"a")
        link = zipfile.ZipInfo("link")
        link.create_system = 3
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    dest = tmp_path / "ds"
    code, _, err = run(["import", src, dest], capsys)
    assert code == 2
    assert "'link': symbolic link refused" in err
    assert_nothing_left(dest)


def test_zip_device_is_refused(tmp_path, capsys):
    src = tmp_path / "up.zip"
    with zipfile.ZipFile(src, "w") as zf:
        dev = zipfile.ZipInfo("dev/null")
        dev.create_system = 3
        dev.external_attr = (stat.S_IFCHR | 0o666) << 16
        zf.writestr(dev, b"")
    code, _, err = run(["import", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "'dev/null': special file" in err


@pytest.mark.parametrize(
    "kind, message",
    [
        (tarfile.SYMTYPE, "symbolic link refused"),
        (tarfile.LNKTYPE, "hard link refused"),
        (tarfile.CHRTYPE, "special file"),
        (tarfile.BLKTYPE, "special file"),
        (tarfile.FIFOTYPE, "special file"),
    ],
)
def test_tar_links_and_devices_are_refused(tmp_path, capsys, kind, message):
    bad = tarfile.TarInfo("data/bad")
    bad.type = kind
    bad.linkname = "/etc/shadow"
    src = make_tar(tmp_path / "up.tar.gz", [tar_file("data/ok.txt", b"ok"), (bad, None)])
    dest = tmp_path / "ds"
    code, _, err = run(["import", src, dest], capsys)
    assert code == 2
    assert f"'data/bad': {message}" in err
    assert_nothing_left(dest)


def test_tar_traversal_is_refused(tmp_path, capsys):
    src = make_tar(tmp_path / "up.tar", [tar_file("../../evil.txt", b"x")], mode="w")
    code, _, err = run(["import", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "'../../evil.txt': '..' in path refused" in err


def test_folder_symlink_is_refused(tmp_path, capsys):
    src = tmp_path / "up"
    src.mkdir()
    (src / "a.txt").write_bytes(b"a")
    os.symlink("/etc/passwd", src / "passwd")
    dest = tmp_path / "ds"
    code, _, err = run(["import", src, dest], capsys)
    assert code == 2
    assert "'passwd': symbolic link refused" in err
    assert_nothing_left(dest)


def test_folder_fifo_is_refused(tmp_path, capsys):
    src = tmp_path / "up"
    src.mkdir()
    os.mkfifo(src / "pipe")
    code, _, err = run(["import", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "'pipe': special file" in err


def test_bomb_by_total_size_is_refused_before_reading(tmp_path, capsys):
    payload = os.urandom(MiB)  # incompressible: the ratio is fine, the size is not
    src = make_zip(tmp_path / "up.zip", [(f"f{i}.bin", payload) for i in range(3)])
    dest = tmp_path / "ds"
    code, _, err = run(["import", src, dest, "--max-size", "2M"], capsys)
    assert code == 2
    assert "total uncompressed size" in err and "'f2.bin'" in err
    assert_nothing_left(dest)


def test_bomb_by_ratio_is_refused(tmp_path, capsys):
    src = make_zip(tmp_path / "up.zip", [("zeros.bin", bytes(8 * MiB))])
    dest = tmp_path / "ds"
    code, _, err = run(["import", src, dest], capsys)
    assert code == 2
    assert "'zeros.bin': compression ratio" in err and "zip bomb" in err
    assert_nothing_left(dest)
    # The same archive passes once the user raises the limit on purpose.
    code, out, _ = run(["import", src, dest, "--max-ratio", "100000"], capsys)
    assert code == 0, out
    assert len(_records(dest)) == 1


def test_tar_gz_bomb_by_ratio_is_refused(tmp_path, capsys):
    src = make_tar(tmp_path / "up.tgz", [tar_file("zeros.bin", bytes(8 * MiB))])
    code, _, err = run(["import", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "compression ratio" in err


def _lie_about_size(path, declared):
    """Rewrite the uncompressed size of the only entry in both headers."""
    data = bytearray(path.read_bytes())
    local = data.index(b"PK\x03\x04")
    data[local + 22 : local + 26] = declared.to_bytes(4, "little")
    central = data.index(b"PK\x01\x02")
    data[central + 24 : central + 28] = declared.to_bytes(4, "little")
    path.write_bytes(bytes(data))


def test_lying_header_is_caught_while_inflating(tmp_path, capsys):
    src = make_zip(tmp_path / "up.zip", [("small.txt", bytes(4 * MiB))])
    _lie_about_size(src, 1000)  # declared 1000 bytes: passes every check made before reading
    dest = tmp_path / "ds"
    code, _, err = run(["import", src, dest], capsys)
    assert code == 2
    assert "'small.txt': expands beyond its declared size of 1000 bytes" in err
    assert_nothing_left(dest)


def test_real_bytes_are_counted_against_the_total(tmp_path):
    src = make_zip(tmp_path / "up.zip", [("a.bin", os.urandom(600_000))])
    _lie_about_size(src, 100)
    with open_source(src, Limits(max_total_size=500_000)) as source, pytest.raises(UnsafeEntry):
        source.read(source.entries[0])


def test_damaged_zip_names_the_entry(tmp_path, capsys):
    src = make_zip(tmp_path / "up.zip", [("a.txt", b"hello world " * 100)])
    data = bytearray(src.read_bytes())
    data[40:60] = b"\xff" * 20  # inside the deflate stream of the only entry
    src.write_bytes(bytes(data))
    code, _, err = run(["import", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "'a.txt'" in err
    assert "Traceback" not in err


def test_not_an_archive(tmp_path, capsys):
    src = tmp_path / "notes.txt"
    src.write_text("just text")
    code, _, err = run(["import", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "not a folder, zip or tar archive" in err


def test_too_many_entries(tmp_path):
    src = make_zip(tmp_path / "up.zip", [(f"{i}.txt", b"x") for i in range(5)])
    with pytest.raises(UnsafeEntry, match="more than 3 entries"):
        open_source(src, Limits(max_entries=3))


def test_failed_import_into_existing_dataset_keeps_it(tmp_path, capsys):
    dest = tmp_path / "ds"
    ok = make_zip(tmp_path / "ok.zip", [("a.txt", b"a")])
    assert run(["import", ok, dest], capsys)[0] == 0
    bad = make_zip(tmp_path / "bad.zip", [("b.txt", b"b"), ("../evil", b"x")])
    code, _, err = run(["import", bad, dest, "--part", "more"], capsys)
    assert code == 2
    assert list_parts(str(dest)) == ["root"]
    # A part that fails half-way (a lying entry after a good one) is not committed either.
    late = make_zip(tmp_path / "late.zip", [("b.txt", b"b"), ("c.txt", bytes(4 * MiB))])
    _lie_second_entry(late, 10)
    code, _, err = run(["import", late, dest, "--part", "more"], capsys)
    assert code == 2, err
    assert "'c.txt'" in err
    assert list_parts(str(dest)) == ["root"]
    code, _, err = run(["import", ok, dest], capsys)
    assert code == 2 and "part 'root' already exists" in err


def test_import_refuses_a_non_empty_folder_that_is_no_dataset(tmp_path, capsys):
    dest = tmp_path / "home"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    src = make_zip(tmp_path / "up.zip", [("a.txt", b"a")])
    code, _, err = run(["import", src, dest], capsys)
    assert code == 2 and "holds no dataset" in err
    assert sorted(p.name for p in dest.iterdir()) == ["notes.txt"]


def _lie_second_entry(path, declared):
    data = bytearray(path.read_bytes())
    local = data.index(b"PK\x03\x04", data.index(b"PK\x03\x04") + 4)
    data[local + 22 : local + 26] = declared.to_bytes(4, "little")
    central = data.index(b"PK\x01\x02", data.index(b"PK\x01\x02") + 4)
    data[central + 24 : central + 28] = declared.to_bytes(4, "little")
    path.write_bytes(bytes(data))


# --- names in any language -----------------------------------------------------------


def _records(dest, part=None):
    with ReadOnlyDataset(str(dest), part) as reader:
        return list(reader)


def _paths(dest):
    return sorted(r["path"] for r in _records(dest))


def test_zip_names_utf8_flag_gbk_and_cp437(tmp_path, capsys):
    src = tmp_path / "上传.zip"
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr("水果/苹果.txt", "苹果".encode())  # zipfile sets the UTF-8 flag
        zf.writestr(RawNameInfo("水果/香蕉.txt".encode("gbk")), b"banana")  # Windows, Chinese locale
        zf.writestr(RawNameInfo("café.txt".encode("cp437")), b"coffee")  # old DOS tools
        zf.writestr("__MACOSX/._x", b"junk")
    info = zipfile.ZipFile(src).getinfo("水果/苹果.txt")
    assert info.flag_bits & 0x800
    dest = tmp_path / "数据集"
    code, out, err = run(["import", src, dest], capsys)
    assert code == 0, err
    assert _paths(dest) == ["café.txt", "水果/苹果.txt", "水果/香蕉.txt"]
    records = {r["path"]: r for r in _records(dest)}
    assert records["水果/香蕉.txt"]["content"] == b"banana"
    assert records["水果/苹果.txt"]["contentType"] == "text/plain"


def test_zip_unicode_path_extra_field(tmp_path):
    src = tmp_path / "up.zip"
    raw = "报告.txt".encode("gbk")
    info = RawNameInfo(raw)
    unicode_name = "报告.txt".encode()
    body = b"\x01" + zlib.crc32(raw).to_bytes(4, "little") + unicode_name
    info.extra = (0x7075).to_bytes(2, "little") + len(body).to_bytes(2, "little") + body
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr(info, b"r")
    with open_source(src) as source:
        assert [e.path for e in source.entries] == ["报告.txt"]


def test_tar_names_utf8_and_gbk(tmp_path, capsys):
    src = tmp_path / "up.tar"
    with tarfile.open(src, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as tf:
        for name, data in [
            ("图片/一.txt", b"1"),
            ("图片/二.txt".encode("gbk").decode("utf-8", "surrogateescape"), b"2"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    dest = tmp_path / "ds"
    code, _, err = run(["import", src, dest], capsys)
    assert code == 0, err
    assert _paths(dest) == ["图片/一.txt", "图片/二.txt"]


def test_folder_names_in_chinese_and_raw_gbk(tmp_path, capsys):
    src = tmp_path / "原始数据"
    (src / "类别").mkdir(parents=True)
    (src / "类别" / "图.png").write_bytes(b"\x89PNG")
    raw = os.fsencode(src) + b"/" + "旧文件.txt".encode("gbk")
    with open(raw, "wb") as fp:
        fp.write(b"old")
    dest = tmp_path / "ds"
    code, _, err = run(["import", src, dest, "--part", "训练"], capsys)
    assert code == 0, err
    records = _records(dest, "训练")
    assert sorted((r["path"], r["contentType"], r["content"]) for r in records) == [
        ("旧文件.txt", "text/plain", b"old"),
        ("类别/图.png", "image/png", b"\x89PNG"),
    ]


def test_import_folder_zip_and_tar_give_the_same_records(tmp_path, capsys):
    files = {"a/1.jpg": b"\xff\xd8jpeg", "a/b/说明.json": b"{}", "top.xml": b"<x/>"}
    folder = tmp_path / "src"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    zsrc = make_zip(tmp_path / "src.zip", files.items())
    tsrc = make_tar(tmp_path / "src.tgz", [tar_file(n, d) for n, d in files.items()])
    results = []
    for i, src in enumerate([folder, zsrc, tsrc]):
        dest = tmp_path / f"ds{i}"
        assert run(["import", src, dest], capsys)[0] == 0
        results.append(sorted((r["path"], r["contentType"], r["content"]) for r in _records(dest)))
    assert results[0] == results[1] == results[2]
    assert results[0] == [
        ("a/1.jpg", "image/jpeg", b"\xff\xd8jpeg"),
        ("a/b/说明.json", "application/json", b"{}"),
        ("top.xml", "application/xml", b"<x/>"),
    ]


def test_import_failure_is_an_import_failed_error(tmp_path):
    with pytest.raises(ImportFailed, match="no such file or folder"):
        open_source(tmp_path / "missing.zip")


# --- bombs stop while inflating, large entries never sit whole in memory ----------------


class CountingGzip(gzip.GzipFile):
    """A gzip reader that counts the bytes it inflates."""

    inflated = 0

    def read(self, size=-1):
        data = super().read(size)
        CountingGzip.inflated += len(data)
        return data


def test_tar_gz_bomb_stops_at_the_first_limit_crossed(tmp_path):
    src = tmp_path / "bomb.tar.gz"
    with gzip.open(src, "wb") as out:  # 256 MiB of zeros in a tar: about 250 KiB on disk
        info = tarfile.TarInfo("zeros.bin")
        info.size = 256 * MiB
        out.write(info.tobuf(tarfile.GNU_FORMAT))
        for _ in range(256):
            out.write(bytes(MiB))
    CountingGzip.inflated = 0
    with pytest.raises(UnsafeEntry, match=r"compression ratio .*possible zip bomb"):
        TarSource(src, Limits(), CountingGzip)
    assert CountingGzip.inflated <= 2 * MiB  # stopped just past the 1 MiB ratio floor, not at 256 MiB


def test_tar_gz_size_is_checked_while_inflating(tmp_path):
    payload = os.urandom(MiB)  # incompressible: only the size limit can stop it
    src = make_tar(tmp_path / "up.tgz", [tar_file(f"f{i}.bin", payload) for i in range(4)])
    CountingGzip.inflated = 0
    with pytest.raises(UnsafeEntry, match="total uncompressed size"):
        TarSource(src, Limits(max_total_size=2 * MiB), CountingGzip)
    assert CountingGzip.inflated <= 3 * MiB


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_large_zip_entry_is_spooled_not_held_in_memory(tmp_path, compression):
    block = os.urandom(MiB)
    size = 2 * SPOOL_ABOVE + 12345
    src = tmp_path / "big.zip"
    with zipfile.ZipFile(src, "w", compression) as zf, zf.open("big.bin", "w", force_zip64=True) as out:
        for offset in range(0, size, MiB):
            out.write(block[: min(MiB, size - offset)])
    dest = tmp_path / "ds"
    tracemalloc.start()
    try:
        import_raw(src, dest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size // 2  # Python never held the entry whole (it would take `size` bytes once)
    (record,) = _records(dest)
    content = record["content"]
    assert len(content) == size
    assert content[:MiB] == block and content[-12345:] == block[:12345]


def test_large_entry_content_is_a_read_only_map(tmp_path):
    src = tmp_path / "big.zip"
    with zipfile.ZipFile(src, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("big.bin", bytes(range(256)) * ((SPOOL_ABOVE // 256) + 1))
    with open_source(src) as source:
        (entry,) = source.entries
        content = source.content(entry)
        assert isinstance(content, mmap.mmap)
        assert content[:256] == bytes(range(256)) and len(content) == entry.size
        with pytest.raises(TypeError):
            content[0] = 1


# --- archives with nothing to import, truncated archives ------------------------------


def test_archive_of_os_metadata_only_is_refused(tmp_path, capsys):
    src = make_zip(
        tmp_path / "mac.zip",
        [("__MACOSX/._a.jpg", b"x"), ("photos/.DS_Store", b"x"), ("photos/Thumbs.db", b"x")],
    )
    code, _, err = run(["import", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert f"{src}: nothing to import: only OS metadata (__MACOSX, .DS_Store, Thumbs.db)" in err
    assert_nothing_left(tmp_path / "ds")


def test_empty_archive_is_refused(tmp_path):
    src = make_tar(tmp_path / "empty.tar.gz", [])
    with pytest.raises(ImportFailed, match="nothing to import: it holds no files"):
        open_source(src)


@pytest.mark.parametrize("suffix", ["tar.gz", "tar.bz2", "tar.xz"])
def test_truncated_compressed_tar_is_damaged(tmp_path, suffix):
    src = make_tar(
        tmp_path / f"up.{suffix}",
        [tar_file(f"f{i}.bin", os.urandom(200_000)) for i in range(3)],
        mode=f"w:{suffix.rsplit('.', 1)[1]}",
    )
    src.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    with pytest.raises(ImportFailed, match=rf"{re.escape(str(src))}: damaged archive"):
        open_source(src)


def test_truncated_plain_tar_is_damaged(tmp_path):
    src = make_tar(tmp_path / "up.tar", [tar_file("a.bin", os.urandom(300_000))], mode="w")
    src.write_bytes(src.read_bytes()[:100_000])
    with pytest.raises(ImportFailed, match=rf"{re.escape(str(src))}: damaged"), open_source(src) as source:
        for entry in source.entries:
            source.read(entry)


def test_truncated_zip_is_damaged(tmp_path, capsys):
    src = make_zip(tmp_path / "up.zip", [("a.bin", os.urandom(100_000))])
    src.write_bytes(src.read_bytes()[:50_000])
    code, _, err = run(["import", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert f"{src}: damaged zip archive" in err and "truncated" in err
