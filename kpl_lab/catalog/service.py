"""The catalog: versioned datasets, models and algorithms of each project.

Every query names its project; another project's object is simply not found.
Files are copied into storage first (staging folder + one rename), the database
row is written last, so a failure leaves nothing registered and nothing half-copied.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from ..errors import BadRequest, Conflict, NotFound
from . import datasets
from .jobs import Job
from .models import (
    Algorithm,
    AlgorithmVersion,
    Dataset,
    DatasetVersion,
    Model,
    ModelAlias,
    ModelVersion,
    Project,
)
from .pipelines import PipelineRun  # noqa: F401  (registers the pipeline run tables with the others)
from .storage import CopyResult, Storage, check_name, copy_hashed

if TYPE_CHECKING:
    from ..platform import Platform
    from .datasets_view import DatasetView

ACTIVE_STATES = ("queued", "running")
STRUCTURE_SECONDS = 60.0  # reading a model file's structure statically takes well under a second
UNPACK_SECONDS = 3600.0  # unpacking or importing the largest upload (16 GiB) in a sandboxed worker
INPUT_KINDS = ("dataset", "model")


@dataclass(frozen=True)
class _Kind:
    """How one kind of catalog object is stored."""

    word: str  # the user's word: dataset, model, algorithm
    named: type
    version: type
    parent: str  # attribute of the version pointing at the named object
    folder: str  # storage folder: datasets, models, algorithms


DATASET = _Kind("dataset", Dataset, DatasetVersion, "dataset", "datasets")
MODEL = _Kind("model", Model, ModelVersion, "model", "models")
ALGORITHM = _Kind("algorithm", Algorithm, AlgorithmVersion, "algorithm", "algorithms")
KINDS = {k.word: k for k in (DATASET, MODEL, ALGORITHM)}


@functools.cache
def _pinned_query(kind: _Kind, latest: bool):
    """Return `_pinned`'s query of a kind: a version's and its named object's columns, by name (and version)."""
    versions, named = kind.version.__table__, kind.named.__table__
    query = (
        select(*versions.c, *(column.label(f"named_{column.key}") for column in named.c))
        .join(named, versions.c[f"{kind.parent}_id"] == named.c.id)
        .join(Project, named.c.project_id == Project.id)
        .where(Project.name == bindparam("project"), named.c.name == bindparam("name"))
    )
    if latest:
        return query.order_by(versions.c.id.desc()).limit(1)
    return query.where(versions.c.version == bindparam("version"))


def parse_ref(ref: str, what: str = "ref") -> tuple[str, str | None]:
    """Split `NAME` or `NAME:VERSION` into (name, version or None)."""
    if not isinstance(ref, str) or not ref:
        raise BadRequest(f"{what}: expected NAME or NAME:VERSION, got {ref!r}", field=what)
    name, _, version = ref.partition(":")
    check_name(name, what)
    if version:
        check_name(version, what)
    return name, version or None


class Catalog:
    """Add, find, list and delete versions of datasets, models and algorithms."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    @property
    def storage(self) -> Storage:
        """Return the platform's storage root."""
        return self.platform.storage

    def path(self, version_row) -> Path:
        """Return the folder of a version in storage."""
        return self.storage.absolute(version_row.path)

    # projects

    def ensure_project(self, session: Session, name: str) -> Project:
        """Return the project, creating it on first use."""
        project = session.scalar(select(Project).where(Project.name == check_name(name, "project")))
        if project is None:
            project = Project(name=name)
            session.add(project)
            session.flush()
        return project

    def list_projects(self) -> list[Project]:
        """Return every project by name."""
        with self.platform.session() as session:
            return list(session.scalars(select(Project).order_by(Project.name)))

    def _project(self, session: Session, name: str, what: str, ref: str) -> Project:
        project = session.scalar(select(Project).where(Project.name == check_name(name, "project")))
        if project is None:
            raise NotFound(f"{what} {ref!r} not found in project {name!r}")
        return project

    # generic queries shared by the three kinds

    def _named(self, session: Session, kind: _Kind, project: str, name: str) -> Dataset | Model | Algorithm:
        proj = self._project(session, project, kind.word, name)
        row = session.scalar(
            select(kind.named).where(kind.named.project_id == proj.id, kind.named.name == name)
        )
        if row is None:
            raise NotFound(f"{kind.word} {name!r} not found in project {project!r}")
        return row

    def _get(self, kind: _Kind, project: str, ref: str, session: Session | None = None):
        if session is None:
            with self.platform.session() as session:
                return self._get(kind, project, ref, session)
        if kind is MODEL and "@" in ref:
            return self._get_alias(project, ref, session)
        name, version = parse_ref(ref)
        named = self._named(session, kind, project, name)
        if not named.versions:
            raise NotFound(f"{kind.word} {name!r} has no versions")
        if version is None:
            return named.versions[-1]
        matches = [v for v in named.versions if v.version == version]
        if not matches:  # a unique prefix of the content hash also pins a version
            matches = [v for v in named.versions if v.version.startswith(version)]
        if len(matches) != 1:
            known = ", ".join(v.version for v in named.versions)
            problem = "is ambiguous" if matches else "not found"
            raise NotFound(f"{kind.word} version {name}:{version} {problem} (versions: {known})")
        return matches[0]

    def _pinned(self, kind: _Kind, project: str, ref: str, session: Session | None = None):
        """Return a version as `_get` does, in one query that reads no other version of the name.

        For the job's start (submit, launch): one row of plain columns, made into a version
        and its named object that belong to no session (the ORM's loading of the same two
        objects, and building its query, cost twice as much). A model alias (`NAME@ALIAS`), a
        version given by a hash prefix, or one not found, takes `_get`'s way, which says
        what is missing.
        """
        if kind is MODEL and "@" in ref:
            return self._get(kind, project, ref, session)
        if session is None:
            with self.platform.session() as session:
                return self._pinned(kind, project, ref, session)
        name, version = parse_ref(ref)
        values = {"project": check_name(project, "project"), "name": name, "version": version}
        row = session.execute(_pinned_query(kind, version is None), values).first()
        if row is None:
            return self._get(kind, project, ref, session)
        columns = row._mapping
        named = kind.named(
            **{column.key: columns[f"named_{column.key}"] for column in kind.named.__table__.c}
        )
        return kind.version(
            **{column.key: columns[column.key] for column in kind.version.__table__.c}, **{kind.parent: named}
        )

    def _list(self, kind: _Kind, project: str) -> list:
        with self.platform.session() as session:
            proj = session.scalar(select(Project).where(Project.name == check_name(project, "project")))
            if proj is None:
                return []
            query = select(kind.named).where(kind.named.project_id == proj.id).order_by(kind.named.name)
            return list(session.scalars(query))

    def _register(
        self,
        kind: _Kind,
        project: str,
        name: str,
        staged: Path,
        copy: CopyResult,
        description: str,
        fields: dict,
    ):
        """Publish a staged folder and write its version row; undo the publish if the row fails."""
        final = self.storage.kind_dir(project, kind.folder) / name / copy.version
        published = False
        try:
            with self.platform.session(immediate=True) as session:
                proj = self.ensure_project(session, project)
                named = session.scalar(
                    select(kind.named).where(kind.named.project_id == proj.id, kind.named.name == name)
                )
                if named is None:
                    named = kind.named(project_id=proj.id, name=name, description=description)
                    session.add(named)
                    session.flush()
                existing = next((v for v in named.versions if v.version == copy.version), None)
                if existing is not None and final.is_dir():
                    return existing  # same content: same version
                published = self.storage.publish(staged, final)
                if existing is not None:
                    return existing
                row = kind.version(
                    version=copy.version,
                    path=self.storage.relative(final),
                    description=description,
                    size_bytes=copy.size_bytes,
                    **{kind.parent: named},
                    **fields,
                )
                session.add(row)
                session.flush()
                return row
        except BaseException:
            if published:
                self.storage.remove(final)
            raise

    def _delete(self, kind: _Kind, project: str, ref: str) -> list[str]:
        """Delete one version (NAME:VERSION) or every version (NAME); return the refs deleted."""
        name, version = parse_ref(ref)
        with self.platform.session(immediate=True) as session:
            named = self._named(session, kind, project, name)
            doomed = [self._get(kind, project, ref, session)] if version else list(named.versions)
            self._refuse_if_in_use(session, kind, named.project_id, doomed)
            paths = [self.path(v) for v in doomed]
            refs = [v.ref for v in doomed]
            ids = {v.id for v in doomed}
            for alias in [a for a in getattr(named, "aliases", []) if a.model_version_id in ids]:
                named.aliases.remove(alias)  # an alias never outlives its version
            for row in doomed:
                named.versions.remove(row)
            if not named.versions:
                session.delete(named)
        for path in paths:
            self.storage.remove(path)
        with contextlib.suppress(OSError):  # the name's folder, once empty
            paths[0].parent.rmdir()
        return refs

    def _refuse_if_in_use(self, session: Session, kind: _Kind, project_id: int, versions: list) -> None:
        ids = {v.id for v in versions}
        if kind is MODEL:
            from .deployments import Deployment

            served = session.scalar(
                select(Deployment).where(
                    Deployment.project_id == project_id,
                    (Deployment.model_version_id.in_(ids)) | (Deployment.canary_model_version_id.in_(ids)),
                )
            )
            if served is not None:
                refs = ", ".join(v.ref for v in versions)
                raise Conflict(f"model {refs} is served by deployment {served.name!r}; delete it first")
        if kind is DATASET:
            from .annotation import AnnotationTask

            task = session.scalar(select(AnnotationTask).where(AnnotationTask.dataset_version_id.in_(ids)))
            if task is not None:
                raise Conflict(
                    f"dataset {task.dataset_version.ref}: annotation task {task.name!r} labels it; delete the task first"
                )
        active = session.scalars(
            select(Job).where(Job.project_id == project_id, Job.state.in_(ACTIVE_STATES))
        )
        for job in active:
            if kind is ALGORITHM:
                used = job.algorithm_version_id in ids
            else:
                used = any(
                    spec.get("kind") == kind.word and spec.get("version_id") in ids
                    for spec in (job.inputs or {}).values()
                    if isinstance(spec, dict)
                )
            if used:
                refs = ", ".join(v.ref for v in versions)
                raise Conflict(f"{kind.word} {refs} is used by {job.state} job {job.id}; stop it first")

    # datasets

    def add_dataset(
        self,
        project: str,
        name: str,
        src_dir: str | Path,
        description: str = "",
        lineage: dict | None = None,
        within: Path | None = None,
    ) -> DatasetVersion:
        """Copy a kpl-dataset folder into storage as a new version (same content: same version).

        `within`: a folder its user controls that holds it (a job's run folder): no link below it is followed.
        """
        check_name(name)
        src = Path(src_dir)
        if not src.is_dir():
            raise BadRequest(f"{src}: not a folder (a dataset is a kpl-dataset folder)", field="path")
        with self.storage.staging(project) as tmp:
            staged = tmp / "data"
            copy = copy_hashed(src, staged, skip=is_dataset_scratch, within=within)
            parts = count_records(staged, src)
            return self._register(
                DATASET,
                project,
                name,
                staged,
                copy,
                description,
                {"record_count": sum(parts.values()), "parts": parts, "lineage": lineage},
            )

    def link_dataset(
        self, project: str, name: str, src_dir: str | Path, description: str = "", lineage: dict | None = None
    ) -> DatasetVersion:
        """Register a kpl-dataset folder the platform wrote (a pipeline's output) as a new version, linked, not copied.

        Its version is the hash of its content (`datasets.link_written`), so the same records,
        schema and properties give the same version however and whenever they were written.
        """
        check_name(name)
        with self.storage.staging(project) as tmp:
            staged = tmp / "data"
            found, parts = datasets.link_written(Path(src_dir), staged)
            fields = {"record_count": sum(parts.values()), "parts": parts, "lineage": lineage}
            return self._register(DATASET, project, name, staged, found, description, fields)

    def get_dataset(self, project: str, ref: str) -> DatasetVersion:
        """Return a dataset version: `NAME` (the latest) or `NAME:VERSION`."""
        return self._get(DATASET, project, ref)

    def list_datasets(self, project: str) -> list[Dataset]:
        """Return the project's datasets, each with its versions (oldest first)."""
        return self._list(DATASET, project)

    def import_dataset(
        self,
        project: str,
        name: str,
        archive: str | Path,
        form: str = "import",
        part: str | None = None,
        split: str | None = None,
        description: str = "",
        shown_as: str | None = None,
    ) -> DatasetVersion:
        """Import an archive (`import`, `imagefolder`, `voc`, `coco` or `labelme`) as a new version."""
        return datasets.import_archive(
            self, project, name, Path(archive), form, part, split, description, shown_as
        )

    def unpack(self, project: str, archive: Path, tmp: Path, what: str) -> Path:
        """Unpack an archive in the project's sandbox into `tmp/unpacked`; return the folder it holds.

        `tmp` is a staging folder (`Storage.staging`): the archive goes in it (a link to it where
        this account owns it, else a copy), the sandbox's account writes there, and what it
        wrote is the platform's again (`Sandbox.adopt`) before it is read here.
        """
        staged = tmp / "archive" / archive.name
        self.stage(archive, staged)
        sandbox = self.platform.sandbox
        sandbox.give(project, tmp)
        try:
            inner = sandbox.call(
                project,
                "kpl_lab.catalog.service:unpack_in_worker",
                str(staged),
                str(tmp / "unpacked"),
                what=what,
                timeout=UNPACK_SECONDS,
            )
        finally:
            sandbox.adopt(project, tmp)
        return tmp / "unpacked" / inner

    @staticmethod
    def stage(source: Path, staged: Path) -> None:
        """Put a file into a staging folder: a hard link where this account owns it, else a copy."""
        staged.parent.mkdir(parents=True, exist_ok=True)
        if source.stat().st_uid == os.geteuid():
            with contextlib.suppress(OSError):  # another filesystem, or links refused there
                os.link(source, staged)
                return
        shutil.copyfile(source, staged)

    def open_dataset(self, project: str, name: str, version: str) -> tuple[DatasetVersion, DatasetView]:
        """Return a dataset version and the view that reads its pages, fields, thumbnails and stats."""
        return datasets.open_view(self, project, name, version)

    def delete_dataset(self, project: str, ref: str) -> list[str]:
        """Delete a dataset version, or the whole dataset when no version is named, with its caches."""
        refs = self._delete(DATASET, project, ref)
        datasets.forget(self.storage, project, refs)
        return refs

    # models

    def model_structure(self, project: str, ref: str) -> dict:
        """Return a model version's files with their layers, parameters and shapes, read in the project's sandbox."""
        row = self.get_model(project, ref)
        files = self.platform.sandbox.call(
            project,
            "kpl_lab.catalog.model_structure:describe_model_files",
            str(self.path(row)),
            list(row.files or []),
            what=f"the structure of model {row.ref}",
            timeout=STRUCTURE_SECONDS,
        )
        return {"ref": row.ref, "files": files}

    def add_model(
        self,
        project: str,
        name: str,
        src_path: str | Path,
        description: str = "",
        lineage: dict | None = None,
        within: Path | None = None,
    ) -> ModelVersion:
        """Copy a model file, folder or archive into storage as a new version (same content: same version).

        A `.zip`, `.tar`, `.tar.gz` or `.tgz` file is unpacked first, refusing unsafe entries
        (`..`, absolute paths, links) and archives that expand too much. `within`: as for
        `add_dataset`.
        """
        check_name(name)
        src = Path(src_path)
        if not src.exists():
            raise BadRequest(f"{src}: no such file or folder", field="path")
        with self.storage.staging(project) as tmp:
            if src.is_file() and src.name.lower().endswith(MODEL_ARCHIVE_SUFFIXES):
                if within is not None:  # her file: copied once, through no link, before it is unpacked
                    copy_hashed(src, tmp / "archive", within=within)
                    src = tmp / "archive" / src.name
                src, within = self.unpack(project, src, tmp, f"the model archive {src.name}"), None
            staged = tmp / "model"
            copy = copy_hashed(src, staged, within=within)
            if not copy.files:
                raise BadRequest(f"{src}: the model folder is empty", field="path")
            return self._register(
                MODEL, project, name, staged, copy, description, {"files": copy.files, "lineage": lineage}
            )

    def get_model(self, project: str, ref: str) -> ModelVersion:
        """Return a model version: `NAME` (the latest) or `NAME:VERSION`."""
        return self._get(MODEL, project, ref)

    def list_models(self, project: str) -> list[Model]:
        """Return the project's models, each with its versions (oldest first)."""
        return self._list(MODEL, project)

    def delete_model(self, project: str, ref: str) -> list[str]:
        """Delete a model version, or the whole model when no version is named."""
        return self._delete(MODEL, project, ref)

    def _get_alias(self, project: str, ref: str, session: Session) -> ModelVersion:
        name, _, alias = ref.partition("@")
        check_name(name, "model")
        check_name(alias, "alias")
        named = self._named(session, MODEL, project, name)
        found = next((a for a in named.aliases if a.alias == alias), None)
        if found is None:
            known = ", ".join(a.alias for a in named.aliases) or "none"
            raise NotFound(f"model alias {name}@{alias} not found (aliases: {known})")
        return found.model_version

    def set_model_alias(self, project: str, ref: str, alias: str) -> ModelVersion:
        """Point `NAME@ALIAS` at a model version (moving the alias if it pointed elsewhere)."""
        check_name(alias, "alias")
        with self.platform.session(immediate=True) as session:
            row = self._get(MODEL, project, ref, session)
            named = row.model
            found = next((a for a in named.aliases if a.alias == alias), None)
            if found is None:
                named.aliases.append(ModelAlias(alias=alias, model_version=row))
            else:
                found.model_version = row
            session.flush()
            return row

    def remove_model_alias(self, project: str, name: str, alias: str) -> str:
        """Remove `NAME@ALIAS`; return the ref it pointed at."""
        with self.platform.session(immediate=True) as session:
            row = self._get_alias(project, f"{name}@{alias}", session)
            named = row.model
            named.aliases.remove(next(a for a in named.aliases if a.alias == alias))
            return row.ref

    def model_aliases(self, row: ModelVersion) -> list[str]:
        """Return the aliases that point at a model version."""
        with self.platform.session() as session:
            query = select(ModelAlias.alias).where(ModelAlias.model_version_id == row.id)
            return sorted(session.scalars(query))

    # algorithms

    def add_algorithm(
        self, project: str, path_or_archive: str | Path, name: str | None = None, description: str = ""
    ) -> AlgorithmVersion:
        """Validate an algorithm folder or archive and store it as a version (same content: same version)."""
        from ..algorithms.errors import AlgorithmError
        from ..algorithms.package import archive_stem, install_algorithm, is_archive, remove_version

        if name is not None:
            check_name(name)
        versions_root = self.storage.kind_dir(project, "algorithms")
        source = Path(path_or_archive)
        try:
            with self.storage.staging(project) as tmp:
                if source.is_file() and is_archive(source):
                    folder = self.unpack(project, source, tmp, f"the algorithm archive {source.name}")
                    name = name or (folder.name if folder != tmp / "unpacked" else archive_stem(source))
                    source = folder
                algorithm = install_algorithm(source, versions_root, name)
        except AlgorithmError as exc:
            raise BadRequest(str(exc), field="path") from exc
        try:
            with self.platform.session(immediate=True) as session:
                proj = self.ensure_project(session, project)
                named = session.scalar(
                    select(Algorithm).where(Algorithm.project_id == proj.id, Algorithm.name == algorithm.name)
                )
                if named is None:
                    named = Algorithm(project_id=proj.id, name=algorithm.name, description=description)
                    session.add(named)
                    session.flush()
                existing = next((v for v in named.versions if v.version == algorithm.version), None)
                if existing is not None:
                    return existing
                row = AlgorithmVersion(
                    algorithm=named,
                    version=algorithm.version,
                    path=self.storage.relative(algorithm.path),
                    description=description,
                    size_bytes=algorithm.size_bytes,
                    functions=list(algorithm.spec.functions),
                    parameters=algorithm.parameters.values,
                )
                session.add(row)
                session.flush()
                return row
        except BaseException:
            if not self._is_registered(ALGORITHM, algorithm.path):
                remove_version(algorithm.path)
            raise

    def get_algorithm(self, project: str, ref: str) -> AlgorithmVersion:
        """Return an algorithm version: `NAME` (the latest) or `NAME:VERSION`."""
        return self._get(ALGORITHM, project, ref)

    def algorithm_version(self, project: str, ref: str, session: Session | None = None) -> AlgorithmVersion:
        """Return an algorithm version as `get_algorithm` does, without reading its algorithm's other versions."""
        return self._pinned(ALGORITHM, project, ref, session)

    def list_algorithms(self, project: str) -> list[Algorithm]:
        """Return the project's algorithms, each with its versions (oldest first)."""
        return self._list(ALGORITHM, project)

    def delete_algorithm(self, project: str, ref: str) -> list[str]:
        """Delete an algorithm version, or the whole algorithm when no version is named."""
        return self._delete(ALGORITHM, project, ref)

    def read_algorithm(self, version_row: AlgorithmVersion):
        """Return the stored version's validated `kpl_lab.algorithms.package.Algorithm` (spec, parameters)."""
        from ..algorithms.package import read_algorithm

        return read_algorithm(self.path(version_row), version_row.algorithm.name)

    def _is_registered(self, kind: _Kind, path: Path) -> bool:
        with self.platform.session() as session:
            rel = self.storage.relative(path)
            return session.scalar(select(kind.version.id).where(kind.version.path == rel)) is not None

    # inputs of jobs

    def resolve_input(
        self, project: str, ref: str, session: Session | None = None
    ) -> tuple[str, DatasetVersion | ModelVersion, Path]:
        """Resolve `dataset:NAME[:VERSION]`, `model:NAME[:VERSION]` or a bare `NAME[:VERSION]` (in `session`).

        A bare name is looked up as a dataset, then as a model; a name that is both is ambiguous.
        """
        kind, _, rest = ref.partition(":")
        if "@" in ref and kind not in INPUT_KINDS:  # NAME@ALIAS: only models have aliases
            kind, rest = "model", ref
        if kind in INPUT_KINDS and rest:
            row = self._pinned(KINDS[kind], project, rest, session)
            return kind, row, self.path(row)
        found = []
        for word in INPUT_KINDS:
            with contextlib.suppress(NotFound):
                found.append((word, self._get(KINDS[word], project, ref, session)))
        if not found:
            raise NotFound(f"no dataset or model {ref!r} in project {project!r}")
        if len(found) > 1:
            name = ref.partition(":")[0]
            raise BadRequest(
                f"{ref!r} names both a dataset and a model: write dataset:{ref} or model:{ref}",
                field=name,
            )
        word, row = found[0]
        return word, row, self.path(row)


MODEL_ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")


def unpack_in_worker(archive: str, dest: str) -> str:
    """Extract an uploaded archive with the algorithm upload's checks (in a sandboxed worker); return its folder.

    The folder is `dest` itself ("."), or its one top-level folder when the archive holds one.
    """
    from ..algorithms.errors import AlgorithmError
    from ..algorithms.package import extract_archive

    try:
        extract_archive(archive, dest)
    except AlgorithmError as exc:
        raise BadRequest(f"{Path(archive).name}: {exc}", field="path") from exc
    entries = list(Path(dest).iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0].name
    return "."


def is_dataset_scratch(name: str) -> bool:
    """Say whether a file in a kpl-dataset folder is a writer's lock or temporary file, not data."""
    return name.startswith(".") or name.endswith(".tmp")


def count_records(folder: Path, shown_as: Path) -> dict[str, int]:
    """Open every part of a kpl-dataset folder and return part name -> record count."""
    import kpl_dataset

    try:
        parts = datasets.part_order(kpl_dataset.list_parts(str(folder)))
        if not parts:
            raise BadRequest(f"{shown_as}: not a kpl-dataset folder (no dataset part found)", field="path")
        counts = {}
        for part in parts:
            with kpl_dataset.ReadOnlyDataset(str(folder), part) as reader:
                counts[part] = len(reader)
        return counts
    except kpl_dataset.KPLDatasetError as exc:
        raise BadRequest(f"{shown_as}: {exc}", field="path") from exc
