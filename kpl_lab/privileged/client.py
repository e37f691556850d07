"""The platform's side of the privileged helper: one call, one connection."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from .protocol import ProtocolError, Reader, send

CONNECT_SECONDS = 30.0  # an answer to anything but a spawn's end comes at once


class HelperError(OSError):
    """The helper refused (`denied`) or could not do what it was asked; the message says why."""

    def __init__(self, message: str, denied: bool = False, number: int | None = None) -> None:
        super().__init__(number, message) if number else super().__init__(message)
        self.denied = denied

    def __str__(self) -> str:
        return self.strerror if self.errno else super().__str__()


class HelperProcess:
    """A process the helper started: its pid, start time and limits; its exit code arrives on the connection."""

    def __init__(self, connection: socket.socket, reader: Reader, answer: dict) -> None:
        self._connection: socket.socket | None = connection
        self._reader = reader
        self.pid: int = answer["pid"]
        self.start: int | None = answer.get("start")
        self.limits: dict | None = answer.get("limits")
        self.returncode: int | None = None

    def fileno(self) -> int:
        """Return what becomes readable when the process ended (for select)."""
        return self._connection.fileno() if self._connection is not None else -1

    def poll(self) -> int | None:
        """Return the exit code once the process ended, else None (never blocks)."""
        if self.returncode is None and self._connection is not None:
            self._connection.setblocking(False)
            try:
                self._end(self._reader.read())
            except (BlockingIOError, InterruptedError):
                pass
            except (OSError, ProtocolError):
                self._end(None)
        return self.returncode

    def wait(self) -> int:
        """Wait for the process to end; return its exit code (-1 when the helper went away first)."""
        if self.returncode is None and self._connection is not None:
            self._connection.setblocking(True)
            try:
                self._end(self._reader.read())
            except (OSError, ProtocolError):
                self._end(None)
        return self.returncode if self.returncode is not None else -1

    def _end(self, message: dict | None) -> None:
        self.returncode = message["exit"] if message and isinstance(message.get("exit"), int) else -1
        self.close()

    def close(self) -> None:
        """Stop listening for the exit code (the process runs on)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> HelperProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class HelperClient:
    """Ask the helper listening at `path`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)

    def _connect(self) -> socket.socket:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(CONNECT_SECONDS)
        try:
            connection.connect(self.path)
        except OSError as error:
            connection.close()
            raise HelperError(
                f"the platform's privileged helper at {self.path} does not answer: {error}"
            ) from None
        return connection

    def call(self, command: str, **arguments) -> dict:
        """Send one command and return its answer, or raise HelperError."""
        with contextlib.closing(self._connect()) as connection:
            send(connection, {"command": command, **arguments})
            return _answer(Reader(connection).read(), command)["ok"]

    def spawn(
        self,
        who: dict,
        argv: list[str],
        env: dict[str, str],
        cwd: str | Path,
        stdio: tuple[int, int, int] | None = None,
        limits: dict | None = None,
        session: bool = False,
    ) -> HelperProcess:
        """Start a process as `who` ({"user", "projects"} or {"sandbox"}); return it once it runs."""
        connection = self._connect()
        try:
            request = {
                "command": "spawn",
                "as": who,
                "argv": argv,
                "env": env,
                "cwd": str(cwd),
                "limits": limits,
                "session": session,
            }
            send(connection, request, list(stdio) if stdio else [])
            reader = Reader(connection)
            answer = _answer(reader.read(), "spawn")
        except BaseException:
            connection.close()
            raise
        connection.settimeout(None)
        return HelperProcess(connection, reader, answer)

    def runs_as(self, user: str, project: str) -> dict:
        """Ready the account a process of `user` in `project` runs as; return its `as`, `account` and `helper`.

        With no user (work the platform starts itself: a pipeline's algorithm node, an evaluation),
        the project's sandbox account: it sees the project's storage, no one's home.
        """
        if not user:
            sandbox = self.project(project)["sandbox"]
            return {
                "as": {"sandbox": project},
                "account": {"name": sandbox, "home": "/nonexistent"},
                "helper": self.path,
            }
        account = self.account(user)
        self.projects(user, [project], exact=False)
        return {
            "as": {"user": user, "projects": [project]},
            "account": {"name": account["account"], "home": account["home"]},
            "helper": self.path,
        }

    def account(self, user: str) -> dict:
        """Make (or find) a user's account, home and workspace."""
        return self.call("account", user=user)

    def projects(self, user: str, projects: list[str], exact: bool = True) -> dict:
        """Make the user's account a member of these projects' groups (`exact`: of no other)."""
        return self.call("projects", user=user, projects=projects, exact=exact)

    def project(self, project: str) -> dict:
        """Make a project's group, folder and sandbox account."""
        return self.call("project", project=project)

    def link(self, user: str, project: str) -> dict:
        """Point the user's workspace/datasets at the project's datasets."""
        return self.call("link", user=user, project=project)

    def give(
        self, who: dict, path: str | Path, project: str | None = None, mode: int | None = None, keep=()
    ) -> dict:
        """Give a folder the platform made (and what it holds, but `keep`) to `who`."""
        arguments = {"to": who, "path": str(path), "project": project, "keep": list(keep)}
        if mode is not None:
            arguments["mode"] = mode
        return self.call("give", **arguments)

    def adopt(self, project: str, path: str | Path) -> dict:
        """Take a folder a project's sandbox staged back as the platform's."""
        return self.call("adopt", project=project, path=str(path))

    def signal(self, who: dict, pid: int, start: int | None, number: int) -> bool:
        """Signal a process group of `who`'s; say whether it was there to signal."""
        return self.call("signal", **{"as": who, "pid": pid, "start": start, "signal": int(number)})[
            "signalled"
        ]

    def release(self, limits: dict) -> None:
        """Kill what is left in a process's cgroups and remove them."""
        if limits and limits.get("paths"):
            self.call("release", limits=limits)


def _answer(message: dict | None, command: str) -> dict:
    if message is None:
        raise HelperError(f"the privileged helper closed the connection without answering {command}")
    if "error" in message:
        number = message.get("errno")
        raise HelperError(
            str(message["error"]),
            denied=bool(message.get("denied")),
            number=number if isinstance(number, int) else None,
        )
    return message
