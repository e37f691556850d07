"""Users and projects as OS accounts and groups, and dropping a process to one user.

A hub user runs as the account `account_name(hub name)` (created on first use, as
JupyterHub's `LocalAuthenticator.create_system_users` does); a project is the group
`group_name(project)`, and project storage is readable and writable only through it.
The mapping keeps a valid Unix name as it is (`alice` -> `kpl-alice`) and escapes any
other (`Alice.Smith@lab` -> `kpl-alice-smith-lab--<hash>`): an escaped name always holds
`--` and a kept one never does, so two hub names never share an account.

Kept free of heavy imports: the job supervisor imports it before starting its job.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

NAME_MAX = 32  # useradd's limit on Linux
HASH_LENGTH = 12  # hex digits of sha256: 48 bits against collisions between escaped names
USER_PREFIX = "kpl-"
USERS_UMASK = 0o007  # users' files: readable and writable by their project group, nobody else
# A project's folder and the folders in it are root's, the group reads them (setgid: what is made
# inside is the group's). Only `datasets/` takes the members' writes (notebooks write datasets
# there), sticky: a member renames only what she made. A member who could rename the platform's
# folders could put a link in their place and have root write or read through it.
PROJECT_MODE = 0o2750
SHARED_FOLDERS = {"datasets": 0o3770}
# the service's and the gateway's hub tokens and OAuth settings: a job must not act as the platform
PLATFORM_VARIABLES = ("JUPYTERHUB_", "KPL_GATEWAY_API_TOKEN")
_KEPT = re.compile(r"[a-z0-9_][a-z0-9_-]*")  # after the prefix: a digit may come first
_UNSAFE = re.compile(r"[^a-z0-9_]+")
_accounts_lock = threading.Lock()  # useradd/groupadd lock /etc/passwd and refuse when it is taken


def group_prefix(user_prefix: str = USER_PREFIX) -> str:
    """Return the prefix of project groups that goes with a prefix of user accounts (kpl- -> kplp-)."""
    return user_prefix.rstrip("-") + "p-"


def unix_name(name: str, prefix: str) -> str:
    """Return the Unix name of a hub user or project: prefix + the name, escaped when not valid as is."""
    room = NAME_MAX - len(prefix)
    if _KEPT.fullmatch(name) and "--" not in name and len(name) <= room:
        return prefix + name
    digest = hashlib.sha256(name.encode()).hexdigest()[:HASH_LENGTH]
    readable = _UNSAFE.sub("-", name.lower()).strip("-")[: room - HASH_LENGTH - 2].rstrip("-")
    return f"{prefix}{readable}--{digest}"


def account_name(user: str, prefix: str = USER_PREFIX) -> str:
    """Return the OS account of a hub user."""
    return unix_name(user, prefix)


def group_name(project: str, prefix: str = USER_PREFIX) -> str:
    """Return the OS group of a project."""
    return unix_name(project, group_prefix(prefix))


@dataclass
class Identity:
    """Who a process runs as: account, uid, gid, supplementary groups and home."""

    user: str
    uid: int
    gid: int
    groups: list[int] = field(default_factory=list)
    home: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> Identity | None:
        return cls(**data) if data else None

    def become(self) -> None:
        """Drop this process to the identity for good (groups, then gid, then uid) with the users' umask."""
        os.setgroups(self.groups)
        os.setgid(self.gid)
        os.setuid(self.uid)
        os.umask(USERS_UMASK)

    def job_env(self, env: dict[str, str]) -> dict[str, str]:
        """Return a job's environment as this identity: its names and home, no platform credentials."""
        kept = {key: value for key, value in env.items() if not key.startswith(PLATFORM_VARIABLES)}
        return kept | {"USER": self.user, "LOGNAME": self.user, "HOME": self.home}

    def preexec(self, enter_limits: Callable[[], None] | None) -> Callable[[], None]:
        """Return the child's step before exec: join the job's limits (as root), then become the user.

        `enter_limits` is None where the child is born under its limits (cgroup v1): it only
        drops to the user then.
        """

        def preexec() -> None:
            if enter_limits is not None:
                enter_limits()
            self.become()

        return preexec

    def own(self, *files: int | Path) -> None:
        """Give what the supervisor (root) made in the identity's run folder to it: open files, or paths (links not followed)."""
        for file in files:
            os.chown(
                file,
                self.uid,
                self.groups[0] if self.groups else self.gid,
                follow_symlinks=isinstance(file, int),
            )


SBIN = ("/usr/sbin", "/sbin")


def _run(argv: list[str], exists_code: int) -> None:
    """Run useradd/groupadd/gpasswd; an account or group made meanwhile by another process is fine."""
    # root's PATH may lack the sbin folders (`sudo` without secure_path, `env -i`, a service unit)
    found = shutil.which(argv[0], path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))
    if found is None:
        raise OSError(
            f"{argv[0]} not found (on PATH or in {', '.join(SBIN)}): install Debian's passwd package"
        )
    argv = [found, *argv[1:]]
    for attempt in range(20):
        with _accounts_lock:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode in (0, exists_code):
            return
        if "lock" not in done.stderr:  # another process (another hub or test) holds /etc/passwd: retry
            raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")
        time.sleep(0.05 * (attempt + 1))
    raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")


def ensure_group(name: str) -> int:
    """Return the gid of an OS group, creating it if needed."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        _run(["groupadd", name], exists_code=9)
        return grp.getgrnam(name).gr_gid


def owner_note(home: str | Path) -> str:
    """Return the comment (GECOS) of the accounts a platform home makes: which home they belong to."""
    return f"kpl-lab {Path(home)}"


class AccountTaken(OSError):
    """An OS account of the platform's name already belongs to another platform home."""


def ensure_account(
    name: str, home: Path, note: str = "", shell: str = "/bin/bash", make_home: bool = True
) -> pwd.struct_passwd:
    """Return an OS account, creating it (with its own group) if needed; its home is its own, 0700.

    `note` (`owner_note`) marks the accounts of one platform home. An account of the same name
    that another home made is taken over when that home is gone (a reinstall) and refused with
    `AccountTaken` while it is still there (a second installation on this machine).
    `make_home=False`: an account that logs in nowhere and has no home (a sandbox's).
    """
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        _run(
            [
                "useradd",
                "--no-create-home",
                "--home-dir",
                str(home),
                "--shell",
                shell,
                "--comment",
                note,
                "--user-group",
                name,
            ],
            9,
        )
        account = pwd.getpwnam(name)
    if note and (account.pw_gecos != note or Path(account.pw_dir) != Path(home)):
        _adopt(account, home, note)
        account = pwd.getpwnam(name)
    if not make_home:
        return account
    home = Path(account.pw_dir)
    home.mkdir(parents=True, exist_ok=True)
    stat = home.stat()
    if (stat.st_uid, stat.st_gid) != (account.pw_uid, account.pw_gid):
        os.chown(home, account.pw_uid, account.pw_gid)
    os.chmod(home, 0o700)
    return account


def _adopt(account: pwd.struct_passwd, home: Path, note: str) -> None:
    """Make an existing account this home's, unless the home it belongs to is still there."""
    other = account.pw_gecos.removeprefix("kpl-lab ") if account.pw_gecos.startswith("kpl-lab ") else ""
    elsewhere = Path(other or account.pw_dir)
    taken = other or not _inside(elsewhere, home.parent)  # an older kpl-lab left no note
    if account.pw_gecos != note and taken and elsewhere.exists():
        raise AccountTaken(
            f"the OS account {account.pw_name} already belongs to "
            + (f"the KPL Lab home {other}" if other else f"another owner (its home is {account.pw_dir})")
            + ", which is still there: remove that account (userdel "
            + f"{account.pw_name}), or start this home with another --account-prefix"
        )
    _run(["usermod", "--home", str(home), "--comment", note, account.pw_name], exists_code=-1)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def ensure_system_account(name: str) -> pwd.struct_passwd:
    """Return the platform's own system account (no login, no home of its own), creating it if needed."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        _run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                "--comment",
                "KPL Lab platform",
                "--user-group",
                name,
            ],
            9,
        )
        return pwd.getpwnam(name)


def sync_groups(
    account: str, projects: list[str], prefix: str = USER_PREFIX, exact: bool = True
) -> list[int]:
    """Make the account a member of its projects' groups (`exact`: of no other of this prefix); return their gids."""
    wanted = {group_name(project, prefix): ensure_group(group_name(project, prefix)) for project in projects}
    ours = group_prefix(prefix)
    for group in grp.getgrall():
        member = account in group.gr_mem
        if group.gr_name in wanted and not member:
            _run(["gpasswd", "--add", account, group.gr_name], exists_code=-1)
        elif exact and group.gr_name.startswith(ours) and group.gr_name not in wanted and member:
            _run(["gpasswd", "--delete", account, group.gr_name], exists_code=-1)
    return [wanted[group_name(project, prefix)] for project in projects]


def secure_project(project_dir: Path, gid: int, owner: int = -1) -> None:
    """Give a project's folder to its group only: 2750 (setgid) for it and the folders directly in it, 3770 for `datasets/`.

    The first time (the folder is not the group's yet), everything below is given to the
    group too, readable by it and by nobody else: what was stored before the group existed.
    `owner`: the platform's account, which owns the folders (-1: whoever made them).
    """
    if not project_dir.exists():
        project_dir.mkdir(parents=True)
        os.chown(project_dir, owner, gid)
    if project_dir.stat().st_gid != gid:
        for folder, folders, files in os.walk(project_dir):
            for name in folders:
                path = os.path.join(folder, name)
                os.lchown(path, -1, gid)
                os.chmod(path, (os.stat(path).st_mode | 0o2050) & 0o7770)
            for name in files:
                path = os.path.join(folder, name)
                os.lchown(path, -1, gid)
                if not os.path.islink(path):
                    os.chmod(path, (os.stat(path).st_mode | 0o040) & 0o7770)
    if not (project_dir / "datasets").exists():
        (project_dir / "datasets").mkdir()
        os.chown(project_dir / "datasets", owner, gid)
    for folder in (project_dir, *(p for p in project_dir.iterdir() if p.is_dir() and not p.is_symlink())):
        found = folder.stat()
        if found.st_gid != gid or owner not in (-1, found.st_uid):
            os.lchown(folder, owner, gid)
        os.chmod(
            folder, PROJECT_MODE if folder == project_dir else SHARED_FOLDERS.get(folder.name, PROJECT_MODE)
        )


def identity_of(name: str, groups: list[int]) -> Identity:
    """Return the identity of an existing account with these supplementary groups."""
    account = pwd.getpwnam(name)
    return Identity(name, account.pw_uid, account.pw_gid, sorted(set(groups)), account.pw_dir)


def project_identity(
    user: str, project: str, project_dir: Path, prefix: str, users_dir: str | Path
) -> Identity:
    """Return a hub user's identity in a project's group, making the account and the group when new.

    The project's folder is given to its group (`secure_project`) on the way.
    """
    name = account_name(user, prefix)
    ensure_account(name, Path(users_dir) / user)
    gid = ensure_group(group_name(project, prefix))
    secure_project(project_dir, gid)
    return identity_of(name, [gid])


def give(path: Path, identity: Identity, mode: int) -> None:
    """Make `path` the identity's own, group-owned by its first project group, with `mode`."""
    os.chown(path, identity.uid, identity.groups[0] if identity.groups else identity.gid)
    os.chmod(path, mode)
