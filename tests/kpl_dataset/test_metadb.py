"""MetaDB keeps the original's put/update/delete/get/keys/has/merge_from semantics."""

from __future__ import annotations

import json

import pytest

from kpl_dataset import BasicType, KPLDatasetError, MetaDB, ReadOnlyDataset, WriteOnlyDataset


def test_metadb_semantics(tmp_path):
    writer = WriteOnlyDataset(tmp_path, None, {"a": BasicType.Int})
    db = writer.get_meta_db()
    assert db.keys() == () and db.get("x") is None and not db.has("x")
    db.put("classes", ["猫", "狗"])
    db.put("info", {"n": 2, "score": 0.5, "nested": [{"k": "v"}]})
    with pytest.raises(KPLDatasetError, match="key `classes` already exist"):
        db.put("classes", [])
    with pytest.raises(KPLDatasetError, match="key `nope` not exist"):
        db.update("nope", 1)
    db.update("info", 3)
    db.delete("nope")
    writer.close()
    reader = ReadOnlyDataset(tmp_path, None)
    other = reader.get_meta_db()
    assert isinstance(other, MetaDB)
    assert other.keys() == ("classes", "info")
    assert other.get("classes") == ["猫", "狗"] and other.get("info") == 3
    assert str(other) == ">>> classes = ['猫', '狗']\n>>> info = 3\n"
    other.delete("info")
    assert not db.has("info")
    stored = json.loads((tmp_path / "root.meta.json").read_text(encoding="utf-8"))
    assert stored == {"classes": ["猫", "狗"]}


def test_merge_from_overwrites_and_adds(tmp_path):
    for name in ("a", "b"):
        WriteOnlyDataset(tmp_path, name, {"x": BasicType.Int}).close()
    a = ReadOnlyDataset(tmp_path, "a").get_meta_db()
    b = ReadOnlyDataset(tmp_path, "b").get_meta_db()
    a.put("k", 1)
    a.put("only_a", "x")
    b.put("k", 2)
    b.put("only_b", 1.5)
    a.merge_from(b)
    assert a.keys() == ("k", "only_a", "only_b")
    assert [a.get("k"), a.get("only_a"), a.get("only_b")] == [2, "x", 1.5]
    with pytest.raises(KPLDatasetError, match="should be MetaDB"):
        a.merge_from({"k": 1})


@pytest.mark.parametrize(
    "key,value,message,builtin",
    [
        (1, 1, "key must be a string", AssertionError),
        ("k", None, "NoneType", TypeError),
        ("k", {1: 2}, "dict key", AssertionError),
    ],
)
def test_bad_keys_and_values(tmp_path, key, value, message, builtin):
    WriteOnlyDataset(tmp_path, None, {"x": BasicType.Int}).close()
    db = ReadOnlyDataset(tmp_path, None).get_meta_db()
    with pytest.raises(KPLDatasetError, match=message) as info:
        db.put(key, value)
    assert isinstance(info.value, builtin)  # what the original raised (assert for keys)
    assert db.keys() == ()


def test_damaged_metadb_file(tmp_path):
    WriteOnlyDataset(tmp_path, None, {"x": BasicType.Int}).close()
    (tmp_path / "root.meta.json").write_text("[1]")
    with pytest.raises(KPLDatasetError, match=r"root\.meta\.json: must hold a JSON object"):
        ReadOnlyDataset(tmp_path, None).get_meta_db().keys()


def test_metadb_opened_by_the_original_prop_path(tmp_path):
    with WriteOnlyDataset(tmp_path, "train", {"a": BasicType.Int}) as writer:
        writer.get_meta_db().put("classes", ["a", "b"])
    db = MetaDB(str(tmp_path / "train.prop"))
    assert db.get("classes") == ["a", "b"]
    db.put("n", 2)
    assert ReadOnlyDataset(tmp_path, "train").get_meta_db().get("n") == 2
    standalone = MetaDB(str(tmp_path / "props.prop"))  # the original's MetaDB also worked on its own
    standalone.put("k", {"v": 1.5})
    assert MetaDB(str(tmp_path / "props.prop")).get("k") == {"v": 1.5}


def test_original_module_names_import():
    from kpl_dataset.dataset import DEFAULT_DATA_NAME, MetaDB, ReadOnlyDataset, WriteOnlyDataset
    from kpl_dataset.record import BasicType, FileType, set_size_threshold

    assert DEFAULT_DATA_NAME == "root" and BasicType.File == "File" and FileType.Large == 1
    assert callable(set_size_threshold) and MetaDB and ReadOnlyDataset and WriteOnlyDataset
