"""Jobs: submit, list, show, stop, re-run, copy, resume, logs (chunks, long poll), metrics, progress, events."""

from __future__ import annotations

import time
from pathlib import Path

from ..api.jobs import (
    CopyRequest,
    EventsAccepted,
    Job,
    JobList,
    JobRequest,
    LogChunk,
    Metrics,
    Progress,
    ResumeRequest,
)
from ..api.usage import JobUsage
from ..catalog.serialize import job_model, metrics_model, usage_model
from ..engine.runfolder import Refused, open_in
from ..errors import BadRequest, Forbidden, NotFound
from .caller import Caller
from .spec import Raw

LOG_CHUNK = 64 * 1024
LOG_CHUNK_MAX = 1 << 20
FOLLOW_POLL_SECONDS = 0.25
WAIT_MAX_SECONDS = 60
EVENTS_REFUSED = "posting events needs the job's own token: Authorization: token <KPL_JOB_TOKEN>"


def _answer(caller: Caller, job) -> Job:
    """Return a job with its progress, time left and why it waits."""
    jobs = caller.platform.jobs
    return job_model(job, *jobs.progress(job), jobs.queue_reason(job))


def list_jobs(caller: Caller, state: str | None) -> JobList:
    """List the project's jobs, newest first (in one state)."""
    jobs = caller.platform.jobs
    listed = jobs.list(caller.project, state)
    queue = jobs.queue_reasons(caller.project) if any(job.state == "queued" for job in listed) else {}
    return JobList(jobs=[job_model(job, *jobs.progress(job), queue.get(job.id)) for job in listed])


def submit(caller: Caller, body: JobRequest) -> Job:
    """Submit a job (queued, started at once when it fits), run as the caller's account."""
    return _answer(caller, caller.platform.jobs.submit(body, user=caller.user))


def show_job(caller: Caller, job_id: str) -> Job:
    """Show a job."""
    return _answer(caller, caller.platform.jobs.get(caller.project, job_id))


def stop(caller: Caller, job_id: str) -> Job:
    """Stop a job."""
    return _answer(caller, caller.platform.jobs.stop(caller.project, job_id))


def rerun(caller: Caller, job_id: str) -> Job:
    """Run the same algorithm version, inputs, parameters and resources again."""
    return _answer(caller, caller.platform.jobs.rerun(caller.project, job_id, user=caller.user))


def copy(caller: Caller, job_id: str, body: CopyRequest) -> Job:
    """Run a job again with some parameters or resources changed."""
    resources = body.resources.model_dump(exclude_none=True) if body.resources else None
    job = caller.platform.jobs.copy(caller.project, job_id, body.parameters, resources, user=caller.user)
    return _answer(caller, job)


def resume(caller: Caller, job_id: str, body: ResumeRequest) -> Job:
    """Run a copy that starts from the model the job registered."""
    job = caller.platform.jobs.resume(caller.project, job_id, body.parameters, user=caller.user)
    return _answer(caller, job)


def read_log(run_dir: Path, path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Return up to `limit` bytes of a log of a run folder from `offset`, and the log's size now."""
    try:
        with open(open_in(run_dir, path), "rb") as log:
            size = log.seek(0, 2)
            log.seek(min(offset, size))
            return log.read(limit), size
    except FileNotFoundError:
        return b"", 0
    except Refused as error:  # the job's user put a link or a FIFO there: the platform reads neither
        raise Forbidden(str(error).replace(str(run_dir), "<run folder>"), field="worker") from None


def utf8_prefix(data: bytes, final: bool) -> tuple[str, int]:
    """Decode the longest prefix that does not end inside a character; return (text, bytes used)."""
    if final:
        return data.decode("utf-8", "replace"), len(data)
    for cut in range(min(4, len(data)) + 1):
        try:
            return data[: len(data) - cut].decode("utf-8"), len(data) - cut
        except UnicodeDecodeError as error:
            if error.start < len(data) - 4:  # bad bytes inside the chunk, not a character cut at its end
                break
    return data.decode("utf-8", "replace"), len(data)


def log_files(caller: Caller, job_id: str, worker: int) -> tuple[Path, Path]:
    """Return a job's run folder and the log of one of its workers (NotFound for another project's job)."""
    jobs = caller.platform.jobs
    job = jobs.get(caller.project, job_id)
    return jobs.run_dir(job), jobs.log_path(job, worker)


def log_chunk(caller: Caller, job_id: str, log: tuple[Path, Path], offset: int, limit: int) -> LogChunk:
    """Return the output from `offset` as it is now: at most `limit` bytes, whole characters only."""
    # the state is read before the log: an ended job has written all of it
    job = caller.platform.jobs.get(caller.project, job_id)
    final = job.is_final
    data, size = read_log(*log, offset, limit)
    text, used = utf8_prefix(data, final and offset + len(data) >= size)
    done = final and offset + used >= size
    return LogChunk(
        text=text, offset=offset, next_offset=offset + used, size=size, done=done, state=job.state
    )


def answered(chunk: LogChunk, deadline: float) -> bool:
    """Say whether a long poll answers this chunk now: output came, the job ended, or the wait is over."""
    return bool(chunk.text) or chunk.done or time.monotonic() >= deadline


def logs(
    caller: Caller, job_id: str, offset: int, limit: int, wait: int, follow: int, worker: int
) -> LogChunk | Raw:
    """Answer a chunk of the log; `wait` seconds for output when none is there yet.

    `follow=1` answers the rest of the log as text once the job has ended (the REST handler
    streams it as it is written instead).
    """
    log = log_files(caller, job_id, worker)
    if follow:
        texts = []
        while not (chunk := logs(caller, job_id, offset, LOG_CHUNK, WAIT_MAX_SECONDS, 0, worker)).done:
            texts.append(chunk.text)
            offset = chunk.next_offset
        return Raw("".join([*texts, chunk.text]).encode(), "text/plain; charset=utf-8")
    deadline = time.monotonic() + wait
    while not answered(chunk := log_chunk(caller, job_id, log, offset, limit), deadline):
        time.sleep(FOLLOW_POLL_SECONDS)
    return chunk


def metrics(caller: Caller, job_id: str, max_points: int) -> Metrics:
    """Answer each metric series, grouped by figure, downsampled to at most `max_points`."""
    jobs = caller.platform.jobs
    figures = jobs.metrics(caller.project, job_id, max_points)
    return metrics_model(jobs.get(caller.project, job_id), figures, max_points)


def progress(caller: Caller, job_id: str) -> Progress:
    """Answer the fraction done, the seconds left and why the job waits."""
    jobs = caller.platform.jobs
    job = jobs.get(caller.project, job_id)
    fraction, eta = jobs.progress(job)
    queue = jobs.queue_reason(job)
    return Progress(
        state=job.state,
        progress=fraction,
        eta_seconds=eta,
        queue=queue.to_json() if queue is not None else None,
    )


def usage(caller: Caller, job_id: str) -> JobUsage:
    """Answer the job's live resource use."""
    return usage_model(caller.platform.jobs.usage(caller.project, job_id))


def check_token(caller: Caller, job_id: str, token: str) -> None:
    """Refuse a token that is not the job's own (before its body is read)."""
    # one answer for a missing token, a wrong token and no such job: job ids are no oracle
    if not token or not caller.platform.jobs.is_job_token(job_id, token):
        raise Forbidden(EVENTS_REFUSED)


def post_events(caller: Caller, job_id: str, token: str, body: object) -> EventsAccepted:
    """Ingest a JSON array of events a job posted with its own token (`check_token` ran before the body was read)."""
    jobs = caller.platform.jobs
    if not isinstance(body, list):
        raise BadRequest("the body must be a JSON array of events", field="body")
    try:
        accepted = jobs.ingest_events(job_id, token, body)
    except NotFound:  # deleted since the check
        raise Forbidden(EVENTS_REFUSED) from None
    return EventsAccepted(accepted=accepted if isinstance(accepted, int) else len(body))
