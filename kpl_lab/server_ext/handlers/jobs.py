"""Jobs: submit, list, show, stop, re-run, copy, resume, logs (chunks, long poll, live), metrics, progress."""

from __future__ import annotations

import asyncio
import codecs
from pathlib import Path

from jupyter_server.auth.decorator import allow_unauthenticated
from tornado import web
from tornado.iostream import StreamClosedError

from ...api.jobs import (
    JOB_STATES,
    MAX_WORKER,
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
from ...catalog.serialize import job_model, metrics_model, usage_model
from ...engine.runfolder import Refused, open_in
from ...errors import BadRequest, Forbidden, NotFound
from ..base import OFFSET_MAX, KPLHandler

LOG_CHUNK = 64 * 1024
LOG_CHUNK_MAX = 1 << 20
FOLLOW_POLL_SECONDS = 0.25
WAIT_MAX_SECONDS = 60


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


class JobBase(KPLHandler):
    """A handler that answers jobs."""

    @property
    def submitter(self) -> str:
        """Return the hub name of the caller, whose account runs the jobs they submit."""
        return self.current_user.username

    async def answer_job(self, work, status: int = 200) -> None:
        """Run `work` (returning a job) off the event loop and answer the job."""

        def run() -> Job:
            job = work()
            jobs = self.platform.jobs
            return job_model(job, *jobs.progress(job), jobs.queue_reason(job))

        self.reply(await self.blocking(run), status=status)


class JobsHandler(JobBase):
    """GET: the project's jobs, newest first (`?state=`); POST: submit a job."""

    @web.authenticated
    async def get(self) -> None:
        """List jobs."""
        state = self.get_query_argument("state", None)
        if state is not None and state not in JOB_STATES:
            raise BadRequest(f"state: {state!r} is not one of {', '.join(JOB_STATES)}", field="state")

        def work() -> JobList:
            jobs = self.platform.jobs
            listed = jobs.list(self.project, state)
            queue = jobs.queue_reasons(self.project) if any(job.state == "queued" for job in listed) else {}
            return JobList(jobs=[job_model(job, *jobs.progress(job), queue.get(job.id)) for job in listed])

        self.reply(await self.blocking(work))

    @web.authenticated
    async def post(self) -> None:
        """Submit a job."""
        request = self.body_as(JobRequest, project=self.project)
        await self.answer_job(lambda: self.platform.jobs.submit(request, user=self.submitter), status=201)


class JobHandler(JobBase):
    """GET: one job."""

    @web.authenticated
    async def get(self, job_id: str) -> None:
        """Show a job."""
        await self.answer_job(lambda: self.platform.jobs.get(self.project, job_id))


class JobStopHandler(JobBase):
    """POST: stop a job."""

    @web.authenticated
    async def post(self, job_id: str) -> None:
        """Stop a job."""
        await self.answer_job(lambda: self.platform.jobs.stop(self.project, job_id))


class JobRerunHandler(JobBase):
    """POST: run the same thing again."""

    @web.authenticated
    async def post(self, job_id: str) -> None:
        """Re-run a job."""
        await self.answer_job(
            lambda: self.platform.jobs.rerun(self.project, job_id, user=self.submitter), status=201
        )


class JobCopyHandler(JobBase):
    """POST: run again with some parameters or resources changed."""

    @web.authenticated
    async def post(self, job_id: str) -> None:
        """Copy a job."""
        body = self.body_as(CopyRequest)
        resources = body.resources.model_dump(exclude_none=True) if body.resources else None
        await self.answer_job(
            lambda: self.platform.jobs.copy(
                self.project, job_id, body.parameters, resources, user=self.submitter
            ),
            status=201,
        )


class JobResumeHandler(JobBase):
    """POST: run a copy from the model the job registered."""

    @web.authenticated
    async def post(self, job_id: str) -> None:
        """Resume a job."""
        body = self.body_as(ResumeRequest)
        await self.answer_job(
            lambda: self.platform.jobs.resume(self.project, job_id, body.parameters, user=self.submitter),
            status=201,
        )


class JobLogsHandler(KPLHandler):
    """GET: a chunk of output.log (JSON; `wait` long-polls), or `follow=1` to stream it live as text.

    `worker=N` reads worker N's log in a job of several workers.
    """

    _closed = False

    @web.authenticated
    async def get(self, job_id: str) -> None:
        """Answer a chunk of the log, or stream it."""
        offset = self.query_int("offset", 0, 0, OFFSET_MAX)
        follow = self.query_int("follow", 0, 0, 1)
        limit = self.query_int("limit", LOG_CHUNK, 1, LOG_CHUNK_MAX)
        wait = self.query_int("wait", 0, 0, WAIT_MAX_SECONDS)
        worker = self.query_int("worker", 0, 0, MAX_WORKER)
        jobs = self.platform.jobs
        job = await self.blocking(jobs.get, self.project, job_id)
        log = jobs.run_dir(job), jobs.log_path(job, worker)
        if follow:
            await self.follow(job_id, log, offset)
            return
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            # the state is read before the log: an ended job has written all of it
            final = (await self.blocking(jobs.get, self.project, job_id)).is_final
            data, size = await self.blocking(read_log, *log, offset, limit)
            text, used = utf8_prefix(data, final and offset + len(data) >= size)
            done = final and offset + used >= size
            if text or done or asyncio.get_running_loop().time() >= deadline or self._closed:
                break
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
        self.reply(
            LogChunk(
                text=text,
                offset=offset,
                next_offset=offset + used,
                size=size,
                done=done,
                state=(await self.blocking(jobs.get, self.project, job_id)).state,
            )
        )

    async def follow(self, job_id: str, log: tuple[Path, Path], offset: int) -> None:
        """Stream the log from `offset` as it grows, in bounded chunks, until the job ends."""
        jobs = self.platform.jobs
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")  # proxies must not hold the stream back
        position = offset
        while not self._closed:
            data, _ = await self.blocking(read_log, *log, position, LOG_CHUNK)
            if data:
                position += len(data)
                self.write(decoder.decode(data))
                try:
                    await self.flush()
                except StreamClosedError:
                    return
                continue
            final = (await self.blocking(jobs.get, self.project, job_id)).is_final
            data, _ = await self.blocking(read_log, *log, position, 1)
            if final and not data:
                break
            if not data:
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
        if not self._closed:
            self.finish(decoder.decode(b"", final=True), set_content_type="text/plain; charset=utf-8")

    def on_connection_close(self) -> None:
        """Stop following when the client goes away."""
        super().on_connection_close()
        self._closed = True


class JobMetricsHandler(KPLHandler):
    """GET: each metric series, grouped by figure, downsampled to at most `max_points`."""

    @web.authenticated
    async def get(self, job_id: str) -> None:
        """Answer the metrics."""
        max_points = self.query_int("max_points", 1000, 2, 100_000)

        def work() -> Metrics:
            jobs = self.platform.jobs
            figures = jobs.metrics(self.project, job_id, max_points)
            return metrics_model(jobs.get(self.project, job_id), figures, max_points)

        self.reply(await self.blocking(work))


class JobProgressHandler(KPLHandler):
    """GET: the fraction done and the seconds left."""

    @web.authenticated
    async def get(self, job_id: str) -> None:
        """Answer the progress."""

        def work() -> Progress:
            jobs = self.platform.jobs
            job = jobs.get(self.project, job_id)
            progress, eta = jobs.progress(job)
            queue = jobs.queue_reason(job)
            return Progress(
                state=job.state,
                progress=progress,
                eta_seconds=eta,
                queue=queue.to_json() if queue is not None else None,
            )

        self.reply(await self.blocking(work))


class JobUsageHandler(KPLHandler):
    """GET: the job's live resource use."""

    @web.authenticated
    async def get(self, job_id: str) -> None:
        """Answer the resource use."""
        self.reply(usage_model(await self.blocking(self.platform.jobs.usage, self.project, job_id)))


class JobEventsHandler(KPLHandler):
    """POST: events of a job that shares no folder with the platform, authenticated by the job's token."""

    def check_xsrf_cookie(self) -> None:
        """Skip the cookie check: only the job's own token authenticates this route, never a cookie."""

    @allow_unauthenticated
    async def post(self, job_id: str) -> None:
        """Check the job's token, then ingest a JSON array of events."""
        scheme, _, token = self.request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        # one answer for a missing token, a wrong token and no such job: job ids are no oracle
        if (
            scheme.lower() != "token"
            or not token
            or not await self.blocking(self.platform.jobs.is_job_token, job_id, token)
        ):
            raise Forbidden(EVENTS_REFUSED)
        events = self.json_body()
        if not isinstance(events, list):
            raise BadRequest("the body must be a JSON array of events", field="body")
        try:
            accepted = await self.blocking(self.platform.jobs.ingest_events, job_id, token, events)
        except NotFound:  # deleted since the check
            raise Forbidden(EVENTS_REFUSED) from None
        self.reply(EventsAccepted(accepted=accepted if isinstance(accepted, int) else len(events)))


EVENTS_REFUSED = "posting events needs the job's own token: Authorization: token <KPL_JOB_TOKEN>"
