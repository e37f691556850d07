"""A job's log followed live or long-polled without holding a thread, and the events a job posts with its token."""

from __future__ import annotations

import asyncio
import codecs
import time
from pathlib import Path

from jupyter_server.auth.decorator import allow_unauthenticated
from tornado import web
from tornado.iostream import StreamClosedError

from ...operations.jobs import FOLLOW_POLL_SECONDS, LOG_CHUNK, answered, log_chunk, log_files, read_log
from ..base import OperationHandler


class JobLogsHandler(OperationHandler):
    """GET: a chunk of output.log (JSON; `wait` long-polls), or `follow=1` to stream it live as text.

    The operation's function waits in its thread; here the waits are the event loop's, so a
    thousand followers hold no thread of the pool.
    """

    _closed = False

    @web.authenticated
    async def get(self, job_id: str) -> None:
        """Answer a chunk of the log, or stream it."""
        arguments = self.arguments((job_id,))
        caller, offset = self.caller, arguments["offset"]
        log = await self.blocking(log_files, caller, job_id, arguments["worker"])
        if arguments["follow"]:
            await self.follow(job_id, log, offset)
            return
        deadline = time.monotonic() + arguments["wait"]
        while True:
            chunk = await self.blocking(log_chunk, caller, job_id, log, offset, arguments["limit"])
            if answered(chunk, deadline) or self._closed:
                break
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
        await self.answer(chunk)

    async def follow(self, job_id: str, log: tuple[Path, Path], offset: int) -> None:
        """Stream the log from `offset` as it grows, in bounded chunks, until the job ends."""
        jobs, project = self.platform.jobs, self.caller.project
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
            final = (await self.blocking(jobs.get, project, job_id)).is_final
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


class JobEventsHandler(OperationHandler):
    """POST: events of a job that shares no folder with the platform, authenticated by the job's token."""

    def check_xsrf_cookie(self) -> None:
        """Skip the cookie check: only the job's own token authenticates this route, never a cookie."""

    @allow_unauthenticated
    async def post(self, job_id: str) -> None:
        """Check the job's token (the operation's `check`), then ingest a JSON array of events."""
        await self.run(job_id)
