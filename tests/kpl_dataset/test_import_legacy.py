"""Datasets written by the original kpl-dataset 0.0.9 migrate with every value intact."""

from __future__ import annotations

import base64
import json
import shutil
import struct
from pathlib import Path

import pytest

from kpl_dataset import MetaDB, ReadOnlyDataset, list_parts
from kpl_dataset.cli import main
from kpl_dataset.importers.legacy import LegacyPart, decode_map, read_index, read_meta
from kpl_dataset.importers.protowire import WireError, fields, parse_text, read_varint, signed64, unescape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kpl_dataset_009"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))


def run(argv, capsys):
    code = main(["-q", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def comparable(value, kind, reader):
    """Turn a migrated value into expected.json's shape (bytes and files as base64)."""
    if isinstance(kind, dict):
        return {k: comparable(value[k], t, reader) for k, t in kind.items()}
    if isinstance(kind, list):
        return [comparable(v, kind[0], reader) for v in value]
    if kind == "ByteArray":
        return {"$bytes": base64.b64encode(value).decode()}
    if kind == "File":
        return {"$file": base64.b64encode(reader.read_file(value)).decode()}
    return value


@pytest.mark.parametrize("dataset", sorted(EXPECTED))
def test_migrate_fixture(tmp_path, capsys, dataset):
    dest = tmp_path / "migrated"
    code, out, err = run(["legacy", FIXTURES / dataset, dest], capsys)
    assert code == 0, err
    expected = EXPECTED[dataset]
    assert list_parts(str(dest)) == sorted(expected)
    for part, want in expected.items():
        assert f"part {part!r}: {len(want['records'])} records" in out
        with ReadOnlyDataset(str(dest), part) as reader:
            assert reader.schema == want["record_type"]
            assert list(reader.schema) == list(want["record_type"])  # field order kept
            got = [comparable(r, reader.schema, reader) for r in reader]
            assert got == want["records"]
            db = reader.get_meta_db()
            assert {k: db.get(k) for k in db.keys()} == want["properties"]  # noqa: SIM118 - MetaDB is no dict


def test_fixture_parts_decode_without_migration():
    part = LegacyPart(FIXTURES / "alltypes", "root")
    assert len(part) == 2
    large = next(iter(part))  # first record: small file inlined
    assert large["file"]["type"] == 0 and large["file"]["file_path"] == ""
    second = list(part)[1]["file"]
    assert second["type"] == 1 and second["file_path"].startswith("files/") and second["size"] == 3072
    assert len(second["content"]) == 512  # the original keeps a 512-byte preview inline
    assert part.large_file(second["file_path"]).stat().st_size == 3072


def test_meta_text_format_with_escaped_chinese():
    ident, version, record_type = read_meta(FIXTURES / "classification" / "测试.meta")
    assert ident == "测试" and version == 1
    assert list(record_type) == ["path", "content", "contentType", "class_name", "class_id"]


# --- wire format ---------------------------------------------------------------------


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def test_varints_and_signed_values():
    for n in [0, 1, 127, 128, 300, 2**40, 2**63 - 1]:
        assert read_varint(varint(n), 0) == (n, len(varint(n)))
    assert signed64(read_varint(varint(-5), 0)[0]) == -5
    with pytest.raises(WireError, match="truncated varint"):
        read_varint(b"\x80\x80", 0)


def test_index_packed_and_unpacked(tmp_path):
    packed = tmp_path / "p.index"
    body = b"".join(varint(n) for n in [0, 10, 25])
    packed.write_bytes(b"\x0a" + varint(len(body)) + body)
    unpacked = tmp_path / "u.index"
    unpacked.write_bytes(b"".join(b"\x08" + varint(n) for n in [0, 10, 25]))
    assert read_index(packed) == read_index(unpacked) == [0, 10, 25]


def test_fields_reject_garbage():
    with pytest.raises(WireError, match="runs past the end"):
        list(fields(b"\x0a\x05ab"))
    with pytest.raises(WireError, match="wire type"):
        list(fields(b"\x0b"))


def test_decode_map_defaults_for_missing_keys():
    # FeatureMap with only "n" -> Feature{int64_field: -3}; "s" and "l" are absent.
    feature = b"\x28" + varint(-3)
    entry = b"\x0a\x01n" + b"\x12" + varint(len(feature)) + feature
    buf = b"\x0a" + varint(len(entry)) + entry
    assert decode_map(buf, {"n": "Int", "s": "String", "l": ["Float"], "d": {"x": "Int"}}) == {
        "n": -3,
        "s": "",
        "l": [],
        "d": {"x": 0},
    }


def test_text_format_parser():
    tree = parse_text('a: 1\nb { c: "x\\344\\275\\240" d: enumval }\n# comment\ne: \'q\\"\'')
    assert tree == [("a", "1"), ("b", [("c", "x你".encode()), ("d", "enumval")]), ("e", b'q"')]
    assert unescape(r'"\n\t\x41\\"') == b"\n\tA\\"
    with pytest.raises(WireError, match="missing '}'"):
        parse_text("a { b: 1")


# --- damaged originals -----------------------------------------------------------------


def copy_fixture(tmp_path, name):
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def test_truncated_data_is_refused(tmp_path, capsys):
    src = copy_fixture(tmp_path, "detection")
    data = src / "root.data"
    data.write_bytes(data.read_bytes()[:-10])
    dest = tmp_path / "out"
    code, _, err = run(["legacy", src, dest], capsys)
    assert code == 2
    assert "root.data" in err and "truncated or damaged" in err
    assert not dest.exists()


def test_corrupt_record_names_the_record(tmp_path, capsys):
    src = copy_fixture(tmp_path, "detection")
    data = bytearray((src / "root.data").read_bytes())
    offsets = read_index(src / "root.index")
    data[offsets[1] : offsets[1] + 3] = b"\x0a\xff\x7f"  # record 1: a field longer than the record
    (src / "root.data").write_bytes(bytes(data))
    code, _, err = run(["legacy", src, tmp_path / "out"], capsys)
    assert code == 2
    assert "record 1" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unclosed_original_writer(tmp_path, capsys):
    src = copy_fixture(tmp_path, "detection")
    (src / "root.index").write_bytes(b"")  # the original writes the index only at close()
    code, _, err = run(["legacy", src, tmp_path / "out"], capsys)
    assert code == 2
    assert "never closed" in err


def test_large_file_reference_cannot_escape(tmp_path, capsys):
    src = copy_fixture(tmp_path, "alltypes")
    data = (src / "root.data").read_bytes()
    old = next(p for p in (src / "files").iterdir()).name
    evil = "../" + old[3:]  # same length: the message sizes stay valid
    (src / "root.data").write_bytes(data.replace(f"files/{old}".encode(), f"files/{evil}".encode()))
    code, _, err = run(["legacy", src, tmp_path / "out"], capsys)
    assert code == 2
    assert "'..' in path refused" in err
    assert not (tmp_path / "out").exists()


def test_not_a_legacy_folder(tmp_path, capsys):
    code, _, err = run(["legacy", tmp_path, tmp_path / "out"], capsys)
    assert code == 2
    assert "no <part>.meta files" in err


def test_meta_garbage(tmp_path, capsys):
    src = copy_fixture(tmp_path, "detection")
    (src / "root.meta").write_text("record_type { basicType: map ")
    code, _, err = run(["legacy", src, tmp_path / "out"], capsys)
    assert code == 2
    assert "root.meta" in err


def test_double_field_is_little_endian():
    feature = b"\x21" + struct.pack("<d", -2.5)
    entry = b"\x0a\x01f" + b"\x12" + varint(len(feature)) + feature
    assert decode_map(b"\x0a" + varint(len(entry)) + entry, {"f": "Float"}) == {"f": -2.5}


def test_migrated_files_keep_their_small_or_large_form(tmp_path, capsys):
    dest = tmp_path / "migrated"
    assert run(["legacy", FIXTURES / "alltypes", dest], capsys)[0] == 0
    with ReadOnlyDataset(str(dest), "root") as reader:
        small, large = reader[0]["file"], reader[1]["file"]
        assert small["type"] == 0 and small["file_path"] == ""
        # 3 KB is far under the 50 MB threshold, yet the original stored it as a large file.
        assert large["type"] == 1 and large["size"] == 3072 and len(large["content"]) == 512
        assert large["file_path"].startswith("root.kpl/files/")
        assert len(reader.read_file(large)) == 3072


@pytest.mark.parametrize("data_name", [None, "train", "测试", "absent"])
def test_opening_an_original_folder_says_to_run_legacy(data_name):
    with pytest.raises(FileNotFoundError, match="convert it with `kpl-dataset legacy`"):
        ReadOnlyDataset(str(FIXTURES / "classification"), data_name)


def test_metadb_reads_the_original_prop_file_until_the_part_has_its_own(tmp_path):
    src = copy_fixture(tmp_path, "classification")
    want = EXPECTED["classification"]["train"]["properties"]
    db = MetaDB(str(src / "train.prop"))
    assert {k: db.get(k) for k in db.keys()} == want  # noqa: SIM118 - MetaDB is no dict
    db.put("added", 1)
    assert MetaDB(str(src / "train.prop")).get("added") == 1
    assert set(MetaDB(str(src / "train.prop")).keys()) == {*want, "added"}
