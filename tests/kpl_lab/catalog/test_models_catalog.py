"""Model versions in the catalog: content versions, refs, isolation, atomic copies, deletion."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import func, select

from kpl_lab.catalog.jobs import Job
from kpl_lab.catalog.models import ModelVersion, Project
from kpl_lab.errors import BadRequest, Conflict, NotFound

pytestmark = pytest.mark.databases


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "src-model"
    (folder / "sub").mkdir(parents=True)
    (folder / "weights.bin").write_bytes(b"\x00\x01" * 1000)
    (folder / "sub" / "config.json").write_text('{"depth": 18}')
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.pyc").write_bytes(b"ignored")
    return folder


def staging_is_empty(platform, project="p"):
    staging = platform.storage.project_dir(project) / ".staging"
    return not staging.exists() or not any(staging.iterdir())


def test_add_model_copies_files_and_records_metadata(platform, model_dir):
    row = platform.catalog.add_model("p", "resnet", model_dir, description="first", lineage={"job_id": "j1"})
    path = platform.catalog.path(row)
    assert path == platform.storage.model_dir("p", "resnet", row.version)
    assert sorted(row.files) == ["sub/config.json", "weights.bin"]
    assert (path / "weights.bin").read_bytes() == b"\x00\x01" * 1000
    assert not (path / "__pycache__").exists()
    assert row.size_bytes == 2000 + len('{"depth": 18}')
    assert row.lineage == {"job_id": "j1"}
    assert row.ref == f"resnet:{row.version}"
    assert os.stat(path / "weights.bin").st_mode & 0o222 == 0
    assert staging_is_empty(platform)


def test_same_content_same_version_new_content_new_version(platform, model_dir):
    first = platform.catalog.add_model("p", "m", model_dir)
    again = platform.catalog.add_model("p", "m", model_dir)
    assert again.id == first.id and again.version == first.version
    (model_dir / "weights.bin").write_bytes(b"changed")
    second = platform.catalog.add_model("p", "m", model_dir)
    assert second.version != first.version
    assert platform.catalog.get_model("p", "m").version == second.version  # latest
    assert platform.catalog.get_model("p", f"m:{first.version}").id == first.id
    assert platform.catalog.get_model("p", f"m:{first.version[:6]}").id == first.id  # unique prefix
    [model] = platform.catalog.list_models("p")
    assert [v.version for v in model.versions] == [first.version, second.version]


def test_single_file_model(platform, tmp_path):
    file = tmp_path / "model.onnx"
    file.write_bytes(b"onnx")
    row = platform.catalog.add_model("p", "onnx", file)
    assert row.files == ["model.onnx"]
    assert (platform.catalog.path(row) / "model.onnx").read_bytes() == b"onnx"


def test_another_projects_model_is_not_found(platform, model_dir):
    row = platform.catalog.add_model("alpha", "m", model_dir)
    with pytest.raises(NotFound):
        platform.catalog.get_model("beta", "m")
    with pytest.raises(NotFound):
        platform.catalog.get_model("beta", f"m:{row.version}")
    platform.catalog.add_model("beta", "other", model_dir)
    with pytest.raises(NotFound):
        platform.catalog.get_model("beta", "m")
    with pytest.raises(NotFound):
        platform.catalog.delete_model("beta", "m")
    assert platform.catalog.list_models("gamma") == []
    assert [m.name for m in platform.catalog.list_models("beta")] == ["other"]


@pytest.mark.parametrize("ref", ["", "../x", "a/b", "m:../..", ":v", "a b"])
def test_bad_refs_are_bad_requests(platform, ref):
    with pytest.raises(BadRequest):
        platform.catalog.get_model("p", ref)


@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "", "x" * 101, "a:b"])
def test_bad_names_are_refused_before_copying(platform, model_dir, name):
    with pytest.raises(BadRequest) as info:
        platform.catalog.add_model("p", name, model_dir)
    assert info.value.field == "name"
    assert not platform.storage.root.joinpath("projects").exists() or staging_is_empty(platform)


def test_names_are_the_documents_pattern_in_every_script(platform, model_dir):
    """ASCII letters, digits, _ - . as docs/openapi.yaml says to every JSON Schema reader (\\w is ASCII there)."""
    with pytest.raises(BadRequest, match="模型-v1") as refused:
        platform.catalog.add_model("p", "模型-v1", model_dir)
    assert refused.value.field == "name"
    assert platform.catalog.list_models("p") == []
    row = platform.catalog.add_model("p", "model-v1.2_a", model_dir)
    assert platform.catalog.get_model("p", "model-v1.2_a").id == row.id


def test_symlink_in_upload_registers_nothing(platform, model_dir):
    (model_dir / "zz-link").symlink_to("/etc/passwd")
    with pytest.raises(BadRequest, match="zz-link: symbolic links"):
        platform.catalog.add_model("p", "m", model_dir)
    assert staging_is_empty(platform)
    assert not (platform.storage.kind_dir("p", "models") / "m").exists()
    assert platform.catalog.list_models("p") == []


def test_failure_after_publish_leaves_nothing(platform, model_dir, monkeypatch):
    def broken(_path):
        raise RuntimeError("database went away")

    monkeypatch.setattr(platform.storage, "relative", broken)
    with pytest.raises(RuntimeError):
        platform.catalog.add_model("p", "m", model_dir)
    monkeypatch.undo()
    models_dir = platform.storage.kind_dir("p", "models") / "m"
    assert not models_dir.exists() or not any(models_dir.iterdir())
    assert staging_is_empty(platform)
    with platform.session() as session:
        assert session.scalar(select(func.count(ModelVersion.id))) == 0


def test_delete_version_and_whole_model(platform, model_dir):
    first = platform.catalog.add_model("p", "m", model_dir)
    (model_dir / "weights.bin").write_bytes(b"v2")
    second = platform.catalog.add_model("p", "m", model_dir)
    assert platform.catalog.delete_model("p", f"m:{first.version}") == [first.ref]
    assert not platform.catalog.path(first).exists()
    assert platform.catalog.get_model("p", "m").id == second.id
    assert platform.catalog.delete_model("p", "m") == [second.ref]
    assert not platform.catalog.path(second).exists()
    assert platform.catalog.list_models("p") == []
    with pytest.raises(NotFound):
        platform.catalog.get_model("p", "m")


def _job(platform, project, state, inputs, algorithm_version_id=None, job_id="job1"):
    with platform.session() as session:
        proj = session.scalar(select(Project).where(Project.name == project))
        session.add(
            Job(
                id=job_id,
                project_id=proj.id,
                function="train",
                state=state,
                inputs=inputs,
                algorithm_version_id=algorithm_version_id,
            )
        )


@pytest.mark.parametrize("state", ["queued", "running"])
def test_delete_of_a_model_used_by_an_active_job_conflicts(platform, model_dir, state):
    row = platform.catalog.add_model("p", "m", model_dir)
    _job(platform, "p", state, {"checkpoint": {"ref": "m", "kind": "model", "version_id": row.id}})
    with pytest.raises(Conflict, match=f"used by {state} job job1"):
        platform.catalog.delete_model("p", "m")
    with pytest.raises(Conflict):
        platform.catalog.delete_model("p", row.ref)
    assert platform.catalog.path(row).is_dir()


def test_delete_after_the_job_ended_is_allowed(platform, model_dir):
    row = platform.catalog.add_model("p", "m", model_dir)
    _job(platform, "p", "succeeded", {"checkpoint": {"ref": "m", "kind": "model", "version_id": row.id}})
    assert platform.catalog.delete_model("p", "m") == [row.ref]


def test_concurrent_adds_of_the_same_content_give_one_version(platform, model_dir):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(lambda _: platform.catalog.add_model("p", "m", model_dir), range(4)))
    assert len({row.id for row in rows}) == 1
    [model] = platform.catalog.list_models("p")
    assert len(model.versions) == 1
    assert platform.catalog.path(rows[0]).is_dir()
    assert staging_is_empty(platform)
