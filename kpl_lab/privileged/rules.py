"""What the helper may be asked: whose process, which groups, which folders, which cgroups.

Every request names people and projects by their platform names (a hub user, a project); the
helper maps them to OS accounts and groups itself (`kpl_lab.engine.identity`), so the platform's
account can never name root, itself or any account outside the platform's prefixes. A
process is started only as an account of a user (or a project's sandbox account), only in
groups of projects that account is a member of (/etc/group, which only the helper writes).
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..engine import identity
from ..engine.limits import PARENT as CGROUP_PARENT
from ..engine.runfolder import Refused, open_folder

USER_NAME = re.compile(r"[^/\x00]{1,255}")  # a hub user: no slash (it names a folder under users/)
PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # the catalog's NAME_PATTERN
SIGNALS = {signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, 0}
SOCKET_FOLDER_PREFIX = "kpl-replica-"  # replicas' socket folders in the temporary folder
MAX_ARGV = 4096
MAX_ENV = 1024


class Denied(Exception):
    """A request the helper refuses; the message says which argument and why."""


@dataclass(frozen=True)
class Settings:
    """What the helper serves: one platform home, its storage, its service account, its names."""

    home: Path
    storage: Path
    service_uid: int
    service_gid: int
    prefix: str = identity.USER_PREFIX
    use_cgroups: bool = True

    @property
    def users_dir(self) -> Path:
        return self.home / "users"

    @property
    def projects_dir(self) -> Path:
        return self.storage / "projects"


def user_name(value: object) -> str:
    """Return a hub user's name, or refuse it."""
    if not isinstance(value, str) or not USER_NAME.fullmatch(value) or value in (".", ".."):
        raise Denied(f"user {value!r}: not a user name")
    return value


def project_name(value: object) -> str:
    """Return a project's name, or refuse it."""
    if not isinstance(value, str) or not PROJECT_NAME.fullmatch(value) or ".." in value:
        raise Denied(f"project {value!r}: not a project name")
    return value


def sandbox_prefix(prefix: str) -> str:
    """Return the prefix of projects' sandbox accounts that goes with users' (kpl- -> kpls-)."""
    return prefix.rstrip("-") + "s-"


def sandbox_account(project: str, prefix: str) -> str:
    """Return the OS account that runs a project's sandboxed work (imports, pipelines, previews)."""
    return identity.unix_name(project, sandbox_prefix(prefix))


def existing_account(name: str) -> pwd.struct_passwd:
    """Return an account the helper made (it must exist: `account` makes it first)."""
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise Denied(f"account {name}: does not exist yet") from None
    if account.pw_uid == 0:
        raise Denied(f"account {name}: is root")
    return account


def member_gid(account: str, project: str, prefix: str) -> int:
    """Return the gid of a project's group that `account` is a member of, or refuse."""
    name = identity.group_name(project, prefix)
    try:
        group = grp.getgrnam(name)
    except KeyError:
        raise Denied(f"project {project!r}: its group {name} does not exist yet") from None
    if account not in group.gr_mem:
        raise Denied(f"account {account} is not a member of project {project!r} ({name})")
    return group.gr_gid


def process_identity(who: object, settings: Settings) -> identity.Identity:
    """Return whom a process runs as: {"user", "projects"} or {"sandbox": project}; refuse anything else."""
    if not isinstance(who, dict):
        raise Denied("as: expected {'user': NAME, 'projects': [...]} or {'sandbox': PROJECT}")
    if "sandbox" in who:
        project = project_name(who["sandbox"])
        name = sandbox_account(project, settings.prefix)
        projects = [project]
    else:
        name = identity.account_name(user_name(who.get("user")), settings.prefix)
        projects = who.get("projects")
        if not isinstance(projects, list) or len(projects) > 1000:
            raise Denied("as.projects: expected a list of project names")
        projects = [project_name(p) for p in projects]
    account = existing_account(name)
    if account.pw_uid == settings.service_uid:
        raise Denied(f"account {name}: is the platform's own account")
    gids = sorted({member_gid(name, project, settings.prefix) for project in projects})
    return identity.Identity(name, account.pw_uid, account.pw_gid, gids, account.pw_dir)


def ours(account: str, settings: Settings) -> bool:
    """Say whether an OS account is one of the platform's users' or sandboxes' (by its prefix)."""
    return account.startswith((settings.prefix, sandbox_prefix(settings.prefix)))


def argv(value: object) -> list[str]:
    """Return a command line to execute, or refuse it."""
    if (
        not isinstance(value, list)
        or not value
        or len(value) > MAX_ARGV
        or not all(isinstance(a, str) and "\x00" not in a for a in value)
    ):
        raise Denied("argv: expected a non-empty list of strings")
    return value


def environment(value: object) -> dict[str, str]:
    """Return an environment to start a process with, or refuse it (its content is the caller's allowlist)."""
    if not isinstance(value, dict) or len(value) > MAX_ENV:
        raise Denied("env: expected an object of strings")
    for key, item in value.items():
        if not isinstance(item, str) or not key or "=" in key or "\x00" in key + item:
            raise Denied(f"env: {key!r} is not a variable")
    return value


def folder_fd(path: object, settings: Settings, project: str | None) -> tuple[int, Path]:
    """Return a descriptor of a folder the platform made, where it may give or take back folders.

    Under `<storage>/projects/<project>/`, every folder on the way the service account's own
    and no link; or a replica's socket folder directly in the temporary folder.
    """
    if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
        raise Denied(f"path {path!r}: expected an absolute path")
    target = Path(os.path.normpath(path))
    temporary = Path(tempfile.gettempdir())
    if target.parent == temporary and target.name.startswith(SOCKET_FOLDER_PREFIX):
        base, relative = temporary, Path(target.name)
    else:
        if project is None:
            raise Denied(f"path {path}: names no project")
        base = settings.projects_dir / project
        try:
            relative = target.relative_to(base)
        except ValueError:
            raise Denied(f"path {path}: not inside project {project!r}'s storage") from None
        if not relative.parts:
            raise Denied(f"path {path}: the project's folder itself")
    try:
        fd = open_folder(base, relative, owner=settings.service_uid)
    except Refused as error:
        raise Denied(f"path {path}: {error}") from None
    if fd is None:
        raise Denied(f"path {path}: no such folder")
    return fd, target


def cgroup_paths(limits: object, root: Path) -> list[Path]:
    """Return the cgroup folders of a process's limits, each a job's folder under `<root>[/controller]/kpl-lab/`."""
    if not isinstance(limits, dict):
        raise Denied("limits: expected the limits a spawn answered")
    paths = limits.get("paths") or {}
    if not isinstance(paths, dict):
        raise Denied("limits.paths: expected an object")
    found = []
    for value in paths.values():
        path = Path(os.path.normpath(str(value)))
        if (
            path.parent.name != CGROUP_PARENT
            or root not in path.parents
            or not path.name
            or ".." in path.parts
        ):
            raise Denied(f"limits: {value} is not a cgroup of the platform's")
        found.append(path)
    return found
