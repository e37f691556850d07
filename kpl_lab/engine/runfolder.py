"""The run folder shared by the local executor, its supervisors and the job: files and pids.

Kept free of heavy imports: every supervisor imports it before starting its job.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from . import environment
from .devices import VISIBLE_DEVICES_VARIABLE
from .launch import JobLaunch

HOST = "host"  # status.json's `recorder` when the platform's host records the end (`left_to_host`)
SAVE_EVENT = b'"type":"save"'  # as kpl_helper writes a save event (compact JSON)


def write_atomic(
    path: Path, text: str, durable: bool = True, within: Path | None = None, mode: int = 0o666
) -> None:
    """Write a file through a temporary name and a rename, so readers never see half of it.

    `durable=False` skips the fsync, for files that matter only while this machine stays up.
    The temporary file is new (O_EXCL, a random name): a link a job's user put in her run
    folder is never written through. With `within` (her run folder), no link is followed
    from there down to the file's folder either (`open_folder`; missing folders are made).
    """
    tmp = f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    if within is None:
        folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        folder = open_folder(within, path.parent.relative_to(within), make=True)
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder
        )
        with open(fd, "w") as out:
            out.write(text)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        os.close(folder)


def open_folder(base: Path, relative: str | Path, make: bool = False, owner: int | None = None) -> int | None:
    """Return a descriptor (O_PATH) of folder `base/relative`, following no symbolic link from `base` on.

    Missing folders below `base` are made when `make`, else the answer is None. With
    `owner`, every folder below `base` must be that account's. A link or a file on the way,
    `base` included, or a folder of another account raises `Refused` naming it. The caller
    closes the descriptor.
    """
    try:
        fd = os.open(base, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(f"{base} is a symbolic link or a file, not a folder") from None
        raise
    try:
        for part in Path(relative).parts:
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                inner = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                if make:
                    raise
                os.close(fd)
                return None
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{part} is a symbolic link or a file, not a folder") from None
                raise
            os.close(fd)
            fd = inner
            if owner is not None and os.fstat(fd).st_uid != owner:
                raise Refused(f"{part} was made by another account")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_in(folder: Path, relative: str | Path, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """Open a file of a run folder (`logs/worker-1.log`, say) following no symbolic link; return its descriptor.

    A job's run folder is its user's, so anything in it may be a link she put there: the
    platform, which may be root, opens what it reads or appends to there through this, and
    a link on the way (the folder itself, a subfolder, the file) or a file that is no plain
    file (a FIFO would block) raises `Refused`. Subfolders missing on the way are made when
    `flags` has O_CREAT.
    """
    relative = Path(relative).relative_to(folder) if Path(relative).is_absolute() else Path(relative)
    shown = folder / relative
    try:
        parent = open_folder(folder, Path(*relative.parts[:-1]), make=bool(flags & os.O_CREAT))
    except Refused as error:
        raise Refused(f"{shown}: {error} (no link is followed in run folders)") from None
    if parent is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(shown))
    try:
        opened = os.open(
            relative.name, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent
        )
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise Refused(f"{shown}: a symbolic link (no link is followed in run folders)") from None
        # what opening a FIFO with no reader, a socket or a folder for writing gives
        if error.errno in (errno.ENXIO, errno.EISDIR):
            raise Refused(f"{shown}: not a plain file") from None
        raise
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(opened).st_mode):
        os.close(opened)
        raise Refused(f"{shown}: not a plain file")
    if flags & (os.O_WRONLY | os.O_RDWR):
        os.set_blocking(opened, True)
    return opened


APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT  # the flags of a log opened to append to


class Refused(OSError):
    """A run folder's file was reached through a symbolic link, or is no plain file: not opened."""


def read_json(path: Path) -> dict | None:
    """Return a JSON file's object, or None when it does not exist (yet)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def read_own_json(path: Path) -> dict | None:
    """Return a JSON file's object when this account wrote it: a plain file it owns, not a link.

    None when it does not exist or is not ours. For files that say what the platform does as
    itself (whom to start, which process to stop) in folders its users may write around: they
    can replace such a file, never with one of the platform's account. Its mode is not checked:
    the platform's umask decides it (027 under `kpl-lab up`), as for every file it writes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # no wait on a FIFO
    except FileNotFoundError:
        return None
    except OSError as error:  # a symbolic link (ELOOP), or not readable
        if error.errno == errno.ELOOP:
            return None
        raise
    with open(fd, closefd=True) as file:
        found = os.fstat(fd)
        if found.st_uid != os.geteuid() or not stat.S_ISREG(found.st_mode):
            return None
        return json.load(file)


def left_to_host(run_dir: Path) -> dict | None:
    """Return a job's status.json when its supervisor left the end for the platform's host to record."""
    status = read_own_json(run_dir / "status.json")
    return status if status is not None and status.get("recorder") == HOST else None


def registers_nothing(run_dir: Path, outputs: Iterable[str]) -> bool:
    """Say whether a job's end registers nothing: its output folders are empty and it asked for no save.

    A hint of who records the end (`Supervisor._record`), not a rule: a save it misses is registered all the same.
    """
    try:
        for key in outputs:
            with contextlib.suppress(FileNotFoundError), os.scandir(run_dir / "outputs" / key) as found:
                if next(found, None) is not None:
                    return False
        fd = open_in(run_dir, "events.jsonl")
    except FileNotFoundError:
        return True
    except OSError:  # a link or no folder, of the job's user: left to the usual recording
        return False
    tail = b""
    with open(fd, "rb") as events:
        while chunk := events.read(1 << 20):
            if SAVE_EVENT in tail + chunk:
                return False
            tail = chunk[-len(SAVE_EVENT) :]
    return True


def process_start_time(pid: int) -> int | None:
    """Return a process's start time (clock ticks since boot), or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as proc:
            fields = proc.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])  # field 22 of stat, counted after the name


_started: dict[int, int | None] = {}


def this_process() -> list[int | None]:
    """Return this process's pid and start time, as stored in handles to say who starts a job."""
    pid = os.getpid()  # a forked supervisor is another process: keyed by pid, not cached once
    if pid not in _started:
        _started[pid] = process_start_time(pid)
    return [pid, _started[pid]]


def is_alive(pid: int | None, start_time: int | None) -> bool:
    """Return whether the process with this pid is still the one started at `start_time`."""
    return pid is not None and start_time is not None and process_start_time(pid) == start_time


def job_environment(
    launch: JobLaunch, base: dict[str, str] | None = None, passed: Iterable[str] = ()
) -> dict[str, str]:
    """Return the job's environment (docs/job-contract.md): its contract over what `base` may pass on.

    `base` is the launching process's environment (default: this one's); only the allowlist of
    `kpl_lab.engine.environment`, and the names in `passed`, reach the job.
    """
    env = environment.passed(base, passed)
    run_dir = launch.run_dir
    env.update(
        {
            "KPL_INNER": "1",
            "KPL_ENV": "job",
            "KPL_ENV_TASK_ID": launch.job_id,
            "KPL_ENV_FUNCTION": launch.function,
            "KPL_ENV_INPUT_ROOT_PATH": str(run_dir / "inputs"),
            "KPL_ENV_OUTPUT_ROOT_PATH": str(run_dir / "outputs"),
            "KPL_ENV_PARAMETER": json.dumps(launch.parameters),
            "KPL_PARAMETER_FILE": str(run_dir / "parameter.yml"),
            "KPL_EVENTS_FILE": str(run_dir / "events.jsonl"),
            "KPL_RUN_DIR": str(run_dir),
            "PYTHONUNBUFFERED": "1",  # logs reach output.log as they are printed
        }
    )
    for kind, variable in VISIBLE_DEVICES_VARIABLE.items():
        env[variable] = ",".join(str(i) for i in launch.assigned_devices.get(kind, []))
    env.update(launch.env)
    return env


def worker_log(run_dir: Path, rank: int) -> Path:
    """Return the log of one worker: output.log for rank 0, logs/worker-N.log for the others."""
    return run_dir / "output.log" if rank == 0 else run_dir / "logs" / f"worker-{rank}.log"


def worker_environment(env: dict[str, str], launch: JobLaunch, rank: int, port: int) -> dict[str, str]:
    """Return one worker's environment: torch.distributed's variables on loopback, its share of the devices."""
    workers = launch.limits.workers
    env = {
        **env,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "WORLD_SIZE": str(workers),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(workers),
    }
    for kind, variable in VISIBLE_DEVICES_VARIABLE.items():
        indexes = worker_devices(launch, rank).get(kind, [])
        env[variable] = ",".join(str(i) for i in indexes)
    return env


def worker_devices(launch: JobLaunch, rank: int) -> dict[str, list[int]]:
    """Return the device indexes of one worker: its equal share of the job's, in rank order."""
    workers = launch.limits.workers
    shares = {}
    for kind, indexes in launch.assigned_devices.items():
        share = len(indexes) // workers if workers > 1 else len(indexes)
        shares[kind] = list(indexes[rank * share : (rank + 1) * share])
    return shares
