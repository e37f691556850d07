"""Labelling tasks: create, list, show with progress, change and delete; who may do what in one.

A task labels records of one dataset version, numbered 0..N-1 across its parts in order.
Records are dealt to the assignees in turn (record r to `assignees[r mod n]`); with no
assignees any member labels any record. Administrators may do everything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..api.annotation import (
    AnnotationTask,
    AnnotationTaskList,
    PersonProgress,
    TaskKind,
    TaskProgress,
    TaskRequest,
    TaskUpdateRequest,
)
from ..api.catalog import Deleted
from ..catalog.annotation import AnnotationLabel, AnnotationPrelabelRun, AnnotationSuggestion
from ..catalog.annotation import AnnotationTask as Row
from ..catalog.models import Project
from ..catalog.serialize import utc
from ..catalog.storage import check_name
from ..errors import BadRequest, Conflict, Forbidden, NotFound
from .values import check_schema_for, check_schema_keeps, schema_model, stored_schema

if TYPE_CHECKING:
    from ..platform import Platform

# the record_type of a field each kind can show
BYTES_TYPES = ("ByteArray", "File")
FIELD_TYPES = {
    TaskKind.text_class: ("String", *BYTES_TYPES),
}


def find(session: Session, project: str, name: str) -> Row:
    """Return a task of the project by name, or raise NotFound."""
    check_name(name, "task")
    row = session.scalar(
        select(Row)
        .join(Project, Row.project_id == Project.id)
        .where(Project.name == project, Row.name == name)
    )
    if row is None:
        raise NotFound(f"annotation task {name!r} not found in project {project!r}")
    return row


def locate(task: Row, record: int) -> tuple[str, int]:
    """Return the part and the index in it of a task's record number; refuse one out of range."""
    if not 0 <= record < task.record_count:
        raise NotFound(
            f"task {task.name!r}: record {record} not found (records 0 to {task.record_count - 1})"
        )
    for part, count in task.parts:
        if record < count:
            return part, record
        record -= count
    raise AssertionError("record counts disagree with the parts")


def assignee_of(task: Row, record: int) -> str | None:
    """Return who a record is dealt to, None when the task deals to nobody."""
    return task.assignees[record % len(task.assignees)] if task.assignees else None


def may_label(task: Row, user: str, admin: bool) -> None:
    """Refuse a caller who is not an annotator of the task."""
    if task.assignees and not admin and user not in task.assignees:
        raise Forbidden(
            f"task {task.name!r}: you are not one of its annotators ({', '.join(task.assignees)})"
        )


def may_review(task: Row, user: str, admin: bool) -> None:
    """Refuse a caller who is not a reviewer of the task."""
    if task.reviewers and not admin and user not in task.reviewers:
        raise Forbidden(f"task {task.name!r}: you are not one of its reviewers ({', '.join(task.reviewers)})")


def may_change(task: Row, user: str, admin: bool) -> None:
    """Refuse a caller who neither made the task nor administers the platform."""
    if not admin and user != task.created_by:
        raise Forbidden(
            f"task {task.name!r}: only {task.created_by!r}, who made it, or an administrator may change it"
        )


def _check_people(names: list[str], members: list[str] | None, field: str) -> list[str]:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise BadRequest(f"{field}.{i}: {name!r} is named twice", field=f"{field}.{i}")
        seen.add(name)
        if members is not None and name not in members:
            raise BadRequest(
                f"{field}.{i}: {name!r} is not a member of the project ({', '.join(members) or 'none'})",
                field=f"{field}.{i}",
            )
    return list(names)


def _content_field(
    platform: Platform, project: str, version, kind: TaskKind, parts: list[str], asked: str | None
) -> str:
    """Return the field annotators see, checked in every part: it exists and holds what the kind shows."""
    _, view = platform.catalog.open_dataset(project, version.dataset.name, version.version)
    schemas = view.schemas()
    field = asked
    if field is None:
        field = (
            "text" if kind is TaskKind.text_class and all("text" in schemas[p] for p in parts) else "content"
        )
    allowed = FIELD_TYPES.get(kind, BYTES_TYPES)
    for part in parts:
        rtype = schemas[part].get(field)
        if rtype is None:
            known = ", ".join(schemas[part])
            raise BadRequest(
                f"content_field: part {part!r} of {version.ref} has no field {field!r} (fields: {known})",
                field="content_field",
            )
        if rtype not in allowed:
            raise BadRequest(
                f"content_field: {field!r} is a {rtype} field; a {kind.value} task shows {' or '.join(allowed)}",
                field="content_field",
            )
    return field


def create(
    platform: Platform, project: str, request: TaskRequest, user: str, members: list[str] | None
) -> AnnotationTask:
    """Create a task on a dataset version."""
    check_schema_for(request.kind, request.label_schema)
    version = platform.catalog.get_dataset(project, request.dataset)
    counts = dict(version.parts)
    parts = list(request.parts) if request.parts is not None else list(counts)
    if not parts:
        raise BadRequest("parts: name at least one part", field="parts")
    for i, part in enumerate(parts):
        if part not in counts:
            raise BadRequest(
                f"parts.{i}: {version.ref} has no part {part!r} (parts: {', '.join(counts)})",
                field=f"parts.{i}",
            )
        if part in parts[:i]:
            raise BadRequest(f"parts.{i}: {part!r} is named twice", field=f"parts.{i}")
    field = _content_field(platform, project, version, request.kind, parts, request.content_field)
    left = request.limit if request.limit is not None else sum(counts[p] for p in parts)
    taken = []
    for part in parts:
        count = min(counts[part], left)
        if count:
            taken.append([part, count])
        left -= count
    if not taken:
        raise BadRequest(f"dataset: {version.ref} has no records in {', '.join(parts)}", field="dataset")
    row = Row(
        name=request.name,
        description=request.description,
        dataset_version_id=version.id,
        kind=request.kind.value,
        label_schema=stored_schema(request.label_schema),
        parts=taken,
        record_count=sum(count for _, count in taken),
        content_field=field,
        assignees=_check_people(request.assignees, members, "assignees"),
        reviewers=_check_people(request.reviewers, members, "reviewers"),
        created_by=user,
    )
    with platform.session(immediate=True) as session:
        project_row = platform.catalog.ensure_project(session, project)
        exists = session.scalar(
            select(Row.id).where(Row.project_id == project_row.id, Row.name == request.name)
        )
        if exists is not None:
            raise Conflict(
                f"annotation task {request.name!r} exists already in project {project!r}", field="name"
            )
        row.project_id = project_row.id
        session.add(row)
        session.flush()
        return model(session, find(session, project, request.name))


def listing(platform: Platform, project: str, members: list[str] | None) -> AnnotationTaskList:
    """Return the project's tasks, newest first, with their progress."""
    with platform.session() as session:
        rows = session.scalars(
            select(Row)
            .join(Project, Row.project_id == Project.id)
            .where(Project.name == project)
            .order_by(Row.id.desc())
        )
        return AnnotationTaskList(tasks=[model(session, row) for row in rows], members=members)


def show(platform: Platform, project: str, name: str) -> AnnotationTask:
    """Return one task with its progress."""
    with platform.session() as session:
        return model(session, find(session, project, name))


def update(
    platform: Platform,
    project: str,
    name: str,
    request: TaskUpdateRequest,
    user: str,
    admin: bool,
    members: list[str] | None,
) -> AnnotationTask:
    """Change a task's description, annotators, reviewers or (keeping every class) label schema."""
    with platform.session(immediate=True) as session:
        row = find(session, project, name)
        may_change(row, user, admin)
        if request.description is not None:
            row.description = request.description
        if request.assignees is not None:
            row.assignees = _check_people(request.assignees, members, "assignees")
        if request.reviewers is not None:
            row.reviewers = _check_people(request.reviewers, members, "reviewers")
        if request.label_schema is not None:
            check_schema_for(TaskKind(row.kind), request.label_schema)
            schema = stored_schema(request.label_schema)
            check_schema_keeps(row.label_schema, schema)
            row.label_schema = schema
        session.flush()
        return model(session, row)


def delete(platform: Platform, project: str, name: str, user: str, admin: bool) -> Deleted:
    """Delete a task with its labels, history and suggestions (refused while a pre-labelling run goes on)."""
    with platform.session(immediate=True) as session:
        row = find(session, project, name)
        may_change(row, user, admin)
        running = session.scalar(
            select(AnnotationPrelabelRun.id).where(
                AnnotationPrelabelRun.task_id == row.id, AnnotationPrelabelRun.state == "running"
            )
        )
        if running is not None:
            raise Conflict(f"task {name!r}: pre-labelling run {running} is running; stop it first")
        session.delete(row)
    return Deleted(deleted=[name])


def progress(session: Session, row: Row) -> TaskProgress:
    """Return how far a task is: counts by state and by person, in records and percent."""
    counts = session.execute(
        select(AnnotationLabel.state, AnnotationLabel.annotator, AnnotationLabel.dropped, func.count())
        .where(AnnotationLabel.task_id == row.id)
        .group_by(AnnotationLabel.state, AnnotationLabel.annotator, AnnotationLabel.dropped)
    ).all()
    reviews = dict(
        session.execute(
            select(AnnotationLabel.reviewer, func.count())
            .where(AnnotationLabel.task_id == row.id, AnnotationLabel.reviewer != "")
            .group_by(AnnotationLabel.reviewer)
        ).all()
    )
    suggested = session.scalar(
        select(func.count()).select_from(AnnotationSuggestion).where(AnnotationSuggestion.task_id == row.id)
    )
    people: dict[str, dict[str, int]] = {}
    totals = {"labelled": 0, "accepted": 0, "rejected": 0, "dropped": 0}
    for state, annotator, dropped, count in counts:
        totals["labelled"] += count
        if state in ("accepted", "rejected"):
            totals[state] += count
        if dropped:
            totals["dropped"] += count
        person = people.setdefault(annotator, {"labelled": 0, "accepted": 0, "rejected": 0})
        person["labelled"] += count
        if state in ("accepted", "rejected"):
            person[state] += count
    n, records = len(row.assignees), row.record_count
    names = list(dict.fromkeys([*row.assignees, *people, *reviews]))
    shown = []
    for name in names:
        done = people.get(name, {"labelled": 0, "accepted": 0, "rejected": 0})
        assigned = None
        if name in row.assignees:
            k = row.assignees.index(name)
            assigned = (records - k + n - 1) // n if records > k else 0
        shown.append(
            PersonProgress(
                user=name,
                assigned=assigned,
                reviewed=reviews.get(name, 0),
                percent=_percent(done["labelled"], assigned) if assigned is not None else None,
                **done,
            )
        )
    return TaskProgress(
        records=records,
        suggested=suggested or 0,
        percent=_percent(totals["labelled"], records),
        percent_accepted=_percent(totals["accepted"], records),
        people=shown,
        **totals,
    )


def _percent(part: int, whole: int | None) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


def model(session: Session, row: Row) -> AnnotationTask:
    """Return a task as the API answers it."""
    return AnnotationTask(
        name=row.name,
        description=row.description,
        dataset=row.dataset_version.ref,
        kind=TaskKind(row.kind),
        label_schema=schema_model(row.label_schema),
        parts={part: count for part, count in row.parts},
        record_count=row.record_count,
        content_field=row.content_field,
        assignees=row.assignees,
        reviewers=row.reviewers,
        created_by=row.created_by,
        created=utc(row.created),
        progress=progress(session, row),
    )
