"""The local spawner: notebooks as processes on this machine, within profile, quota, cgroup and devices.

Each start validates `user_options` (form or REST API alike), reads the project's quota
from its group properties, reserves in the platform ledger, puts the server in a cgroup
(or the stated fallback), hides every accelerator but its own and starts it in the
user's persistent workspace. The reservation and cgroup are kept in the spawner state, so
a restarted hub still knows which devices a running notebook holds.

With the platform's privileged helper (`c.Platform.helper_socket`, as `kpl-lab up` run as
root sets it) the server runs as the user's own OS account in her projects' groups: the
helper makes the account, starts the server under its cgroup and signals it; the hub itself
runs as the platform's unprivileged account. Without it, servers run as the hub's account.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import sys
import uuid
from pathlib import Path

from jupyterhub.spawner import LocalProcessSpawner
from jupyterhub.utils import random_port
from traitlets import Any, Bool, Unicode, default

from ..catalog.rules import MACHINE, PROFILES
from ..engine.devices import VISIBLE_DEVICES_VARIABLE
from ..engine.ledger import Ledger
from ..engine.limits import CGROUP_ROOT, JobLimits
from ..engine.runfolder import is_alive
from ..errors import KPLError
from ..hub.userenv import reachable_by_others
from ..platform import Platform
from ..privileged.client import HelperClient, HelperError
from .base import KPLSpawner, http_error
from .profiles import Choice, Profile, parse_profiles
from .quota import count_notebooks, devices_of, load_hub_quotas, release_notebook, reserve_notebook

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# a terminal's shell is no login shell: /etc/profile would put back the system's PATH, without the
# users' Python (`kpl-lab`, `python`) that the server's environment names first
TERMINALS = '--ServerApp.terminado_settings={"shell_command": ["/bin/bash"]}'


def users_path(programs: str, path: str, only_reachable: bool = False) -> str:
    """Return PATH with `programs` (the users' Python's folder) first; `only_reachable`: without folders others cannot enter."""
    folders = [programs]
    for folder in path.split(os.pathsep):
        if not folder or folder in folders:
            continue
        if only_reachable and not (os.path.isdir(folder) and reachable_by_others(folder)):
            continue  # e.g. the administrator's venv under /root: its scripts cannot run as the user
        folders.append(folder)
    return os.pathsep.join(folders)


class KPLLocalSpawner(KPLSpawner, LocalProcessSpawner):
    """Start notebooks as local processes within profile, project quota, cgroup limits and devices."""

    proc = Any(allow_none=True, help="The server's Popen, or the privileged helper's handle of it.")

    user_python = Unicode(
        "",
        help="Python that runs notebooks whose profile names no environment; it must be executable by "
        "every account (kpl-lab up builds <home>/user-env). Empty: the `cmd` as configured.",
    ).tag(config=True)

    use_cgroups = Bool(
        True, help="Limit notebooks with cgroups when writable (else the stated fallback)."
    ).tag(config=True)

    cgroup_root = Unicode(str(CGROUP_ROOT), help="The cgroup filesystem.").tag(config=True)

    workspace_template = Unicode(
        "{home}/users/{username}/workspace",
        help="The persistent workspace of a user ({home}: the platform home), opened as notebook_dir.",
    ).tag(config=True)

    _platforms: dict[tuple, Platform] = {}
    _platform: Platform | None = None

    @default("notebook_dir")
    def _default_notebook_dir(self) -> str:
        return str(self.workspace)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reset()

    def _reset(self) -> None:
        """Forget the previous spawn's choice, devices and limits."""
        self.choice: Choice | None = None
        self.project = ""
        self.profile_slug = ""
        self.devices: dict[str, list[int]] = {}
        self.limits: JobLimits | None = None
        self.pid_start: int | None = None  # with `pid`: the very process started (pids are reused)
        self.account_info: dict = {}  # the helper's answer: account, home, workspace
        self.programs = ""  # the folder of the server's Python: first on PATH (kpl-lab, python, pip)

    @property
    def owner_id(self) -> str:
        """Return the ledger owner id of this server: user/server name."""
        return f"{self.user.name}/{self.name}"

    @property
    def platform(self) -> Platform:
        """Return the platform (one per home and database), shared by every spawner of this hub."""
        if self._platform is None:
            probe = Platform(config=self.config)
            self._platform = self._platforms.setdefault((probe.home, probe.database_url), probe)
        return self._platform

    @property
    def helper(self) -> HelperClient | None:
        """Return the privileged helper's client; None: servers run as the hub's account."""
        return self.platform.helper

    @property
    def ledger(self) -> Ledger:
        """Return the platform's resource ledger."""
        platform = self.platform
        if "_kpl_ledger" not in platform.__dict__:
            ledger = Ledger(platform)
            ledger.load_config()  # the hub's c.Ledger (capacity, devices, quotas) is a source of the rules
            platform.__dict__["_kpl_ledger"] = ledger
        return platform.__dict__["_kpl_ledger"]

    @property
    def user_home(self) -> Path:
        """Return the user's folder under the platform home."""
        return Path(self.platform.home) / "users" / self.user.name

    @property
    def workspace(self) -> Path:
        """Return the user's persistent workspace."""
        return Path(self.workspace_template.format(home=self.platform.home, username=self.user.name))

    def parsed_profiles(self) -> list[Profile]:
        """Return the profiles as the platform's rules say: the configured ones loaded when they changed.

        An administrator's edit (`PUT /kpl/api/profiles`), even one made
        before the first spawn form, stands until the configuration's `c.KPLSpawner.profiles`
        itself changes.
        """
        rules = self.ledger.rules
        try:
            rules.load(PROFILES, MACHINE, list(self.profiles), seed=True)
            return parse_profiles(rules.read(PROFILES, MACHINE, []))
        except ValueError as error:
            raise http_error(error, 500) from None

    def quota(self, project: str) -> dict:
        """Return the project's quota as the platform's rules say, the user's groups' properties loaded first."""
        refused = load_hub_quotas(self.ledger.rules, self.user.groups)
        if refused:
            raise http_error(KPLError("; ".join(refused)), 500)
        with self.platform.session() as session:
            return self.ledger.quota(session, project)

    def room(self, project: str) -> dict:
        """Return what the project may have now: the machine's capacity and use, its quota and notebooks."""
        self.quota(project)  # the user's groups' quotas loaded into the rules first
        with self.platform.session() as session:
            found = self.ledger.room(session, project)
            found["notebooks"] = count_notebooks(session, project)
        return found

    # state: what a restarted hub needs to know about a running notebook

    def get_state(self) -> dict:
        state = super().get_state()
        if self.project:
            state["kpl"] = {
                "project": self.project,
                "profile": self.profile_slug,
                "devices": self.devices,
                "limits": self.limits.to_json() | {"memory_mb": self.limits.memory_mb, "cpu": self.limits.cpu}
                if self.limits
                else None,
                "pid_start": self.pid_start,
                "account": self.account_info,
            }
        return state

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        kpl = state.get("kpl")
        if not kpl:
            return
        self.project = kpl["project"]
        self.profile_slug = kpl.get("profile", "")
        self.devices = {kind: list(indexes) for kind, indexes in kpl.get("devices", {}).items()}
        limits = kpl.get("limits")
        if limits:
            self.limits = JobLimits.from_json(limits, limits["memory_mb"], limits["cpu"])
        self.pid_start = kpl.get("pid_start")
        self.account_info = kpl.get("account") or {}

    def clear_state(self) -> None:
        super().clear_state()
        self._reset()

    # environment of the notebook

    def prepare_account(self, project: str) -> None:
        """Make the user's account and home if needed and put it in exactly its projects' groups (the helper).

        Done at every spawn: a join or leave of a hub group takes effect now. Each of the user's
        project folders is given to its group (2750, setgid); the workspace's `datasets` link
        points at the chosen project's datasets.
        """
        helper = self.helper
        try:
            self.account_info = helper.account(self.user.name)
            helper.projects(self.user.name, sorted(set(self.user_projects()) | {project}))
            helper.link(self.user.name, project)
        except HelperError as error:  # e.g. an account of this name that another home owns
            raise http_error(
                ValueError(f"could not prepare {self.user.name}'s account: {error}"), 500
            ) from None

    def user_env(self, env: dict) -> dict:
        if self.helper is not None:
            env["USER"] = self.account_info.get("account", self.user.name)
        else:
            env["USER"] = self.user.name
        env["HOME"] = str(self.user_home)
        env["SHELL"] = "/bin/bash"
        return env

    def get_env(self) -> dict:
        env = super().get_env()
        if self.programs:
            env["PATH"] = users_path(
                self.programs, env.get("PATH", ""), only_reachable=self.helper is not None
            )
        env["KPL_PROJECT"] = self.project
        env["KPL_PROFILE"] = self.profile_slug
        env["KPL_LAB_HOME"] = self.platform.home
        for kind, variable in VISIBLE_DEVICES_VARIABLE.items():
            # an empty list hides every device of that kind from the notebook
            env[variable] = ",".join(str(i) for i in self.devices.get(kind, []))
        if self.limits is not None:
            env["KPL_LIMITS"] = self.limits.enforcement
            env.setdefault("OMP_NUM_THREADS", str(max(1, int(self.limits.cpu))))
        return env

    def get_args(self) -> list[str]:
        args = super().get_args()
        if not any(
            arg.startswith(("--ServerApp.terminado_settings", "--NotebookApp.terminado")) for arg in args
        ):
            args.append(TERMINALS)
        return args

    def notebook_cmd(self, profile: Profile) -> list[str]:
        """Return the command of the single-user server in the profile's Python environment."""
        if not profile.environment and not self.user_python:
            return list(self.cmd)
        environment = Path(profile.environment or self.user_python)
        python = environment / "bin" / "python" if environment.is_dir() else environment
        if not os.access(python, os.X_OK):
            raise http_error(
                ValueError(
                    f"profile {profile.slug!r}: environment {profile.environment!r} has no Python at {python}"
                ),
                500,
            )
        return [str(python), "-m", "jupyterhub.singleuser"]

    def check_runnable(self, program: str) -> None:
        """Refuse to start a server whose program the user's account cannot execute (a Python under /root)."""
        path = shutil.which(program) or program
        if not (os.path.exists(path) and reachable_by_others(path)):
            raise http_error(
                ValueError(
                    f"the notebook's program {path} cannot be run by {self.user.name}'s account: set "
                    "c.KPLLocalSpawner.user_python to a Python every account can run "
                    "(`kpl-lab up --regenerate` builds one)"
                ),
                500,
            )

    def prepare_workspace(self, project: str) -> Path:
        """Create the workspace and point its `datasets` at the project's datasets (created if absent).

        The hub's own account's workspace; with the helper, `prepare_account` made it.
        """
        workspace = self.workspace
        workspace.mkdir(parents=True, exist_ok=True)
        datasets = self.platform.storage.kind_dir(project, "datasets")
        datasets.mkdir(parents=True, exist_ok=True)
        link = workspace / "datasets"
        if link.is_symlink() or not link.exists():
            if not (link.is_symlink() and os.readlink(link) == str(datasets)):
                temporary = workspace / f".datasets-{uuid.uuid4().hex[:8]}"
                temporary.symlink_to(datasets, target_is_directory=True)
                os.replace(temporary, link)
        else:
            self.log.warning("%s is not a link: the project's datasets are not shown there", link)
        return workspace

    def make_preexec_fn(self, name: str):
        limits, workspace = self.limits, str(self.workspace)

        def preexec() -> None:
            if limits is not None:
                limits.enter()
            os.chdir(workspace)

        return preexec

    def _spawn_as_user(self, cmd: list[str]) -> tuple[str, int]:
        """Start the server as the user's account through the helper, under new limits; return its address."""
        if self.port == 0:
            self.port = random_port()
        argv = [*cmd, *self.get_args()]
        if self.shell_cmd:
            argv = [*self.shell_cmd, " ".join(shlex.quote(word) for word in argv)]
        choice = self.choice
        with open(os.devnull, "rb") as devnull:
            self.proc = self.helper.spawn(
                {"user": self.user.name, "projects": sorted(set(self.user_projects()) | {self.project})},
                argv,
                self.get_env(),
                self.workspace,
                stdio=(devnull.fileno(), sys.stdout.fileno(), sys.stderr.fileno()),
                limits={"name": self._cgroup_name(), "memory_mb": choice.memory, "cpu": choice.cpu}
                if self.use_cgroups
                else None,
                session=True,
            )
        self.pid, self.pid_start = self.proc.pid, self.proc.start
        if self.proc.limits:
            self.limits = JobLimits.from_json(self.proc.limits, choice.memory, choice.cpu)
        return (self.ip or "127.0.0.1", self.port)

    def _cgroup_name(self) -> str:
        return "notebook-" + _UNSAFE.sub("-", self.owner_id) + "-" + uuid.uuid4().hex[:8]

    async def _signal(self, sig):
        """Signal the server (as its user, through the helper); say whether it is still there."""
        if self.helper is None:
            return await super()._signal(sig)
        if not is_alive(self.pid, self.pid_start):
            return False
        if sig == 0:
            return True
        who = {"user": self.user.name, "projects": []}
        return await asyncio.to_thread(self.helper.signal, who, self.pid, self.pid_start, sig)

    # lifecycle

    async def start(self):
        """Validate, reserve, limit and start the single-user server; release everything on failure."""
        self._reset()
        choice = self.choose()
        self.quota(choice.project)  # the user's groups' quotas loaded into the rules the ledger decides with
        choice = self.fit_choice(choice)
        try:
            reservation = await asyncio.to_thread(
                reserve_notebook,
                self.ledger,
                choice.project,
                self.owner_id,
                choice.resources,
                choice.profile.gpu_sharing,
            )
        except KPLError as error:
            self.log.info("Refused %s: %s", self._log_name, error.message)
            raise http_error(error) from None
        try:
            self.choice, self.project, self.profile_slug = choice, choice.project, choice.profile.slug
            self.devices = devices_of(reservation.devices)
            self.user_options = choice.to_options()
            if self.orm_spawner is not None:
                self.orm_spawner.user_options = self.user_options  # the hub commits after start()
            cmd = self.notebook_cmd(choice.profile)
            self.programs = str(Path(shutil.which(cmd[0]) or cmd[0]).parent)
            if self.helper is not None:
                await asyncio.to_thread(self.prepare_account, choice.project)
                self.check_runnable(cmd[0])
            else:
                self.prepare_workspace(choice.project)
                self.limits = JobLimits.create(
                    self._cgroup_name(),
                    choice.memory,
                    choice.cpu,
                    use_cgroups=self.use_cgroups,
                    root=Path(self.cgroup_root),
                )
            self.log.info(
                "Starting %s: project %s, profile %s, devices %s",
                self._log_name,
                self.project,
                self.profile_slug,
                self.devices or "none",
            )
            if self.helper is not None:
                address = await asyncio.to_thread(self._spawn_as_user, cmd)
            else:
                # LocalProcessSpawner's own start (args, shell_cmd, popen_kwargs, Popen) with the profile's command
                configured, self.cmd = self.cmd, cmd
                try:
                    address = await super().start()
                finally:
                    self.cmd = configured
            self.log.info(
                "%s runs under %s", self._log_name, self.limits.enforcement if self.limits else "no limits"
            )
        except BaseException:
            await self._clean_up(self.limits)
            self._reset()
            raise
        return address

    async def _clean_up(self, limits: JobLimits | None) -> None:
        """Kill what is left in the notebook's cgroup, remove it and release the reservation."""
        if limits is not None and self.helper is not None:
            with contextlib.suppress(HelperError):
                await asyncio.to_thread(self.helper.release, limits.to_json())
        elif limits is not None:
            limits.release()
        await asyncio.to_thread(release_notebook, self.ledger, self.owner_id)

    async def poll(self):
        limits, held = self.limits, bool(self.project)
        status = await super().poll()
        if status is not None and held:
            await self._clean_up(limits)
        return status

    async def stop(self, now: bool = False) -> None:
        limits = self.limits
        await super().stop(now=now)
        await self._clean_up(limits)
        self._reset()
