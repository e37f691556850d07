"""The privileged helper: `python -m kpl_lab.privileged.helper --home H --service-account kpl`.

Run as root by `kpl-lab up`, it listens on `<home>/run/helper.sock` (root, group of the
service account, 0660 in a 0750 folder) and serves only the service account and root
(SO_PEERCRED). One connection, one request, one JSON line each way (`protocol.py`), but for
`spawn`, whose connection stays open until the process ends and then carries its exit code.

Commands (checks in `rules.py`):
- `account {user}`: the user's OS account (made on first use, with home and workspace);
- `projects {user, projects}`: make the account a member of exactly these projects' groups;
- `project {project}`: the project's group, folder (the service account's, group-readable)
  and sandbox account;
- `link {user, project}`: the user's `workspace/datasets` points at the project's datasets;
- `give {to, project, path, mode, keep}`: a folder the platform made becomes the user's (or
  the project's sandbox's), group: the service account's, so the platform still reads it;
- `adopt {project, path}`: a staged folder a sandbox wrote becomes the platform's again;
- `spawn {as, argv, env, cwd, limits, session}` + stdin/out/err: start a process as a user
  in her projects' groups (or a sandbox), under new cgroup limits; answers pid, start time
  and the limits, then the exit code;
- `signal {as, pid, start, signal}`: signal a process group, as its own account;
- `release {limits}`: kill what is left in a process's cgroups and remove them.
"""

from __future__ import annotations

import argparse
import contextlib
import grp
import logging
import os
import pwd
import signal as signals
import socket
import stat
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from ..engine import identity
from ..engine.limits import CGROUP_ROOT, JobLimits
from ..engine.runfolder import process_start_time
from . import rules
from .protocol import ProtocolError, Reader, send
from .rules import Denied, Settings

log = logging.getLogger("kpl_lab.privileged")

SOCKET_NAME = "helper.sock"
LIMIT_NAME = rules.re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
USER_FOLDER_MODE = 0o2770  # a given folder: the user's, the platform reads and writes through its group
_accounts = threading.Lock()  # one account or group change at a time (useradd and friends lock /etc)


def socket_path(home: str | Path) -> Path:
    """Return where the helper of a platform home listens."""
    return Path(home) / "run" / SOCKET_NAME


class Helper:
    """The commands, each checked; one instance serves every connection."""

    def __init__(self, settings: Settings, cgroup_root: Path = CGROUP_ROOT) -> None:
        self.settings = settings
        self.cgroup_root = cgroup_root
        self.note = identity.owner_note(settings.home)

    # accounts, groups, folders

    def account(self, request: dict) -> dict:
        """Make (or find) a user's account, her home and workspace; answer its names and ids."""
        user = rules.user_name(request.get("user"))
        name = identity.account_name(user, self.settings.prefix)
        home = self.settings.users_dir / user
        with _accounts:
            self.settings.users_dir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.settings.users_dir, 0o711)  # each reaches her own home; nobody lists them
            try:
                account = identity.ensure_account(name, home, self.note)
            except identity.AccountTaken as error:
                raise Denied(str(error)) from None
        workspace = home / "workspace"
        if self._as(account.pw_uid, account.pw_gid, lambda: os.makedirs(workspace, 0o770, exist_ok=True)):
            raise Denied(f"{workspace}: could not be made as {name}")
        return {
            "account": name,
            "uid": account.pw_uid,
            "gid": account.pw_gid,
            "home": str(home),
            "workspace": str(workspace),
        }

    def projects(self, request: dict) -> dict:
        """Make a user's account a member of her projects' groups (`exact`: of no other); answer their gids."""
        name = identity.account_name(rules.user_name(request.get("user")), self.settings.prefix)
        rules.existing_account(name)
        projects = request.get("projects")
        if not isinstance(projects, list):
            raise Denied("projects: expected a list of project names")
        projects = sorted({rules.project_name(p) for p in projects})
        for project in projects:
            self.project({"project": project})
        with _accounts:
            gids = identity.sync_groups(
                name, projects, self.settings.prefix, exact=request.get("exact", True)
            )
        return {"gids": dict(zip(projects, gids, strict=True))}

    def project(self, request: dict) -> dict:
        """Make a project's group, folder and sandbox account; answer the group's gid."""
        project = rules.project_name(request.get("project"))
        group = identity.group_name(project, self.settings.prefix)
        sandbox = rules.sandbox_account(project, self.settings.prefix)
        with _accounts:
            gid = identity.ensure_group(group)
            try:
                identity.ensure_account(
                    sandbox, Path("/nonexistent"), self.note, "/usr/sbin/nologin", make_home=False
                )
            except identity.AccountTaken as error:
                raise Denied(str(error)) from None
            if sandbox not in grp.getgrgid(gid).gr_mem:
                identity.sync_groups(sandbox, [project], self.settings.prefix)
        self.settings.projects_dir.mkdir(parents=True, exist_ok=True)
        identity.secure_project(self.settings.projects_dir / project, gid, self.settings.service_uid)
        return {"group": group, "gid": gid, "sandbox": sandbox}

    def link(self, request: dict) -> dict:
        """Point the user's `workspace/datasets` at her project's datasets (made as her, no link followed)."""
        user = rules.user_name(request.get("user"))
        project = rules.project_name(request.get("project"))
        account = rules.existing_account(identity.account_name(user, self.settings.prefix))
        rules.member_gid(account.pw_name, project, self.settings.prefix)
        target = str(self.settings.projects_dir / project / "datasets")
        workspace = self.settings.users_dir / user / "workspace"

        def point() -> None:
            link = workspace / "datasets"
            if link.is_symlink() and os.readlink(link) == target:
                return
            if link.exists() and not link.is_symlink():
                return  # her own folder of that name: left as it is
            temporary = workspace / f".datasets-{uuid.uuid4().hex[:8]}"
            os.symlink(target, temporary, target_is_directory=True)
            os.replace(temporary, link)

        if self._as(account.pw_uid, account.pw_gid, point):
            raise Denied(f"{workspace / 'datasets'}: could not be made as {account.pw_name}")
        return {"link": str(workspace / "datasets")}

    def give(self, request: dict) -> dict:
        """Make a folder the platform made, and what it holds, the user's (or a sandbox's); group: the platform's."""
        who = rules.process_identity(request.get("to"), self.settings)
        project = request.get("project")
        project = rules.project_name(project) if project is not None else None
        mode = request.get("mode", USER_FOLDER_MODE)
        if not isinstance(mode, int) or mode & ~0o2770:
            raise Denied(f"mode {mode!r}: at most 2770")
        keep = request.get("keep", [])
        if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
            raise Denied("keep: expected a list of file names")
        found, target = rules.folder_fd(request.get("path"), self.settings, project)
        try:
            fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=found)
        finally:
            os.close(found)
        try:
            group = self.settings.service_gid
            self._chown_tree(
                fd, who.uid, group, set(keep), self.settings.service_uid, USER_FOLDER_MODE, 0o660
            )
            os.fchown(fd, who.uid, group)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        return {"path": str(target)}

    def adopt(self, request: dict) -> dict:
        """Make a folder staged by a project's sandbox (and what it holds) the platform's again."""
        project = rules.project_name(request.get("project"))
        path = request.get("path")
        staging = self.settings.projects_dir / project / ".staging"
        if not isinstance(path, str) or Path(os.path.normpath(path)).parent != staging:
            raise Denied(f"path {path!r}: not a staged folder of project {project!r}")
        sandbox = rules.existing_account(rules.sandbox_account(project, self.settings.prefix))
        gid = rules.member_gid(sandbox.pw_name, project, self.settings.prefix)
        fd = os.open(staging, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_uid != self.settings.service_uid:
                raise Denied(f"{staging}: not the platform's folder")
            inner = os.open(
                Path(path).name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
        finally:
            os.close(fd)
        try:
            if os.fstat(inner).st_uid not in (sandbox.pw_uid, self.settings.service_uid):
                raise Denied(f"{path}: not staged by project {project!r}'s sandbox")
            self._chown_tree(inner, self.settings.service_uid, gid, set(), sandbox.pw_uid, 0o2750, 0o440)
            os.fchown(inner, self.settings.service_uid, gid)
            os.fchmod(inner, 0o2750)
        finally:
            os.close(inner)
        return {"path": path}

    def _chown_tree(
        self, fd: int, uid: int, gid: int, keep: set[str], only: int, folders: int, files: int
    ) -> None:
        """Give everything below folder `fd` that `only` owns to uid:gid, following no link; `keep` stays (top level).

        Folders get mode `folders`, files `files` (their execute bits kept for owner and group).
        """
        for entry in os.listdir(fd):
            found = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if found.st_uid != only or entry in keep:
                continue
            if stat.S_ISLNK(found.st_mode):
                os.chown(entry, uid, gid, dir_fd=fd, follow_symlinks=False)
            elif stat.S_ISDIR(found.st_mode):
                inner = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    self._chown_tree(inner, uid, gid, set(), only, folders, files)
                    os.fchown(inner, uid, gid)
                    os.fchmod(inner, folders)
                finally:
                    os.close(inner)
            elif stat.S_ISREG(found.st_mode):
                opened = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
                try:
                    os.fchown(opened, uid, gid)
                    os.fchmod(opened, (found.st_mode & 0o111 & ~0o001) | files)
                finally:
                    os.close(opened)
            else:
                raise Denied(f"{entry}: not a plain file or folder")

    # processes

    def spawn(self, request: dict, fds: list[int], connection: socket.socket) -> None:
        """Start a process as a user (or sandbox) under its limits; answer its pid, then its exit code."""
        who = rules.process_identity(request.get("as"), self.settings)
        argv = rules.argv(request.get("argv"))
        env = rules.environment(request.get("env"))
        cwd = request.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise Denied("cwd: expected an absolute path")
        if len(fds) not in (0, 3):
            raise Denied("send stdin, stdout and stderr, or none")
        limits = self._limits(request.get("limits"))
        session = bool(request.get("session", False))
        try:
            with limits.starting() if limits else contextlib.nullcontext() as enter:
                process = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=fds[0] if fds else subprocess.DEVNULL,
                    stdout=fds[1] if fds else subprocess.DEVNULL,
                    stderr=fds[2] if fds else subprocess.DEVNULL,
                    preexec_fn=_preexec(who, enter, session),
                    restore_signals=True,
                )
        except BaseException:
            if limits is not None:
                limits.remove()
            raise
        finally:
            for fd in fds:
                os.close(fd)
        log.info("started %s as %s (pid %d)", argv[0], who.user, process.pid)
        with contextlib.suppress(OSError):
            send(
                connection,
                {
                    "pid": process.pid,
                    "start": process_start_time(process.pid),
                    "limits": limits.to_json() | {"memory_mb": limits.memory_mb, "cpu": limits.cpu}
                    if limits
                    else None,
                },
            )
        code = process.wait()
        with contextlib.suppress(OSError):  # its caller may be gone: the code is lost with it
            send(connection, {"exit": code})

    def _limits(self, spec: object) -> JobLimits | None:
        if spec is None:
            return None
        if not isinstance(spec, dict):
            raise Denied("limits: expected {'name', 'memory_mb', 'cpu'}")
        name, memory, cpu = spec.get("name"), spec.get("memory_mb"), spec.get("cpu")
        if not isinstance(name, str) or not LIMIT_NAME.fullmatch(name):
            raise Denied(f"limits.name {name!r}: not a cgroup name")
        if not isinstance(memory, int) or not 1 <= memory <= 1 << 30:
            raise Denied(f"limits.memory_mb {memory!r}: expected MB, at least 1")
        if not isinstance(cpu, (int, float)) or not 0 < cpu <= 4096:
            raise Denied(f"limits.cpu {cpu!r}: expected CPUs, more than 0")
        return JobLimits.create(
            name, memory, float(cpu), use_cgroups=self.settings.use_cgroups, root=self.cgroup_root
        )

    def signal(self, request: dict) -> dict:
        """Signal a process group as its own account (the kernel checks it is hers); say whether it was there."""
        who = rules.process_identity(request.get("as"), self.settings)
        pid, start, number = request.get("pid"), request.get("start"), request.get("signal")
        if not isinstance(pid, int) or pid <= 1:
            raise Denied(f"pid {pid!r}: not a process")
        if number not in rules.SIGNALS:
            raise Denied(f"signal {number!r}: not one the platform sends")
        leader = process_start_time(pid)
        if leader is not None and start is not None and leader != start:
            return {"signalled": False}  # another process has that pid now
        code = self._as(who.uid, who.gid, lambda: os.killpg(pid, number))
        return {"signalled": code == 0}

    def release(self, request: dict) -> dict:
        """Kill what is left in a process's cgroups and remove them."""
        limits = request.get("limits")
        paths = rules.cgroup_paths(limits, self.cgroup_root)
        released = JobLimits(memory_mb=1, cpu=1.0, version=int(limits.get("version") or 0))
        released.paths = {str(i): path for i, path in enumerate(paths)}
        released.release()
        return {"released": [str(path) for path in paths]}

    @staticmethod
    def _as(uid: int, gid: int, work) -> int:
        """Run `work` in a child that is this account (its own group only); answer its exit code (0: done).

        What it makes is the account's and the kernel checks what it may do: no link a user put
        in her folders, no process of another account, is reached with root's rights.
        """
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
                os.umask(identity.USERS_UMASK)
                work()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    COMMANDS = ("account", "projects", "project", "link", "give", "adopt", "signal", "release")


def _preexec(who: identity.Identity, enter, session: bool):
    """Return the child's step before exec: join its limits, its own group or session, become the user."""

    def preexec() -> None:
        if enter is not None:
            enter()
        if session:
            os.setsid()
        else:
            os.setpgid(0, 0)
        who.become()

    return preexec


def peer_uid(connection: socket.socket) -> int:
    """Return the uid of the process at the other end of a Unix socket."""
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", credentials)[1]


def serve_one(helper: Helper, connection: socket.socket) -> None:
    """Answer one connection's request."""
    reader = Reader(connection)
    fds: list[int] = []
    try:
        if peer_uid(connection) not in (0, helper.settings.service_uid):
            raise Denied("only the platform's account may ask")
        request = reader.read()
        fds = reader.take_fds()
        if request is None:
            return
        command = request.get("command")
        if command == "spawn":
            fds, taken = [], fds
            helper.spawn(request, taken, connection)
            return
        if command not in Helper.COMMANDS:
            raise Denied(f"command {command!r}: unknown")
        send(connection, {"ok": getattr(helper, command)(request)})
    except (Denied, ProtocolError) as error:
        log.warning("refused: %s", error)
        with contextlib.suppress(OSError):
            send(connection, {"error": str(error), "denied": True})
    except OSError as error:  # e.g. a program that is not there, or not executable by its user
        log.warning("failed: %s", error)
        with contextlib.suppress(OSError):
            send(connection, {"error": str(error), "errno": error.errno})
    except Exception as error:
        log.exception("failed")
        with contextlib.suppress(OSError):
            send(connection, {"error": f"{type(error).__name__}: {error}"})
    finally:
        for fd in fds:
            os.close(fd)
        connection.close()


def listen(path: Path, service_gid: int) -> socket.socket:
    """Return the listening socket at `path`: its folder root's, group the service's, 0750; the socket 0660."""
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, 0, service_gid)
    os.chmod(folder, 0o750)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chown(path, 0, service_gid)
    os.chmod(path, 0o660)
    server.listen(64)
    return server


def serve(helper: Helper, server: socket.socket, stop: threading.Event) -> None:
    """Accept connections until `stop`, each on a thread of its own."""
    server.settimeout(0.5)
    while not stop.is_set():
        try:
            connection, _ = server.accept()
        except TimeoutError:
            continue
        connection.settimeout(None)
        threading.Thread(target=serve_one, args=(helper, connection), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    """Serve one platform home until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m kpl_lab.privileged.helper")
    parser.add_argument("--home", required=True, help="the platform home")
    parser.add_argument("--storage", help="its storage root (default <home>/storage)")
    parser.add_argument("--service-account", required=True, help="the platform's system account")
    parser.add_argument("--account-prefix", default=identity.USER_PREFIX)
    parser.add_argument("--socket", help=f"where to listen (default <home>/run/{SOCKET_NAME})")
    parser.add_argument("--no-cgroups", dest="cgroups", action="store_false")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("kpl-lab helper: must run as root", file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="kpl-lab helper: %(message)s")
    service = pwd.getpwnam(args.service_account)
    home = Path(args.home).absolute()
    settings = Settings(
        home=home,
        storage=Path(args.storage or home / "storage").absolute(),
        service_uid=service.pw_uid,
        service_gid=service.pw_gid,
        prefix=args.account_prefix,
        use_cgroups=args.cgroups,
    )
    server = listen(Path(args.socket) if args.socket else socket_path(home), service.pw_gid)
    stop = threading.Event()
    for number in (signals.SIGTERM, signals.SIGINT):
        signals.signal(number, lambda *_: stop.set())
    print("kpl-lab helper: ready", file=sys.stderr, flush=True)
    try:
        serve(Helper(settings), server, stop)
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
