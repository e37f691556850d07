"""The logs an administrator searches: the platform's own (rotated files) and each job's and replica's output.

The host writes its log to `<home>/logs/<host>.log` as JSON lines (time, level, logger,
message, and user and project where a record names them), rotated at `max_bytes` with
`backups` older files: its size is bounded. Jobs' and replicas' output stays where it is, in
their run folders (`output.log`); the catalog says whose each one is and when it ran, so a
search reads only the files of the projects, users and times asked for, each from its end,
at most `FILE_BYTES` of a file and `SCAN_BYTES` in all. A line is text matched as text
(case-insensitive substring): nothing in it is parsed but the platform's own JSON lines.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from traitlets import Integer
from traitlets.config import LoggingConfigurable

from ..api.monitoring import LogLine, LogSearch
from ..catalog.deployments import Deployment, Replica
from ..catalog.jobs import Job
from ..catalog.models import Project
from ..catalog.serialize import utc
from ..engine.runfolder import open_in

FOLDER = "logs"
FILE_BYTES = 4 << 20  # of one job's or replica's output, read from its end
SCAN_BYTES = 64 << 20  # read by one search at most
LINE_CHARS = 2000  # a matched line is cut to this
LOGGERS = ("kpl_lab", "tornado", "KPLService", "ServerApp")  # the platform's, the web server's, the hosts'
SOURCES = ("platform", "job", "deployment")


class JsonLines(logging.Formatter):
    """Write a record as one JSON object: time, level, logger, message, and its user and project if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("user", "project"):
            value = getattr(record, key, None)
            if value:
                entry[key] = str(value)
        if record.exc_info:
            entry["message"] += "\n" + self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class PlatformLogs(LoggingConfigurable):
    """The host's rotated log file, and the search over it and the jobs' and replicas' output."""

    max_bytes = Integer(10 << 20, help="Size at which the platform's log file is rotated.").tag(config=True)
    backups = Integer(5, help="Rotated platform log files kept (the oldest goes).").tag(config=True)

    def __init__(self, platform: Any, **kwargs: Any) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self.folder = Path(platform.home) / FOLDER
        self._handler: logging.Handler | None = None
        self._loggers: list[logging.Logger] = []

    def start(self, host: str, loggers: tuple[str, ...] = LOGGERS) -> Path:
        """Write the host's log (and these loggers') to `<home>/logs/<host>.log`, rotated; return the file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{host}.log"
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=self.max_bytes, backupCount=self.backups, encoding="utf-8"
        )
        handler.setFormatter(JsonLines())
        handler.setLevel(logging.INFO)
        self._handler = handler
        for name in dict.fromkeys(loggers):  # each logger once
            logger = logging.getLogger(name)
            logger.addHandler(handler)
            if name.startswith("kpl_lab") and logger.level == logging.NOTSET:
                logger.setLevel(logging.INFO)  # ours; a host's own loggers keep the level it was given
            self._loggers.append(logger)
        return path

    def stop(self) -> None:
        """Stop writing the log file."""
        if self._handler is not None:
            for logger in self._loggers:
                logger.removeHandler(self._handler)
            self._handler.close()
            self._handler = None
            self._loggers = []

    # searching

    def search(
        self,
        source: str = "platform",
        text: str = "",
        project: str = "",
        user: str = "",
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 200,
    ) -> LogSearch:
        """Return the lines that match, newest files first, within the search's bounds."""
        search = _Search(text, limit)
        if source == "platform":
            for path in self._platform_files():
                search.platform_file(path, project, user, since, until)
                if search.done:
                    break
        else:
            for name, owner, who, ran, run_dir in self._outputs(source, project, user, since, until):
                search.output(source, name, owner, who, ran, run_dir)
                if search.done:
                    break
        return LogSearch(lines=search.lines, scanned_bytes=search.scanned, truncated=search.done)

    def _platform_files(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        files = [p for p in self.folder.iterdir() if p.is_file() and ".log" in p.name]
        return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)

    def _outputs(
        self, source: str, project: str, user: str, since: datetime | None, until: datetime | None
    ) -> Iterator[tuple[str, str, str, datetime | None, Path]]:
        """Yield (name, project, user, when it ran, run folder) of the jobs or local replicas asked for."""
        with self.platform.session() as session:
            if source == "job":
                query = select(Job).join(Project)
                if project:
                    query = query.where(Project.name == project)
                if user:
                    query = query.where(Job.user == user)
                if since is not None:
                    query = query.where(or_(Job.finished.is_(None), Job.finished >= since))
                if until is not None:
                    query = query.where(Job.created < until)
                jobs = list(session.scalars(query.order_by(Job.created.desc()).limit(1000)))
                found = [
                    (j.id, j.project.name, j.user, utc(j.finished or j.started or j.created), j) for j in jobs
                ]
            else:
                query = select(Replica, Deployment, Project.name).join(Deployment).join(Project)
                if project:
                    query = query.where(Project.name == project)
                if user:
                    query = query.where(Deployment.user == user)
                if until is not None:
                    query = query.where(Replica.created < until)
                found = [
                    (f"{name}/{d.name}/{r.id}", name, d.user, utc(r.created), r)
                    for r, d, name in session.execute(query.order_by(Replica.created.desc()).limit(1000))
                    if "kubernetes" not in (r.handle or {})
                ]
        for name, owner, who, ran, row in found:
            if source == "job":
                run_dir = self.platform.jobs.run_dir(row)
            else:
                run_dir = self.platform.deployments.run_dir(row)
            yield name, owner, who, ran, run_dir


class _Search:
    """The lines found so far and the bytes read, against the search's bounds."""

    def __init__(self, text: str, limit: int) -> None:
        self.text = text.casefold()
        self.limit = limit
        self.lines: list[LogLine] = []
        self.scanned = 0

    @property
    def done(self) -> bool:
        return len(self.lines) >= self.limit or self.scanned >= SCAN_BYTES

    def _match(self, line: str) -> bool:
        return not self.text or self.text in line.casefold()

    def platform_file(
        self, path: Path, project: str, user: str, since: datetime | None, until: datetime | None
    ) -> None:
        """Add the matching lines of one platform log file, newest first."""
        for line in reversed(self._tail(path, SCAN_BYTES)):
            try:
                entry = json.loads(line)
                when = datetime.fromisoformat(entry["time"])
                message = str(entry.get("message", ""))
            except (ValueError, KeyError, TypeError):
                continue  # not one of ours (a line written before the file was JSON lines)
            if since is not None and when < since or until is not None and when >= until:
                continue
            if project and entry.get("project") != project or user and entry.get("user") != user:
                continue
            text = f"{entry.get('level', '')} {entry.get('logger', '')}: {message}"
            if self._match(text):
                self._add("platform", path.name, entry.get("project", ""), entry.get("user", ""), when, text)
                if self.done:
                    return

    def output(
        self, source: str, name: str, project: str, user: str, ran: datetime | None, run_dir: Path
    ) -> None:
        """Add the matching lines of one job's or replica's output, last lines first."""
        for line in reversed(self._tail(run_dir / "output.log", FILE_BYTES, run_dir)):
            if self._match(line):
                self._add(source, name, project, user, ran, line)
                if self.done:
                    return

    def _add(self, source: str, name: str, project: str, user: str, when: datetime | None, line: str) -> None:
        self.lines.append(
            LogLine(source=source, name=name, project=project, user=user, time=when, line=line[:LINE_CHARS])
        )

    def _tail(self, path: Path, most: int, run_dir: Path | None = None) -> list[str]:
        """Return the whole lines of a file's last `most` bytes (within what the search may still read)."""
        most = min(most, SCAN_BYTES - self.scanned)
        try:
            opened = open_in(run_dir, path.relative_to(run_dir)) if run_dir else os.open(path, os.O_RDONLY)
        except (OSError, ValueError):  # gone, unreadable, or a link the platform does not follow
            return []
        with open(opened, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - most)
            handle.seek(start)
            data = handle.read(most)
        self.scanned += len(data)
        lines = data.decode("utf-8", "replace").splitlines()
        return lines[1:] if start and lines else lines
