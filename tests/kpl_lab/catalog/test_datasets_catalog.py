"""Dataset versions in the catalog, and resolving job inputs to dataset or model versions."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from kpl_dataset import BasicType, MetaDB, ReadOnlyDataset, WriteOnlyDataset
from kpl_dataset.fs import resolve
from kpl_lab.catalog.jobs import Job
from kpl_lab.catalog.models import Project
from kpl_lab.errors import BadRequest, Conflict, NotFound

pytestmark = pytest.mark.databases

RECORD = {"path": BasicType.String, "class_id": BasicType.Int}


def write_dataset(folder, parts):
    folder.mkdir(parents=True, exist_ok=True)
    for part, count in parts.items():
        writer = WriteOnlyDataset(str(folder), part, RECORD)
        for i in range(count):
            writer.write({"path": f"{part}/{i}.png", "class_id": i % 3})
        writer.close()
    return folder


@pytest.fixture
def digits(tmp_path):
    return write_dataset(tmp_path / "digits", {"train": 7, "test": 3})


def test_add_dataset_counts_records_per_part(platform, digits):
    row = platform.catalog.add_dataset("p", "digits", digits, description="8x8", lineage={"job_id": "j"})
    assert row.record_count == 10
    assert row.parts == {"test": 3, "train": 7}
    assert row.size_bytes > 0 and row.lineage == {"job_id": "j"}
    path = platform.catalog.path(row)
    assert path == platform.storage.dataset_dir("p", "digits", row.version)
    assert not [p.name for p in path.iterdir() if p.name.startswith(".")]  # no writer lock files
    with ReadOnlyDataset(str(path), "train") as reader:
        assert reader[6] == {"path": "train/6.png", "class_id": 0}
    again = platform.catalog.add_dataset("p", "digits", digits)
    assert again.id == row.id
    assert platform.catalog.get_dataset("p", "digits").version == row.version


def test_viewers_open_the_first_part_in_reading_order(platform, digits):
    from kpl_lab.catalog import serialize
    from kpl_lab.catalog.datasets import open_view, part_order

    assert part_order(["test", "zeta", "val", "train", "alpha"]) == ["train", "val", "test", "alpha", "zeta"]
    assert part_order(["Test", "root", "Train"]) == ["root", "Train", "Test"]
    row = platform.catalog.add_dataset("p", "digits", digits)
    _, view = open_view(platform.catalog, "p", "digits", row.version)
    assert view.parts() == ["train", "test"]
    page = view.page(None, 0, 2, None, lambda part, index, path: "")  # what DatasetPreview asks for
    assert page["part"] == "train" and page["total"] == 7
    assert list(serialize.version_model("dataset", row).parts) == ["train", "test"]


def test_new_content_is_a_new_version(platform, digits):
    first = platform.catalog.add_dataset("p", "d", digits)
    write_dataset(digits, {"extra": 2})
    second = platform.catalog.add_dataset("p", "d", digits)
    assert second.version != first.version and second.record_count == 12
    assert platform.catalog.get_dataset("p", f"d:{first.version}").record_count == 10
    [dataset] = platform.catalog.list_datasets("p")
    assert [v.record_count for v in dataset.versions] == [10, 12]


def test_a_written_folder_is_linked_and_versioned_by_its_content_alone(platform, tmp_path):
    first = platform.catalog.link_dataset("p", "w", write_dataset(tmp_path / "a", {"train": 7, "test": 3}))
    # the same records written again elsewhere, later: other shard names and manifest times
    again = platform.catalog.link_dataset("p", "w", write_dataset(tmp_path / "b", {"train": 7, "test": 3}))
    assert again.version == first.version and first.parts == {"test": 3, "train": 7}
    assert first.record_count == 10 and first.size_bytes > 0
    more = platform.catalog.link_dataset("p", "w", write_dataset(tmp_path / "c", {"train": 8, "test": 3}))
    described = write_dataset(tmp_path / "d", {"train": 7, "test": 3})
    MetaDB(resolve(described), "train").put("source", "camera 2")  # a property is content too
    noted = platform.catalog.link_dataset("p", "w", described)
    assert len({first.version, more.version, noted.version}) == 3
    [dataset] = platform.catalog.list_datasets("p")
    assert len(dataset.versions) == 3
    assert ReadOnlyDataset(str(platform.catalog.path(first)), "train").to_arrow().num_rows == 7


def test_a_folder_that_is_not_a_dataset_is_refused(platform, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"jpeg")
    with pytest.raises(BadRequest, match="photos: not a kpl-dataset folder"):
        platform.catalog.add_dataset("p", "photos", folder)
    assert platform.catalog.list_datasets("p") == []
    assert not (platform.storage.kind_dir("p", "datasets") / "photos").exists()


def test_a_damaged_dataset_is_refused(platform, digits):
    (digits / "train.manifest.json").write_text("{not json")
    with pytest.raises(BadRequest, match="digits"):
        platform.catalog.add_dataset("p", "d", digits)
    assert platform.catalog.list_datasets("p") == []
    staging = platform.storage.project_dir("p") / ".staging"
    assert not any(staging.iterdir())


def test_resolve_input(platform, digits, tmp_path):
    data = platform.catalog.add_dataset("p", "digits", digits)
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"w")
    model = platform.catalog.add_model("p", "net", weights)
    kind, row, path = platform.catalog.resolve_input("p", "digits")
    assert (kind, row.id, path) == ("dataset", data.id, platform.catalog.path(data))
    assert platform.catalog.resolve_input("p", f"dataset:digits:{data.version}")[1].id == data.id
    assert platform.catalog.resolve_input("p", "model:net")[:2][0] == "model"
    assert platform.catalog.resolve_input("p", f"net:{model.version}")[1].id == model.id
    with pytest.raises(NotFound):
        platform.catalog.resolve_input("p", "model:digits")
    with pytest.raises(NotFound):
        platform.catalog.resolve_input("other", "digits")
    platform.catalog.add_model("p", "digits", weights)
    with pytest.raises(BadRequest, match="write dataset:digits or model:digits"):
        platform.catalog.resolve_input("p", "digits")
    assert platform.catalog.resolve_input("p", "model:digits")[0] == "model"


def test_dataset_in_use_cannot_be_deleted(platform, digits):
    row = platform.catalog.add_dataset("p", "digits", digits)
    with platform.session() as session:
        proj = session.scalar(select(Project).where(Project.name == "p"))
        inputs = {"data": {"ref": "digits", "kind": "dataset", "version_id": row.id}}
        session.add(Job(id="j1", project_id=proj.id, function="train", state="queued", inputs=inputs))
    with pytest.raises(Conflict, match="queued job j1"):
        platform.catalog.delete_dataset("p", row.ref)
    assert platform.catalog.get_dataset("p", "digits").id == row.id
    with platform.session() as session:
        session.get(Job, "j1").state = "stopped"
    assert platform.catalog.delete_dataset("p", row.ref) == [row.ref]
    assert not platform.catalog.path(row).exists()
    assert platform.catalog.list_datasets("p") == []


def test_cli_dataset_commands(platform, digits, capsys):
    from kpl_lab.cli import main

    assert main(["--home", platform.home, "dataset", "add", "digits", str(digits)]) == 0
    assert main(["--home", platform.home, "dataset", "list"]) == 0
    assert main(["--home", platform.home, "dataset", "show", "digits"]) == 0
    out = capsys.readouterr().out
    assert "added dataset digits:" in out
    assert "records:     10" in out and "parts:       train (7), test (3)" in out
    listing = [line.split() for line in out.splitlines() if line.startswith("digits ")]
    assert listing and listing[0][:2] == ["digits", "1"] and listing[0][3] == "10"


def test_cli_delete_removes_the_versions_caches(platform, digits, capsys):
    from kpl_lab.catalog import datasets_view
    from kpl_lab.cli import main

    row = platform.catalog.add_dataset("p", "digits", digits)
    _, view = platform.catalog.open_dataset("p", "digits", row.version)
    assert view.stats("train")["records"] == 7
    assert view.page("train", 0, 1, None, lambda *a: "")["records"]
    assert any(view.cache_dir.iterdir())
    assert any(key[0] == str(platform.catalog.path(row)) for key in datasets_view._readers)
    where = ["--home", platform.home, "--database-url", platform.database_url]
    assert main([*where, "--project", "p", "dataset", "delete", "digits"]) == 0
    assert f"deleted dataset {row.ref}" in capsys.readouterr().out
    assert not view.cache_dir.exists()
    assert not any(key[0] == str(platform.catalog.path(row)) for key in datasets_view._readers)


def test_stats_count_each_class_by_score_band_for_the_viewers_minimum_score(platform, tmp_path):
    """Predictions with scores: per class, how many score in each 5 % band (what the viewer's slider keeps)."""
    box = {"name": BasicType.String, "score": BasicType.Float}
    folder = tmp_path / "predictions"
    writer = WriteOnlyDataset(str(folder), "test", {"path": BasicType.String, "object": [box]})
    scored = [[("cat", 0.9), ("dog", 0.1), ("cat", 0.25)], [("cat", 1.0), ("dog", 0.35)], []]
    for i, objects in enumerate(scored):
        writer.write({"path": f"{i}.png", "object": [{"name": n, "score": s} for n, s in objects]})
    writer.close()
    row = platform.catalog.add_dataset("p", "predictions", folder)
    _, view = platform.catalog.open_dataset("p", "predictions", row.version)
    stats = view.stats("test")
    assert stats["classes"] == {"cat": 3, "dog": 2}
    bands = stats["class_scores"]
    assert sorted(bands) == ["cat", "dog"] and all(len(counts) == 21 for counts in bands.values())
    # as the viewer counts at a minimum: the class's count less its bands below
    at = {
        m: {n: stats["classes"][n] - sum(c[: round(m * 20)]) for n, c in bands.items()}
        for m in (0, 0.25, 0.35, 0.4, 0.95, 1)
    }
    assert at == {
        0: {"cat": 3, "dog": 2},
        0.25: {"cat": 3, "dog": 1},
        0.35: {"cat": 2, "dog": 1},
        0.4: {"cat": 2, "dog": 0},
        0.95: {"cat": 1, "dog": 0},
        1: {"cat": 1, "dog": 0},  # a score of 1 shows at 100 %
    }
    labels = write_dataset(tmp_path / "labels", {"train": 2})  # no score: no bands
    plain = platform.catalog.add_dataset("p", "labels", labels)
    assert platform.catalog.open_dataset("p", "labels", plain.version)[1].stats("train")["class_scores"] == {}
