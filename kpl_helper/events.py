"""Send job events (JSON lines) to the platform: the one place that writes them.

One writer per process, chosen from the environment: append to KPL_EVENTS_FILE, or POST
JSON arrays to KPL_EVENTS_URL. Metric events are queued and flushed by a daemon thread at
most every FLUSH_INTERVAL seconds; every other event flushes the queue at once. A platform
that cannot be reached never stops the training: the writer warns once, keeps a bounded
buffer and retries with backoff.
"""

from __future__ import annotations

import atexit
import http.client
import json
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque

from kpl_helper.base import get_config, logger

FLUSH_INTERVAL = 0.5  # seconds between background flushes of queued metrics
MAX_BACKOFF = 30.0  # seconds between attempts while the platform is unreachable
FINAL_ATTEMPTS = 3  # tries at done() and at exit before giving the events up
HTTP_TIMEOUT = 5.0


def encode(event: dict) -> str:
    """Return one JSON line (no newline); non-finite floats become null, listed in "raw"."""
    try:
        return json.dumps(event, allow_nan=False, separators=(",", ":"), default=str)
    except ValueError:
        raw: dict[str, str] = {}
        clean = _finite(event, "", raw)
        clean["raw"] = raw
        return json.dumps(clean, allow_nan=False, separators=(",", ":"), default=str)


def _finite(value, path: str, raw: dict[str, str]):
    if isinstance(value, float) and not math.isfinite(value):
        raw[path] = repr(value)  # "nan", "inf" or "-inf"
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{path}.{k}" if path else str(k), raw) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{path}.{i}" if path else str(i), raw) for i, v in enumerate(value)]
    return value


class FileSink:
    """Append whole lines to the events file: one write per flush."""

    max_batch = sys.maxsize

    def __init__(self, path: str):
        self.path = os.path.abspath(path)

    def __str__(self) -> str:
        return self.path

    def send(self, lines: list[str]) -> None:
        """Append the lines with one O_APPEND write, so concurrent writers never interleave."""
        data = ("\n".join(lines) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


class HttpSink:
    """POST events as a JSON array with the job token."""

    max_batch = 5000

    def __init__(self, url: str, token: str | None):
        self.url = url
        self.token = token

    def __str__(self) -> str:
        return self.url

    def send(self, lines: list[str]) -> None:
        """POST the lines; raise OSError unless the platform answers 2xx."""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        body = ("[" + ",".join(lines) + "]").encode()
        try:
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
                response.read()
        except urllib.error.HTTPError as error:
            error.close()  # it holds the connection open
            raise OSError(f"{self.url} answered HTTP {error.code} {error.reason}") from None
        except (http.client.HTTPException, ValueError) as error:  # a malformed answer or URL
            raise OSError(f"cannot POST to {self.url!r}: {error!r}") from None


class EventWriter:
    """Queue events and deliver them to one sink, from any thread."""

    max_unsent = 100_000  # events kept while the sink is failing; the oldest are dropped first

    def __init__(self, sink: FileSink | HttpSink):
        self.sink = sink
        self._queue: deque[dict | tuple] = deque()  # append/popleft are atomic: push needs no lock
        self._unsent: list[str] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._retry_at = 0.0
        self._backoff = 0.0
        self._failing = False
        self._warned = False
        self._lost_reported = 0
        self.dropped = 0

    def push(self, event: dict | tuple) -> None:
        """Queue an event for the next background flush (cheap: no I/O, no lock).

        A tuple `(to_line, *args)` is encoded by `to_line(*args)` at flush time, off the caller's path.
        """
        self._queue.append(event)
        if self._thread is None:
            self._start_thread()

    def emit(self, event: dict, final: bool = False) -> None:
        """Queue an event and flush everything now, in the caller's thread."""
        self._queue.append(event)
        self.flush(final=final)

    def flush(self, final: bool = False) -> None:
        """Deliver what is queued; `final` retries even while backing off (done, exit)."""
        with self._lock:
            lines = self._unsent
            self._unsent = []
            queue = self._queue
            unsent_before = len(lines)
            while queue:
                item = queue.popleft()
                lines.append(encode(item) if type(item) is dict else item[0](*item[1:]))
            if not lines:
                return
            if final and self._lost_reported and unsent_before == len(lines):
                self._unsent = lines  # a final flush already failed for exactly these: do not wait again
                return
            if not final and time.monotonic() < self._retry_at:
                self._keep(lines)
                return
            attempts = FINAL_ATTEMPTS if final else 1
            for attempt in range(attempts):
                lines, error = self._deliver(lines)
                if error is None:
                    self._lost_reported = 0
                    if self._failing:
                        self._failing = False
                        self._backoff = 0.0
                        logger.info("[kpl-helper]: events reach %s again", self.sink)
                    return
                if attempt + 1 < attempts:
                    time.sleep(0.2 * 2**attempt)
            self._keep(lines)
            self._failed(error, final)

    def close(self) -> None:
        """Flush for the last time and stop the background thread."""
        self._closed = True
        self._wake.set()
        self.flush(final=True)

    def reset_after_fork(self) -> None:
        """Forget the parent's queue, lock and thread in a forked child."""
        self._queue = deque()
        self._unsent = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None

    def _deliver(self, lines: list[str]) -> tuple[list[str], OSError | None]:
        """Send in batches; return what is left unsent and why."""
        batch = self.sink.max_batch
        for start in range(0, len(lines), batch):
            try:
                self.sink.send(lines[start : start + batch])
            except OSError as error:
                return lines[start:], error
        return [], None

    def _keep(self, lines: list[str]) -> None:
        excess = len(lines) - self.max_unsent
        if excess > 0:
            self.dropped += excess
            lines = lines[excess:]
        self._unsent = lines

    def _failed(self, error: OSError, final: bool) -> None:
        self._failing = True
        self._backoff = min(MAX_BACKOFF, max(FLUSH_INTERVAL, self._backoff * 2))
        self._retry_at = time.monotonic() + self._backoff
        if final:
            if len(self._unsent) != self._lost_reported:
                self._lost_reported = len(self._unsent)
                logger.warning(
                    "[kpl-helper]: %d events could not be sent to %s: %s", len(self._unsent), self.sink, error
                )
        elif not self._warned:
            self._warned = True
            logger.warning(
                "[kpl-helper]: cannot send events to %s (%s); keeping up to %d and retrying",
                self.sink,
                error,
                self.max_unsent,
            )

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kpl-helper-events", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(FLUSH_INTERVAL)
            if self._closed:
                return
            try:
                self.flush()
            except Exception:  # the user's training must never die because of metrics
                logger.exception("[kpl-helper]: flushing events failed")


_writer: EventWriter | None = None
_writer_key: tuple | None = None
_writer_lock = threading.Lock()
_warned_no_sink = False


def get_writer() -> EventWriter | None:
    """Return the writer for the current environment, or None outside the platform."""
    global _writer, _writer_key, _warned_no_sink
    config = get_config()
    if not config.inner:
        return None
    if config.events_file:
        key = ("file", os.path.abspath(config.events_file))
    elif config.events_url:
        key = ("url", config.events_url, config.job_token)
    else:
        if not _warned_no_sink:
            _warned_no_sink = True
            logger.warning(
                "[kpl-helper]: neither KPL_EVENTS_FILE nor KPL_EVENTS_URL is set: events are not sent"
            )
        return None
    with _writer_lock:
        if key != _writer_key:
            old = _writer
            _writer = EventWriter(FileSink(key[1]) if key[0] == "file" else HttpSink(key[1], key[2]))
            _writer_key = key
            if old is not None:
                old.close()
        return _writer


def emit(event_type: str, final: bool = False, **fields) -> None:
    """Send one event now (with everything queued before it); nothing outside the platform."""
    writer = get_writer()
    if writer is not None:
        writer.emit({"type": event_type, "time": time.time(), **fields}, final=final)


def flush() -> None:
    """Deliver every queued event now."""
    if _writer is not None:
        _writer.flush()


def _flush_at_exit() -> None:
    if _writer is not None:
        _writer.close()


def _after_fork_in_child() -> None:
    if _writer is not None:
        _writer.reset_after_fork()


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)
