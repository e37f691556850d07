"""Algorithm versions in the catalog: validation, archives, content versions, deletion."""

from __future__ import annotations

import tarfile

import pytest
from sqlalchemy import select

from kpl_lab.catalog.jobs import Job
from kpl_lab.catalog.models import Project
from kpl_lab.errors import BadRequest, Conflict, NotFound

pytestmark = pytest.mark.databases

ENVIRONMENT = """\
version: 1
image:
  runs: []
train:
  resource:
    limits:
      cpu: 1
      memory: 256
  inputs:
    - key: data
      name: data
  outputs:
    - key: model
      name: model
  cmd: python train.py
infer:
  cmd: python infer.py
"""


@pytest.fixture
def algo_dir(tmp_path):
    folder = tmp_path / "classify"
    folder.mkdir()
    (folder / "environment.yml").write_text(ENVIRONMENT)
    (folder / "parameter.yml").write_text("epochs: 2\nlr: 0.1\n")
    (folder / "train.py").write_text("print('train')\n")
    return folder


def test_add_algorithm_from_folder(platform, algo_dir):
    row = platform.catalog.add_algorithm("p", algo_dir, description="digits")
    assert row.algorithm.name == "classify"
    assert row.functions == ["train", "infer"]
    assert row.parameters == {"epochs": 2, "lr": 0.1}
    path = platform.catalog.path(row)
    assert path == platform.storage.algorithm_dir("p", "classify", row.version)
    assert (path / "train.py").read_text() == "print('train')\n"
    algorithm = platform.catalog.read_algorithm(row)
    assert algorithm.spec.functions["train"].cmd == "python train.py"
    assert platform.catalog.get_algorithm("p", "classify").id == row.id


def test_same_content_same_version(platform, algo_dir, tmp_path):
    first = platform.catalog.add_algorithm("p", algo_dir)
    archive = tmp_path / "classify.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(algo_dir, arcname="classify")
    again = platform.catalog.add_algorithm("p", archive)
    assert (again.id, again.version) == (first.id, first.version)
    (algo_dir / "train.py").write_text("print('v2')\n")
    second = platform.catalog.add_algorithm("p", algo_dir, name="classify")
    assert second.version != first.version
    [algorithm] = platform.catalog.list_algorithms("p")
    assert [v.version for v in algorithm.versions] == [first.version, second.version]


def test_algorithm_version_reads_only_the_version_a_job_runs(platform, algo_dir):
    first = platform.catalog.add_algorithm("p", algo_dir)
    (algo_dir / "train.py").write_text("print('v2')\n")
    second = platform.catalog.add_algorithm("p", algo_dir, name="classify")
    catalog = platform.catalog
    assert catalog.algorithm_version("p", "classify").id == second.id
    assert catalog.algorithm_version("p", first.ref).id == first.id
    pinned = catalog.algorithm_version("p", f"classify:{first.version[:6]}")  # a hash prefix
    assert (pinned.id, pinned.ref, pinned.parameters) == (first.id, first.ref, {"epochs": 2, "lr": 0.1})
    assert catalog.algorithm_version("p", "classify").algorithm.name == "classify"
    # one row of columns made into objects: the same values as the ORM's, JSON columns decoded
    latest, loaded = catalog.algorithm_version("p", first.ref), catalog.get_algorithm("p", first.ref)
    for column in ("id", "version", "path", "functions", "parameters", "lineage", "created", "algorithm_id"):
        assert getattr(latest, column) == getattr(loaded, column), column
    assert (latest.algorithm.id, latest.algorithm.project_id) == (
        loaded.algorithm.id,
        loaded.algorithm.project_id,
    )
    for project, ref, message in (
        ("p", "nope", "algorithm 'nope' not found in project 'p'"),
        ("q", "classify", "not found in project 'q'"),
        ("p", "classify:0000", "classify:0000 not found"),
    ):
        with pytest.raises(NotFound, match=message):
            catalog.algorithm_version(project, ref)
        with pytest.raises(NotFound, match=message):
            catalog.get_algorithm(project, ref)


def test_invalid_algorithm_is_refused_with_file_and_line(platform, algo_dir):
    (algo_dir / "environment.yml").write_text(ENVIRONMENT.replace("memory: 256", "memory: 10G"))
    with pytest.raises(BadRequest, match=r"memory.*environment\.yml:8"):
        platform.catalog.add_algorithm("p", algo_dir)
    assert platform.catalog.list_algorithms("p") == []
    root = platform.storage.kind_dir("p", "algorithms")
    assert not any(p for p in root.rglob("*") if p.is_file())


def test_custom_name_and_isolation(platform, algo_dir):
    row = platform.catalog.add_algorithm("p", algo_dir, name="mine")
    assert row.ref == f"mine:{row.version}"
    with pytest.raises(NotFound):
        platform.catalog.get_algorithm("q", "mine")
    with pytest.raises(BadRequest):
        platform.catalog.add_algorithm("p", algo_dir, name="../up")


def test_database_failure_removes_the_copied_version(platform, algo_dir, monkeypatch):
    def broken(_session, _name):
        raise RuntimeError("database went away")

    monkeypatch.setattr(platform.catalog, "ensure_project", broken)
    with pytest.raises(RuntimeError):
        platform.catalog.add_algorithm("p", algo_dir)
    root = platform.storage.kind_dir("p", "algorithms") / "classify"
    assert not root.exists() or not any(root.iterdir())


def test_delete_algorithm_used_by_running_job_conflicts(platform, algo_dir):
    row = platform.catalog.add_algorithm("p", algo_dir)
    with platform.session() as session:
        proj = session.scalar(select(Project).where(Project.name == "p"))
        session.add(
            Job(id="j1", project_id=proj.id, function="train", state="running", algorithm_version_id=row.id)
        )
    with pytest.raises(Conflict, match="running job j1"):
        platform.catalog.delete_algorithm("p", "classify")
    with platform.session() as session:
        session.get(Job, "j1").state = "failed"
    assert platform.catalog.delete_algorithm("p", "classify") == [row.ref]
    assert not platform.catalog.path(row).exists()
    with platform.session() as session:
        job = session.get(Job, "j1")
        assert job.algorithm_version_id is None  # history kept, link cleared
