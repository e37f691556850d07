"""Start job supervisors by forking a small process that has them already imported.

Starting a supervisor as a new Python costs a second interpreter start before every
job (tens of milliseconds, more on a busy machine). Instead, each process that
launches local jobs (the Jupyter server, the CLI) starts one forkserver, lazily, at
its first launch: `python -S` with `kpl_lab.engine.supervisor` imported and nothing
else. It is a fresh process started with exec, never a fork of the server, so it
holds no threads, database connections or locks that a fork could copy in a bad state.

For each job the launcher sends one JSON line over a Unix socket pair (run folder,
arguments, its current environment and working directory). A spare supervisor, forked
and rehearsed while the forkserver was idle (`Spare`), reads it from the socket itself
and replies; without one the forkserver prepares the job's start (command, environment,
cgroups: work that would cost more in a fresh child, which copies every page it
touches), then forks. The
supervisor points stdin/stdout at /dev/null and stderr at the run folder's
`supervisor.log` and starts the job before anything else. With `ForkServer.prepare` the request
comes before the run folder exists (the job and its supervision in the line, the read
end of a "go" pipe alongside): the child waits for go (`Pending.go`) before it touches
the run folder, or leaves when the pipe closes without it (`Pending.abort`, a launcher
gone). The reply, the supervisor's pid and start time, comes once the job started.
Supervisors hold no end of the socket, so they outlive the forkserver and the server,
as before.

Once it served a first job and idles, it imports that job's callbacks module (`_preload`:
site-packages, SQLAlchemy, the platform), which every supervisor otherwise imports at its
first tick: a short job's end is then recorded about a second sooner. Only imports: it
still holds no thread or connection when it forks.

The forkserver exits when the launcher's end of the socket closes (the server
exited). A launcher whose forkserver died starts a new one and asks again; when it
cannot, `ForkServerError` tells the caller to start the supervisor the slow way.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import gc
import json
import mmap
import os
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path

from .limits import cgroup_name, remove_cgroups
from .runfolder import APPEND, open_in, process_start_time

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])  # the folder holding kpl_lab/
# `python -S -c BOOTSTRAP PACKAGE_PARENT FD`: serve on the inherited socket, without site-packages
BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from kpl_lab.engine.forkserver import serve; serve(int(sys.argv[1]))"
)
REPLY_SECONDS = 60.0  # the first reply waits for the forkserver's own start
REAP_SECONDS = 1.0  # how often ended supervisors are reaped while no request comes
START_SECONDS = 10.0  # the longest a reply waits for the supervisor to start its job
SPARE_SECONDS = 0.1  # how long the forkserver idles before it forks a spare supervisor


class ForkServerError(Exception):
    """The forkserver could not start a supervisor."""


class ForkServer:
    """The launcher's side: start the forkserver when first needed, ask it to start supervisors."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self.process: subprocess.Popen | None = None
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """Return the forkserver's pid, None before it started."""
        return self.process.pid if self.process is not None else None

    def spawn(self, run_dir: Path, adopt: bool = False) -> dict:
        """Start the supervisor of a run folder (`adopt`: of a running job); return its {"pid", "start"}.

        A dead forkserver is replaced and the request repeated once; if the first one had
        forked already, the second supervisor finds the run folder claimed and exits.
        """
        request = {
            "run_dir": str(Path(run_dir).absolute()),
            "adopt": adopt,
            "env": dict(os.environ),  # what a new process would inherit now
            "cwd": os.getcwd(),
        }
        payload = json.dumps(request).encode() + b"\n"
        with self._lock:
            for attempt in (1, 2):
                try:
                    self._ensure_started()
                    self._socket.sendall(payload)
                    reply = self._read_reply()
                    break
                except (OSError, ValueError, ForkServerError) as error:
                    self._discard()
                    if attempt == 2:
                        raise ForkServerError(f"the forkserver is unavailable: {error}") from error
        if "error" in reply:
            raise ForkServerError(reply["error"])
        return reply

    def prepare(self, run_dir: Path, job: dict, supervision: dict) -> Pending:
        """Fork the supervisor of a run folder still to be made, its job's start prepared; it waits for `go`.

        `job` and `supervision` are what job.json and supervisor.json will hold. Until
        `Pending.go` (or `abort`) this launcher's forkserver serves nobody else. No retry:
        a launcher whose forkserver failed here makes the run folder and calls `spawn`.
        """
        request = {
            "run_dir": str(Path(run_dir).absolute()),
            "adopt": False,
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "job": job,
            "supervision": supervision,
        }
        payload = json.dumps(request).encode() + b"\n"
        wait, go = os.pipe()  # the supervisor waits on `wait`; a close of `go` without a byte aborts
        self._lock.acquire()
        try:
            self._ensure_started()
            _send_with_fds(self._socket, payload, [wait])
        except (OSError, ValueError, ForkServerError) as error:
            self._discard()
            self._lock.release()
            os.close(go)
            raise ForkServerError(f"the forkserver is unavailable: {error}") from error
        except BaseException:
            self._lock.release()
            os.close(go)
            raise
        finally:
            os.close(wait)
        return Pending(self, go)

    def close(self) -> None:
        """Let the forkserver exit (supervisors it started keep running)."""
        with self._lock:
            self._discard()

    def _ensure_started(self) -> None:
        if self._socket is not None and self.process.poll() is None:
            return
        self._discard()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.process = subprocess.Popen(
                [self.python, "-S", "-c", BOOTSTRAP, PACKAGE_PARENT, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C meant for the server does not reach it
            )
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
        mine.settimeout(REPLY_SECONDS)
        self._socket = mine

    def _read_reply(self) -> dict:
        data = b""
        while not data.endswith(b"\n"):
            chunk = self._socket.recv(4096)
            if not chunk:
                raise ForkServerError("the forkserver exited")
            data += chunk
        return json.loads(data)

    def _discard(self) -> None:
        if self._socket is not None:
            self._socket.close()  # the forkserver sees the end of its input and exits
            self._socket = None
        if self.process is not None:
            if self.process.poll() is None:
                try:
                    self.process.wait(timeout=1)
                except subprocess.TimeoutExpired:  # hung: it cannot be trusted with the next job
                    self.process.kill()
                    self.process.wait()
            self.process = None


class Pending:
    """A supervisor forked ahead of its run folder: tell it to start its job, or to leave."""

    def __init__(self, server: ForkServer, go: int) -> None:
        self.server = server
        self._go: int | None = go

    def go(self) -> dict:
        """Let the supervisor start its job (the run folder is in place); return its {"pid", "start"}."""
        return self._end(b"g")

    def abort(self) -> dict:
        """Make the supervisor exit without starting anything; it removes the cgroups it made."""
        return self._end(b"")

    def _end(self, word: bytes) -> dict:
        if self._go is None:
            raise ForkServerError("already told")
        try:
            if word:
                with contextlib.suppress(BrokenPipeError):  # a supervisor that never forked: see the reply
                    os.write(self._go, word)
            os.close(self._go)
            self._go = None
            try:
                reply = self.server._read_reply()
            except (OSError, ValueError, ForkServerError) as error:
                self.server._discard()
                raise ForkServerError(f"the forkserver is unavailable: {error}") from error
        finally:
            self.server._lock.release()
        if "error" in reply:
            raise ForkServerError(reply["error"])
        return reply


_shared: dict[str, ForkServer] = {}
_shared_lock = threading.Lock()


def shared(python: str = sys.executable) -> ForkServer:
    """Return this process's forkserver for `python` (one per server process, started on first use)."""
    with _shared_lock:
        if python not in _shared:
            _shared[python] = ForkServer(python)
        return _shared[python]


def _after_fork_in_child() -> None:
    """Leave the parent's forkservers to the parent: a forked copy starts its own when it needs one."""
    global _shared_lock
    _shared_lock = threading.Lock()
    for server in _shared.values():
        if server._socket is not None:
            server._socket.close()  # our copy only: the parent's end stays open
        server.process, server._socket, server._lock = None, None, threading.Lock()


def _close_all() -> None:
    """Let this process's forkservers exit with it (they would on their own, a moment later)."""
    for server in list(_shared.values()):
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C at exit: its socket is closed already
            server.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)


# the forkserver's side


def serve(fd: int) -> None:
    """Answer spawn requests on the socket `fd` until the launcher closes its end.

    While a spare supervisor waits, the spare reads the next request from the socket and
    replies itself (no hop through this process); this process waits for it to be done.
    """
    from .supervisor import configure_logging

    configure_logging()  # once: the children inherit it (their stderr is their supervisor.log)
    gc.freeze()  # children never scan (and so never copy) the objects imported above
    channel = socket.socket(fileno=fd)
    pending, fds = b"", []
    spare: Spare | None = None
    rehearsal: bytes | None = None  # the last job's request, for the next spare to rehearse
    preloaded = False  # the first job's callbacks module (`_preload`)
    while True:
        if spare is not None:
            readable, _, _ = select.select([spare.link], [], [], REAP_SECONDS)
            _reap()
            if readable:
                served, spare = spare.end(), None
                if served is None:  # it died part-way through a request: the launcher starts anew
                    return
                rehearsal = served or rehearsal
            continue
        while b"\n" not in pending:
            readable, _, _ = select.select([channel], [], [], SPARE_SECONDS)
            _reap()
            if readable:
                chunk, received = receive(channel, 65536)
                if not chunk:
                    return  # the launcher is gone: supervisors already started run on
                pending += chunk
                fds += received
            elif not pending:
                if rehearsal is not None and not preloaded:
                    preloaded = True
                    _preload(json.loads(rehearsal))
                    continue
                spare = Spare.fork(channel, rehearsal)
                if spare is not None:
                    break
        if spare is not None:
            continue
        line, _, pending = pending.partition(b"\n")
        request = json.loads(line)
        wait = None
        if "job" in request:
            wait = fds.pop(0) if fds else None
            rehearsal = line
        try:
            pid = _fork_supervisor(request, channel, wait)
            reply = {"pid": pid, "start": process_start_time(pid)}
        except Exception as error:  # e.g. fork refused (EAGAIN): the launcher falls back
            reply = {"error": f"{type(error).__name__}: {error}"}
        channel.sendall(json.dumps(reply).encode() + b"\n")


def _preload(request: dict) -> None:
    """Import the callbacks module a job's supervision names, for the supervisors forked after.

    A supervisor imports it at its first tick, with site-packages (SQLAlchemy, pydantic: about
    a second of CPU); one whose job ended first records the end only after that. Imported here
    once, while idle after a first job, it costs later supervisors nothing: their fork shares it.
    """
    from .supervisor import import_callbacks_module

    spec = (request.get("supervision") or {}).get("callbacks")
    if spec:
        with contextlib.suppress(Exception):
            import_callbacks_module(spec)
            gc.freeze()


def _reap() -> None:
    """Collect the exit status of ended supervisors (they are this process's children)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class Spare:
    """A supervisor forked ahead of any request, while the forkserver is idle, waiting for its job.

    It reads the next request from the launcher's socket itself and replies once the job
    started: its start costs no fork, none of the first writes to pages a fork shares
    (page faults in a child), and no hop through the forkserver. Once the job's handle is
    written it hands the socket back to the forkserver through its link, with the request
    for the next spare's rehearsal. A shared byte (`state`) says how far it got, for the
    forkserver to tell a spare killed while waiting (it reads the socket again) from one
    killed part-way through a request. It exits when the forkserver does.
    """

    WAITING, TAKING, REPLIED = 0, 1, 2

    def __init__(self, pid: int, link: socket.socket, state: mmap.mmap) -> None:
        self.pid = pid
        self.link = link
        self.state = state

    @classmethod
    def fork(cls, channel: socket.socket, rehearsal: bytes | None) -> Spare | None:
        """Fork a spare supervisor; None when the fork failed (requests are then forked for)."""
        state = mmap.mmap(-1, 1)  # shared with the child: anonymous and MAP_SHARED
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError:
            for end in (mine, theirs):
                end.close()
            return None
        if pid:
            theirs.close()
            return cls(pid, mine, state)
        try:
            mine.close()
            _quiet_stdio()
            os.setsid()  # now, not after the job's start, where it would take the job's CPU
            pid = os.getpid()
            answer = json.dumps({"pid": pid, "start": process_start_time(pid)}).encode() + b"\n"
            ahead = _rehearse(json.loads(rehearsal)) if rehearsal is not None else []
            readable, _, _ = select.select([channel, theirs], [], [])
            state[0] = cls.TAKING
            line, wait = (None, None) if theirs in readable else _receive(channel)
            if line is None:  # the forkserver or the launcher is gone
                for limits in ahead:
                    limits.remove()
                os._exit(0)
            request = json.loads(line)

            def reply() -> None:
                """Answer the launcher; the spare reads no more from the socket."""
                channel.sendall(answer)
                state[0] = cls.REPLIED
                channel.close()

            def hand_back() -> None:
                """Wake the forkserver with the request to rehearse, once the job's start is behind us.

                Right at the reply it would take the CPU of a job still in its exec; until
                then a next request waits in the socket (the launcher commits meanwhile).
                """
                with contextlib.suppress(OSError):
                    theirs.sendall((line if "job" in request else b"") + b"\n")
                theirs.close()

            supervisor = _prepared(request, ahead)
            log = None if wait is not None else _open_log(request["run_dir"])
            _supervise(request, supervisor, wait, log, reply, hand_back)  # never returns
        finally:
            os._exit(1)  # only a failure gets here

    def end(self) -> bytes | None:
        """Read what the spare handed back: the request it served (b"" for none), None when it died mid-request."""
        data = b""
        with contextlib.suppress(OSError):
            while not data.endswith(b"\n") and (chunk := self.link.recv(65536)):
                data += chunk
        self.link.close()
        state = self.state[0]
        self.state.close()
        if state == self.WAITING:  # killed while it waited: its cgroups made ahead are left
            for worker in (None, "*"):
                remove_cgroups(cgroup_name(_rehearsal_id(self.pid), worker))
        if state == self.TAKING:
            return None
        return data[:-1] if state == self.REPLIED and data.endswith(b"\n") else b""


def _send_with_fds(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    """Send all of `data`, the descriptors with its first bytes (one sendmsg may not take it all)."""
    sent = socket.send_fds(sock, [data], fds)
    sock.sendall(data[sent:])


def _rehearse(request: dict) -> list:
    """Prepare a copy of an earlier job's start under a name of its own; return its cgroups to take over.

    The real start then finds the pages it writes copied already and its code in the
    caches: in a forked child, first writes are page faults (about 1 ms per start). Its
    cgroups are kept when the next start can rename them (`JobLimits.renamable`), else removed.
    """
    job = dict(request["job"], job_id=_rehearsal_id(os.getpid()))
    with contextlib.suppress(Exception):
        supervisor = _prepared(dict(request, job=job))
        if supervisor is not None:
            ahead = supervisor.limits()
            if ahead and all(limits.renamable for limits in ahead):
                return ahead
            supervisor.discard()
    return []


def _rehearsal_id(pid: int) -> str:
    """Return the job id a spare rehearses under (its cgroups are named after it)."""
    return f"rehearsal-{pid}"


def receive(link: socket.socket, size: int) -> tuple[bytes, list[int]]:
    """Read up to `size` bytes and the descriptor sent with them, close-on-exec: no job inherits it.

    Not `socket.recv_fds`: Python 3.11's ignores its `flags`, and its descriptors are inheritable.
    """
    space = socket.CMSG_LEN(array.array("i").itemsize)
    chunk, ancillary, _, _ = link.recvmsg(size, space, socket.MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return chunk, list(fds)


def _receive(link: socket.socket) -> tuple[bytes | None, int | None]:
    """Read one request line, and the go pipe sent with it, from the forkserver; None at its exit."""
    data, wait = b"", None
    while not data.endswith(b"\n"):
        chunk, fds = receive(link, 1 << 20)
        if fds:
            wait = fds[0]
        if not chunk:
            return None, None
        data += chunk
    return data[:-1], wait


def _quiet_stdio() -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def _open_log(run_dir: str) -> int:
    return open_in(Path(run_dir), "supervisor.log", APPEND)


def _prepared(request: dict, ahead: list | None = None):
    """Return the request's supervisor with its job's start prepared, or None to leave it all to `run`.

    In the forkserver, before the fork, it costs less than in a forked child, which first
    copies every page it touches (a spare rehearses it instead); a run folder that cannot
    be read is the supervisor's to report.
    """
    from .launch import JobLaunch
    from .supervisor import Supervisor

    supervisor = None
    with contextlib.suppress(Exception):
        if "job" in request:  # the run folder is still to come
            supervisor = Supervisor(
                Path(request["run_dir"]), JobLaunch.from_json(request["job"]), request["supervision"]
            )
        elif not request["adopt"]:
            supervisor = Supervisor(Path(request["run_dir"]))
    if supervisor is None:
        for limits in ahead or ():
            limits.remove()
        return None
    supervisor.prepare(request["env"], ahead)
    return supervisor


def _fork_supervisor(request: dict, channel: socket.socket, wait: int | None) -> int:
    """Fork a supervisor for the request and return its pid (the child never returns).

    `wait`: for a run folder still to come, the pipe on which the launcher says go (a
    byte) or abort (closed without one); the supervisor touches the run folder only
    after go. For a prepared job the reply waits until the supervisor started it (or
    could not, or left): the launcher, whose work after the reply (the commit, the next
    spare run folder) would take a CPU from the supervisor, waits without one meanwhile.
    """
    try:
        supervisor = _prepared(request)
    except BaseException:
        if wait is not None:
            os.close(wait)
        raise
    log = _open_log(request["run_dir"]) if wait is None else None
    started, starting = os.pipe() if supervisor is not None and supervisor.ready is not None else (None, None)
    try:
        pid = os.fork()
    except BaseException:
        for end in (log, wait, started, starting):
            if end is not None:
                os.close(end)
        if supervisor is not None:
            supervisor.discard()
        raise
    if pid:
        for end in (log, wait):
            if end is not None:
                os.close(end)
        if starting is not None:
            os.close(starting)
            select.select([started], [], [], START_SECONDS)  # readable at the child's close (or exit)
            os.close(started)
        return pid
    try:
        channel.close()  # only the forkserver and the launcher hold the socket
        if started is not None:
            os.close(started)
        _quiet_stdio()
        _supervise(request, supervisor, wait, log, None if starting is None else lambda: os.close(starting))
    finally:
        os._exit(1)


def _supervise(request: dict, supervisor, wait: int | None, log: int | None, started, handed=None) -> None:
    """In a forked supervisor: wait for go (`wait`), then supervise the job and exit (never returns).

    `log`: supervisor.log, opened already when the run folder was; `started`: called
    once the job started (a prepared one) or at once (anything else), for the reply;
    `handed`: once its handle is written (`Supervisor.run`'s `after_handle`).
    """
    run_dir = request["run_dir"]
    prepared = supervisor is not None and supervisor.ready is not None
    code = 1
    try:
        if wait is not None:
            if not os.read(wait, 1):  # aborted, or the launcher died: leave nothing behind
                if supervisor is not None:
                    supervisor.discard()
                for call in (started, handed):
                    if call is not None:
                        with contextlib.suppress(OSError):
                            call()
                os._exit(0)
            os.close(wait)
            log = _open_log(run_dir)
        os.dup2(log, 2)
        os.close(log)

        def settle() -> None:
            """Become a process of its own: a session, the launcher's folder and environment."""
            if os.getsid(0) != os.getpid():  # a spare has a session of its own already
                os.setsid()
            os.chdir(request["cwd"])
            env = request["env"]
            for key in os.environ.keys() - env.keys():
                del os.environ[key]
            for key, value in env.items():  # mostly what it was: set only what changed
                if os.environ.get(key) != value:
                    os.environ[key] = value

        def after_handle() -> None:
            if prepared:
                settle()
            if handed is not None:
                handed()

        from .supervisor import supervise

        if not prepared:  # an unprepared job builds its environment from this process's
            if started is not None:
                started()
            settle()
        # a prepared job's reply is all that comes between its spawn and its exec (the job's
        # child has to wait for the CPU this process takes then); the rest comes after its handle
        supervise(
            Path(run_dir),
            adopt=request["adopt"],
            supervisor=supervisor,
            after_start=started if prepared else None,
            after_handle=after_handle,
        )
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # exiting: nowhere left to report it
                stream.flush()
        os._exit(code)
