"""Labels of a task's records: show a record, save its label (never over someone else's save), review
it, read its history, and walk the task's records in queues.

Every save and review is one committed transaction that checks the version the caller loaded:
the label moves on by one version each time, and a caller holding an older version gets 409
naming the record, who saved it last and when. Each step is kept as an event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from ..api.annotation import (
    AnnotationRecord,
    Label,
    LabelEvent,
    LabelHistory,
    LabelRequest,
    QueueEntry,
    QueueOrder,
    RecordQueue,
    RecordState,
    ReviewRequest,
    Suggestion,
    TaskKind,
)
from ..catalog.annotation import AnnotationEvent, AnnotationLabel, AnnotationSuggestion
from ..catalog.annotation import AnnotationTask as Row
from ..catalog.datasets import field_url
from ..catalog.models import utcnow
from ..catalog.serialize import utc
from ..errors import BadRequest, Conflict, NotFound
from .tasks import assignee_of, find, locate, may_label, may_review
from .values import check_value

if TYPE_CHECKING:
    from ..platform import Platform

QUEUE_MAX = 500
FIRST_WINDOW = 1024  # record numbers looked at per query when walking unlabelled records


def label_model(row: AnnotationLabel) -> Label:
    """Return a label row as the API answers it."""
    return Label(
        record=row.record,
        value=row.value,
        version=row.version,
        state=row.state,
        annotator=row.annotator,
        saved=utc(row.saved),
        suggestion_run=row.suggestion_run,
        reviewer=row.reviewer or None,
        comment=row.comment,
        reviewed=utc(row.reviewed),
    )


def suggestion_model(row: AnnotationSuggestion) -> Suggestion:
    """Return a suggestion row as the API answers it."""
    return Suggestion(
        run_id=row.run_id,
        value=row.value,
        score=row.score,
        uncertainty=row.uncertainty,
        model_version=row.model_version,
        created=utc(row.created),
    )


def _label(session: Session, task: Row, record: int) -> AnnotationLabel | None:
    return session.scalar(
        select(AnnotationLabel).where(AnnotationLabel.task_id == task.id, AnnotationLabel.record == record)
    )


def _suggestion(session: Session, task: Row, record: int) -> AnnotationSuggestion | None:
    return session.scalar(
        select(AnnotationSuggestion).where(
            AnnotationSuggestion.task_id == task.id, AnnotationSuggestion.record == record
        )
    )


def show_record(platform: Platform, project: str, name: str, record: int, api_base: str) -> AnnotationRecord:
    """Return a record of a task: its fields (bytes as URLs under `api_base`), its label and its suggestion."""
    with platform.session() as session:
        task = find(session, project, name)
        part, index = locate(task, record)
        label, suggestion = _label(session, task, record), _suggestion(session, task, record)
        dataset, version = task.dataset_version.dataset.name, task.dataset_version.version
        assignee = assignee_of(task, record)
    _, view = platform.catalog.open_dataset(project, dataset, version)
    page = view.page(part, index, 1, None, field_url(api_base, project, dataset, version))
    return AnnotationRecord(
        record=record,
        part=part,
        index=index,
        assignee=assignee,
        fields=page["records"][0]["fields"],
        label=label_model(label) if label else None,
        suggestion=suggestion_model(suggestion) if suggestion else None,
    )


def _conflict(task: Row, record: int, row: AnnotationLabel | None, loaded: int) -> Conflict:
    if row is None:
        return Conflict(
            f"task {task.name!r}, record {record}: it has no label yet; you sent version {loaded} (send 0)",
            field="version",
        )
    who, when = (
        (row.reviewer, row.reviewed)
        if row.reviewed and row.reviewed >= row.saved
        else (row.annotator, row.saved)
    )
    return Conflict(
        f"task {task.name!r}, record {record}: {who} saved it at {utc(when):%Y-%m-%d %H:%M:%S} UTC "
        f"(version {row.version}) after the version {loaded} you loaded; reload the record and apply "
        "your change again",
        field="version",
    )


def save(
    platform: Platform, project: str, name: str, record: int, request: LabelRequest, user: str, admin: bool
) -> Label:
    """Save a record's label if it is still at the version the caller loaded; keep the step in its history."""
    with platform.session(immediate=True) as session:
        task = find(session, project, name)
        locate(task, record)
        may_label(task, user, admin)
        value = check_value(TaskKind(task.kind), task.label_schema, request.value)
        row = _label(session, task, record)
        if (row.version if row else 0) != request.version:
            raise _conflict(task, record, row, request.version)
        suggestion = None
        if request.suggestion_run is not None:
            suggestion = _suggestion(session, task, record)
            if suggestion is None or suggestion.run_id != request.suggestion_run:
                raise BadRequest(
                    f"suggestion_run: record {record} has no suggestion of run {request.suggestion_run}",
                    field="suggestion_run",
                )
        now = utcnow()
        if row is None:
            row = AnnotationLabel(task_id=task.id, record=record, version=0)
            session.add(row)
        row.value, row.version, row.state, row.dropped = (
            value,
            row.version + 1,
            "labelled",
            request.value.dropped,
        )
        row.annotator, row.saved, row.suggestion_run = user, now, request.suggestion_run
        row.reviewer, row.comment, row.reviewed = "", "", None  # a changed label is reviewed again
        session.add(
            AnnotationEvent(
                task_id=task.id,
                record=record,
                version=row.version,
                action="saved",
                user=user,
                at=now,
                value=value,
                suggestion_run=request.suggestion_run,
                suggestion_model=suggestion.model_version if suggestion else "",
                suggestion_score=suggestion.score if suggestion else None,
            )
        )
        session.flush()
        return label_model(row)


def review(
    platform: Platform, project: str, name: str, record: int, request: ReviewRequest, user: str, admin: bool
) -> Label:
    """Accept or reject a record's label at the version the reviewer saw; a rejection goes back to its annotator."""
    with platform.session(immediate=True) as session:
        task = find(session, project, name)
        locate(task, record)
        may_review(task, user, admin)
        row = _label(session, task, record)
        if row is None:
            raise NotFound(f"task {name!r}, record {record}: no label to review")
        if row.version != request.version:
            raise _conflict(task, record, row, request.version)
        if request.decision == "reject" and not request.comment.strip():
            raise BadRequest("comment: say what is wrong, for the annotator", field="comment")
        now = utcnow()
        row.state = "accepted" if request.decision == "accept" else "rejected"
        row.version += 1
        row.reviewer, row.comment, row.reviewed = user, request.comment, now
        session.add(
            AnnotationEvent(
                task_id=task.id,
                record=record,
                version=row.version,
                action=row.state,
                user=user,
                at=now,
                comment=request.comment,
            )
        )
        session.flush()
        return label_model(row)


def history(platform: Platform, project: str, name: str, record: int) -> LabelHistory:
    """Return every step of a record's label, oldest first."""
    with platform.session() as session:
        task = find(session, project, name)
        locate(task, record)
        events = session.scalars(
            select(AnnotationEvent)
            .where(AnnotationEvent.task_id == task.id, AnnotationEvent.record == record)
            .order_by(AnnotationEvent.id)
        )
        return LabelHistory(
            record=record,
            events=[
                LabelEvent(
                    version=e.version,
                    action=e.action,
                    user=e.user,
                    at=utc(e.at),
                    value=e.value,
                    comment=e.comment,
                    suggestion_run=e.suggestion_run,
                    suggestion_model=e.suggestion_model or None,
                    suggestion_score=e.suggestion_score,
                )
                for e in events
            ],
        )


# queues


def _after(text: str | None, order: QueueOrder) -> tuple[float | None, int]:
    """Parse a queue cursor: `R` (the last record shown), or `U:R` in the uncertain records of an uncertainty queue."""
    if not text:
        return None, -1
    try:
        if ":" in text:
            uncertainty, record = text.split(":")
            if order is not QueueOrder.uncertainty:
                raise ValueError
            return float(uncertainty), int(record)
        return None, int(text)
    except ValueError:
        raise BadRequest(f"after: {text!r} is not a cursor this queue answered", field="after") from None


def queue(
    platform: Platform,
    project: str,
    name: str,
    user: str,
    state: RecordState | None = RecordState.unlabelled,
    order: QueueOrder = QueueOrder.record,
    mine: bool = False,
    after: str | None = None,
    limit: int = 50,
) -> RecordQueue:
    """Return a page of a task's records: of one state (None: all), in record or uncertainty order, `mine` only.

    `mine`: unlabelled records dealt to the caller, labels the caller saved last.
    """
    if not 1 <= limit <= QUEUE_MAX:
        raise BadRequest(f"limit: must be between 1 and {QUEUE_MAX}, got {limit}", field="limit")
    cursor = _after(after, order)
    with platform.session() as session:
        task = find(session, project, name)
        if state in (RecordState.labelled, RecordState.accepted, RecordState.rejected):
            return _labelled(session, task, state, user if mine else None, cursor[1], limit)
        deal = None
        if mine and task.assignees and user in task.assignees:
            deal = (len(task.assignees), task.assignees.index(user))
        elif mine and task.assignees:
            return RecordQueue(records=[], next=None)
        entries: list[QueueEntry] = []
        start = cursor[1] + 1
        uncertain_first = order is QueueOrder.uncertainty and state is RecordState.unlabelled
        if uncertain_first and (cursor[0] is not None or after is None):
            entries, last = _uncertain(session, task, deal, cursor, limit)
            if len(entries) == limit:
                return RecordQueue(records=entries, next=f"{last[0]!r}:{last[1]}")
            start = 0  # then the records without a suggestion, in record order
        entries += _walk(
            session, task, state, deal, start, limit - len(entries), order is QueueOrder.uncertainty
        )
        more = len(entries) == limit and entries[-1].record < task.record_count - 1
        return RecordQueue(records=entries, next=str(entries[-1].record) if more else None)


def _entry(task: Row, record: int, label: AnnotationLabel | None, uncertainty: float | None) -> QueueEntry:
    part, index = locate(task, record)
    return QueueEntry(
        record=record,
        part=part,
        index=index,
        state=RecordState(label.state) if label else RecordState.unlabelled,
        assignee=assignee_of(task, record),
        annotator=label.annotator if label else None,
        uncertainty=uncertainty,
    )


def _labelled(
    session: Session, task: Row, state: RecordState, annotator: str | None, after: int, limit: int
) -> RecordQueue:
    query = (
        select(AnnotationLabel, AnnotationSuggestion.uncertainty)
        .outerjoin(
            AnnotationSuggestion,
            and_(
                AnnotationSuggestion.task_id == task.id, AnnotationSuggestion.record == AnnotationLabel.record
            ),
        )
        .where(
            AnnotationLabel.task_id == task.id,
            AnnotationLabel.state == state.value,
            AnnotationLabel.record > after,
        )
        .order_by(AnnotationLabel.record)
        .limit(limit)
    )
    if annotator is not None:
        query = query.where(AnnotationLabel.annotator == annotator)
    rows = session.execute(query).all()
    entries = [_entry(task, label.record, label, uncertainty) for label, uncertainty in rows]
    return RecordQueue(records=entries, next=str(entries[-1].record) if len(entries) == limit else None)


def _uncertain(
    session: Session, task: Row, deal: tuple[int, int] | None, cursor: tuple[float | None, int], limit: int
) -> tuple[list[QueueEntry], tuple[float, int]]:
    """Return unlabelled records with a suggestion, the least certain first, after the cursor."""
    query = (
        select(AnnotationSuggestion.record, AnnotationSuggestion.uncertainty)
        .outerjoin(
            AnnotationLabel,
            and_(AnnotationLabel.task_id == task.id, AnnotationLabel.record == AnnotationSuggestion.record),
        )
        .where(AnnotationSuggestion.task_id == task.id, AnnotationLabel.id.is_(None))
        .order_by(AnnotationSuggestion.uncertainty.desc(), AnnotationSuggestion.record)
        .limit(limit)
    )
    uncertainty, record = cursor
    if uncertainty is not None:
        query = query.where(
            or_(
                AnnotationSuggestion.uncertainty < uncertainty,
                and_(AnnotationSuggestion.uncertainty == uncertainty, AnnotationSuggestion.record > record),
            )
        )
    if deal is not None:
        query = query.where(AnnotationSuggestion.record % deal[0] == deal[1])
    rows = session.execute(query).all()
    entries = [_entry(task, r, None, u) for r, u in rows]
    return entries, (rows[-1][1], rows[-1][0]) if rows else (0.0, -1)


def _walk(
    session: Session,
    task: Row,
    state: RecordState | None,
    deal: tuple[int, int] | None,
    start: int,
    limit: int,
    skip_suggested: bool,
) -> list[QueueEntry]:
    """Walk record numbers from `start` in windows, keeping those of `state` (None: any) dealt to `deal`.

    The window doubles while it finds nothing, so a long run of labelled records costs a few
    queries, not one per window.
    """
    step, offset = deal if deal is not None else (1, 0)
    first = start + (offset - start) % step
    entries: list[QueueEntry] = []
    window = FIRST_WINDOW * step
    while first < task.record_count and len(entries) < limit:
        end = min(first + window, task.record_count)
        labels = {
            row.record: row
            for row in session.scalars(
                select(AnnotationLabel).where(
                    AnnotationLabel.task_id == task.id,
                    AnnotationLabel.record >= first,
                    AnnotationLabel.record < end,
                )
            )
        }
        suggested = dict(
            session.execute(
                select(AnnotationSuggestion.record, AnnotationSuggestion.uncertainty).where(
                    AnnotationSuggestion.task_id == task.id,
                    AnnotationSuggestion.record >= first,
                    AnnotationSuggestion.record < end,
                )
            ).all()
        )
        found = len(entries)
        for record in range(first, end, step):
            label = labels.get(record)
            if state is RecordState.unlabelled and (
                label is not None or (skip_suggested and record in suggested)
            ):
                continue
            entries.append(_entry(task, record, label, suggested.get(record)))
            if len(entries) == limit:
                break
        first = first + ((end - first + step - 1) // step) * step
        window = window if len(entries) > found else window * 2
    return entries
