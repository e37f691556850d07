"""Event ingest: read a job's events.jsonl into the database, by byte offset, exactly once.

The events file in the run folder is the durable record: ingestion remembers its byte
offset in the job row, in the same transaction as the metric points, so ingesting twice
never duplicates a point. Jobs that cannot write to the run folder (Kubernetes) POST
their events, which are appended to the same file first.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import math
import os
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from sqlalchemy import func, insert, select

from ..catalog.jobs import Job, Metric
from ..documents import load_json
from ..errors import BadRequest, Conflict, Forbidden, NotFound
from . import envelope
from .records import JobRecords
from .runfolder import APPEND, Refused, open_in

if TYPE_CHECKING:
    from ..platform import Platform

NAME_CHARS = 200  # figure and series names: the length of their columns
EVENT_BATCH_BYTES = 4 * 1024 * 1024  # events read per ingestion transaction


def _timestamp(moment: datetime | None) -> float | None:
    if moment is None:
        return None
    if moment.tzinfo is None:  # SQLite gives naive datetimes back
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


class EventIngest:
    """Turn job events into metric points, progress, figures, results and saves."""

    def __init__(self, platform: Platform, records: JobRecords) -> None:
        self.platform = platform
        self.records = records

    def ingest(self, job_id: str) -> bool:
        """Read new events of a job into the database; return whether the job asked to be stopped."""
        job = self.records.job(job_id)
        run_dir = self.records.run_dir(job)
        asked_stop = False
        while True:
            with self.platform.session(immediate=True) as session:
                row = session.get(Job, job_id)
                offset = row.events_offset
                try:
                    with open(open_in(run_dir, "events.jsonl"), "rb") as events:
                        events.seek(offset)
                        data = events.read(EVENT_BATCH_BYTES)
                except (FileNotFoundError, Refused):  # a link or FIFO of the job's user is not read
                    return asked_stop
                end = data.rfind(b"\n")
                if end < 0:
                    if len(data) < EVENT_BATCH_BYTES:
                        return asked_stop  # only a partial line so far
                    row.events_invalid += 1  # one line larger than a batch: skip it
                    row.events_offset = offset + len(data)
                    continue
                asked_stop |= self._apply_events(session, row, data[: end + 1].splitlines())
                row.events_offset = offset + end + 1
                if len(data) < EVENT_BATCH_BYTES:
                    return asked_stop

    def _apply_events(self, session, job: Job, lines: list[bytes]) -> bool:
        steps = {
            (figure, series): step
            for figure, series, step in session.execute(
                select(Metric.figure, Metric.series, func.max(Metric.step))
                .where(Metric.job_id == job.id)
                .group_by(Metric.figure, Metric.series)
            )
        }
        points, asked_stop, invalid = [], False, 0
        figures, results, saves, handle = (
            json.loads(json.dumps(job.figures)),  # a deep copy, so the JSON column sees the change
            list(job.results),
            list(job.saves),
            dict(job.handle),
        )
        for line in lines:
            try:
                event = load_json(line, parse_constant=_not_json)  # a job's line nests 64 levels at most
                kind, moment = event["type"], float(event.get("time") or time.time())
            except (ValueError, KeyError, TypeError):
                invalid += 1
                continue
            if kind == "metric":
                title = str(event.get("title", ""))[:NAME_CHARS]
                try:
                    x = float(event["x"])
                except (KeyError, TypeError, ValueError):
                    invalid += 1
                    continue
                if not math.isfinite(x):
                    invalid += 1
                    continue
                for series, value in (event.get("values") or {}).items():
                    if (
                        isinstance(value, bool)
                        or not isinstance(value, (int, float))
                        or not math.isfinite(value)
                    ):
                        continue  # null for nan/inf: kept in the events file, not plotted
                    series = str(series)[:NAME_CHARS]
                    key = (title, series)
                    step = steps[key] = steps.get(key, -1) + 1
                    curve = figures.setdefault(title, {"title": title}).setdefault("envelopes", {})
                    envelope.add(curve.setdefault(series, envelope.new()), step, x, float(value))
                    points.append(
                        {
                            "job_id": job.id,
                            "figure": title,
                            "series": series,
                            "step": step,
                            "x": x,
                            "value": float(value),
                            "time": moment,
                        }
                    )
            elif kind == "progress":
                if job.state == "succeeded":
                    continue  # read after its end: a succeeded job stays at 100 %
                try:
                    fraction = min(1.0, max(0.0, float(event["value"])))
                except (KeyError, TypeError, ValueError):
                    invalid += 1
                    continue
                job.progress, job.progress_time = fraction, moment
                started = _timestamp(job.started) or moment
                job.eta_seconds = (moment - started) * (1 - fraction) / fraction if fraction > 0 else None
            elif kind == "figure":
                title = str(event.get("title", ""))[:NAME_CHARS]
                fields = {k: v for k, v in event.items() if k not in ("type", "time")}
                figures[title] = {**fields, "envelopes": figures.get(title, {}).get("envelopes", {})}
            elif kind == "result":
                results.append(event)
            elif kind == "save":
                saves.append(
                    {k: event.get(k) for k in ("kind", "path", "name", "description", "as_serialized")}
                )
            elif kind == "stop":
                asked_stop = True
            elif kind in ("ready", "done"):
                handle[f"{kind}_event_time"] = moment
        if points:
            session.execute(insert(Metric.__table__), points)  # Core executemany: no ORM per row
        job.figures, job.results, job.saves, job.handle = figures, results, saves, handle
        job.events_invalid += invalid
        return asked_stop

    def is_job_token(self, job_id: str, token: str) -> bool:
        """Say whether TOKEN is the events token of job JOB_ID (False when there is no such job)."""
        try:
            return _token_matches(self.records.job(job_id), token)
        except NotFound:
            return False

    def ingest_events(self, job_id: str, token: str, events: list[dict]) -> int:
        """Take events a job POSTed (Kubernetes: `KPL_EVENTS_URL`) and ingest them; return how many.

        The token must be the job's own (its SHA-256 is in the handle). The events are
        appended to the run folder's events.jsonl first, then ingested by offset like a
        local job's, so a repeated ingestion never duplicates a point.
        """
        job = self.records.job(job_id)
        if not _token_matches(job, token):
            raise Forbidden(f"job {job_id}: the events token is not this job's")
        if job.is_final:
            raise Conflict(f"job {job_id} has already ended ({job.state}): its events are closed")
        if not isinstance(events, list):
            raise BadRequest("events: expected a JSON array of event objects", field="events")
        lines = []
        for index, event in enumerate(events):
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise BadRequest(
                    f"events[{index}]: expected an object with a string 'type'", field=f"events[{index}]"
                )
            lines.append(json.dumps(event, separators=(",", ":"), default=str) + "\n")
        run_dir = self.records.run_dir(job)
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            events = open_in(run_dir, "events.jsonl", APPEND)
        except Refused as error:  # the job's user put a link there: the platform writes through none
            raise Forbidden(f"job {job_id}: {error}".replace(str(run_dir), "<run folder>")) from None
        with open(events, "ab") as out:
            fcntl.flock(out, fcntl.LOCK_EX)  # two pushes at once never interleave their lines
            try:
                out.write("".join(lines).encode())
                out.flush()
                os.fsync(out.fileno())
            finally:
                fcntl.flock(out, fcntl.LOCK_UN)
        if self.ingest(job_id):
            self.records.ask_stop(job_id, "the job asked to be stopped (stop.kill)")
        return len(lines)


def _token_matches(job: Job, token: str | None) -> bool:
    """Say whether TOKEN hashes to the job's events token (compared in constant time)."""
    expected = (job.handle or {}).get("token_sha256")
    given = hashlib.sha256((token or "").encode()).hexdigest()
    return bool(expected) and hmac.compare_digest(given, expected)


def _not_json(constant: str):
    # NaN and Infinity are not JSON: PostgreSQL's JSON columns refuse them, SQLite stores NULL
    raise ValueError(f"{constant} is not JSON")
