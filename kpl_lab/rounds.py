"""The platform's background rounds: the one place that starts queued jobs, drives experiments and keeps replicas.

Both hosts of the platform run them: the hub's service and a single-user Jupyter server
(the platform inside it). A round: the host's first steps (the hub's groups' quotas loaded
into the rules), then jobs (supervisors checked, other executors polled, queued jobs started
with the rules in the database), experiments (report, prune, finish and start trials),
deployments (replicas whose supervisor died started again), then the host's last steps (the
gateway's request metrics, the usage history). It runs every `interval` seconds, and at once
when something wakes it: a job's supervisor that recorded its end, a command of `kpl-lab`
that queued a job (`wake`), over a datagram socket in the home, `<home>/rounds/wake.sock`.

Nothing else schedules. Supervisors and commands wake the host; a command that finds no host
on its home runs one round itself (`run_unless_hosted`), with the same rules.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from collections.abc import Callable
from logging import Logger, getLogger
from pathlib import Path
from typing import Any

FOLDER = "rounds"
SOCKET = "wake.sock"
STOP_SECONDS = 60.0  # the longest a host's stop waits for the round under way

Step = Callable[[], Any]


def wake_path(home: str | os.PathLike) -> Path:
    """Return where the host of a platform home listens for wakes."""
    return Path(home) / FOLDER / SOCKET


def wake(home: str | os.PathLike) -> bool:
    """Ask the host of a home for a round now; False when no host listens (nothing schedules there)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        try:
            sender.sendto(b"!", str(wake_path(home)))
        except BlockingIOError:
            return True  # its queue is full: a round is coming anyway
        except OSError:  # no socket (ENOENT), or nobody bound to it (ECONNREFUSED)
            return False
    return True


def hosted(home: str | os.PathLike) -> bool:
    """Say whether a host runs the rounds of a home now (asking it nothing)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(str(wake_path(home)))
        except OSError:
            return False
    return True


class Rounds:
    """Run the platform's rounds: on a timer and on wakes (a host), or once (a command with no host)."""

    def __init__(
        self,
        platform: Any,
        first: list[Step] | None = None,
        last: list[Step] | None = None,
        log: Logger | None = None,
    ) -> None:
        self.platform = platform
        self.first, self.last = list(first or ()), list(last or ())
        self.log = log or getLogger("kpl_lab.rounds")
        self._socket: socket.socket | None = None

    def run(self) -> None:
        """Run one round now, in this thread; a step that fails is logged and the others run."""
        steps = [
            *self.first,
            self.platform.jobs.tick,
            self.platform.experiments.tick,
            self._deployments,
            *self.last,
        ]
        for step in steps:
            try:
                step()
            except Exception:
                self.log.exception("kpl_lab: a step of the background round failed (%s)", _name(step))

    def _deployments(self) -> None:
        restarted = self.platform.deployments.reconcile()
        if restarted:
            self.log.warning("kpl_lab: restarted replicas whose supervisor was gone: %s", restarted)

    # a host

    def start(self, interval: float) -> None:
        """Host the platform: run a round every `interval` seconds and on each wake, on a thread of its own."""
        self.interval = interval
        self.platform.hosting = True
        path = wake_path(self.platform.home)
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by a host that was killed
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(path))
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kpl-rounds", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            readable, _, _ = select.select([self._socket], [], [], self.interval)
            if readable:  # every wake that came counts as one
                with contextlib.suppress(OSError):
                    while self._socket.recv(64, socket.MSG_DONTWAIT):
                        pass
            if not self._stopping.is_set():
                self.run()

    def stop(self) -> None:
        """Stop hosting: the round under way ends first; the home's socket goes."""
        if self._socket is None:
            return
        self._stopping.set()
        wake(self.platform.home)
        self._thread.join(timeout=STOP_SECONDS)
        self._socket.close()
        self._socket = None
        self.platform.hosting = False
        with contextlib.suppress(FileNotFoundError):
            wake_path(self.platform.home).unlink()

    # a command

    def run_unless_hosted(self) -> bool:
        """Wake the home's host, or, when none listens, run one round here; say whether a host took it."""
        if wake(self.platform.home):
            return True
        self.platform.jobs.reconcile()  # what ended while nothing watched it, first
        self.run()
        return False


def _name(step: Step) -> str:
    return getattr(step, "__qualname__", None) or repr(step)
