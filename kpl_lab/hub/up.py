"""`kpl-lab up`: JupyterHub, its proxy, the platform service and the KPL local spawner on one machine.

The first run writes `<home>/hub/jupyterhub_config.py` (edit it for a real deployment; later
runs use it as it is) and a first admin account whose generated password is printed once and
kept in `<home>/hub/secrets.json` (mode 0600). The proxy is the pure Python
`configurable-http-proxy` from PyPI (no Node). The hub's own database is SQLite in `<home>/hub/`.

Run as root, it separates privileges (docs/admin-guide.md, "Who runs as whom"): the hub, its
proxy, the platform service and the gateway run as the platform's system account
(`--service-account`, default `kpl`, made on the first run), which owns the home; the one
process left as root is the privileged helper (`kpl_lab.privileged`), which makes users'
accounts and starts their notebooks, jobs and deployments as them.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import http.client
import json
import os
import pwd
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from ..engine import environment, identity
from ..platform import default_home
from ..privileged.helper import socket_path
from ..serving.hub_tokens import ACCESS_SCOPE as GATEWAY_ACCESS
from ..serving.hub_tokens import TOKEN_ENV as GATEWAY_TOKEN_ENV
from . import userenv

STOP_SECONDS = 30.0  # for the hub to stop its notebooks, services and proxy before we kill what is left
WATCH_SECONDS = 2.0  # how often the hub's children are noted while it runs
READY_PROBE_SECONDS = 0.5  # how often the hub is asked whether it answers, until it does
SAMPLE_PROJECT, SAMPLE_DATASET, SAMPLE_ALGORITHM = "demo", "digits", "mlp-classification"  # numpy only
TORCH_ALGORITHM = "image-classification"  # the PyTorch CNN of the same task, added where jobs run torch
SERVICE_ACCOUNT = "kpl"
# what the platform service's own hub token may do: read users (admin flag, groups), groups (quotas), servers
SERVICE_SCOPES = ["list:users", "read:users", "list:groups", "read:groups", "read:servers"]
# what a browser's OAuth token for the service may carry, of what its user holds: an admin's makes the
# admin page's changes (users, projects, members, quotas) and reads /services/kpl/metrics (as the hub's
# /hub/metrics); a member's gets none of them
ADMIN_PAGE_SCOPES = ["admin:users", "admin:groups", "groups", "list:users", "list:groups", "read:metrics"]
HELPER_START_SECONDS = 30.0
# how long the hub waits for a service to answer (JupyterHub's default is 30 s); the platform service
# answers within a second of its start and loads the platform after (kpl_lab.hub.service.Starting)
SERVICE_START_SECONDS = 300
LAST_LINES = 25  # of the hub's log, shown when it exits on its own
LOG_DRAIN_SECONDS = 1.0
# what JupyterHub logs when a managed service fails it at start
SERVICE_FAILED = re.compile(
    r"(Service \S+ exited with status -?\d+|Cannot connect to managed service \S+|Failed to start service \S+)"
)

AUTHENTICATORS = {
    "shared": "jupyterhub.authenticators.shared.SharedPasswordAuthenticator",
    "dummy": "jupyterhub.auth.DummyAuthenticator",
    "pam": "jupyterhub.auth.PAMAuthenticator",
}


def free_port(ip: str = "127.0.0.1") -> int:
    """Return a TCP port free now on `ip`."""
    with socket.socket() as probe:
        probe.bind((ip, 0))
        return probe.getsockname()[1]


def free_ports(count: int, ip: str = "127.0.0.1") -> list[int]:
    """Return `count` different TCP ports free now on `ip`."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind((ip, 0))
        return [probe.getsockname()[1] for probe in probes]


def port_free(ip: str, port: int) -> bool:
    """Say whether `port` can be bound on `ip` now."""
    with socket.socket() as probe:
        try:
            probe.bind((ip, port))
        except OSError:
            return False
    return True


def load_secrets(hub_dir: Path, admin: str) -> tuple[dict, bool]:
    """Return the admin and user passwords (generated on the first run) and whether they are new."""
    path = hub_dir / "secrets.json"
    if path.exists():
        return json.loads(path.read_text()), False
    values = {
        "admin": admin,
        "admin_password": secrets.token_urlsafe(24),
        "user_password": secrets.token_urlsafe(24),
    }
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(values, out)
    os.replace(tmp, path)
    return values, True


# the home's folders, their owner (None: root; else the service account) and mode
HOME_FOLDERS = (
    ("", "service", 0o711),  # passed through by users to their own folder, never listed
    ("hub", "service", 0o700),  # hub database, cookie secret, secrets.json, the configuration
    ("uploads", "service", 0o700),
    ("environments", "service", 0o755),  # jobs' virtual environments, run by every user
    ("users", None, 0o711),  # users' homes: the helper makes them as root
)
ROOT_FOLDERS = ("users", "user-env", "run")  # root's: users' homes, the users' Python, the helper's socket
OWNER_STAMP = ".owner"  # the uid the home was last given to: its files are walked only when it changes


def secure_home(home: Path, storage: Path, service: pwd.struct_passwd, prefix: str) -> None:
    """Make the home the service account's and give every project folder to its group (run as root).

    Users pass through the home to their own folder, their projects and the users' Python; they
    list and read nothing else (docs/multi-user.md, "What users can read"). A home an earlier
    version ran as root is handed over once: what root owns in it becomes the service account's.
    """
    for relative, owner, mode in (
        *HOME_FOLDERS,
        (storage, "service", 0o711),
        (storage / "projects", "service", 0o711),
    ):
        folder = home / relative
        folder.mkdir(parents=True, exist_ok=True)
        uid, gid = (service.pw_uid, service.pw_gid) if owner else (0, 0)
        os.lchown(folder, uid, gid)
        os.chmod(folder, mode)
    stamp = home / OWNER_STAMP
    if not stamp.exists() or stamp.read_text().strip() != str(service.pw_uid):
        _hand_over(home, service, skip={home / name for name in ROOT_FOLDERS})
        stamp.write_text(f"{service.pw_uid}\n")
        os.chown(stamp, service.pw_uid, service.pw_gid)
    for path in (*home.iterdir(), *(home / "hub").iterdir()):
        if path.is_file() and not path.is_symlink():  # the catalog database, its journals, the configuration
            os.lchown(path, service.pw_uid, service.pw_gid)
            os.chmod(path, stat.S_IMODE(path.stat().st_mode) & 0o770)
    for project in (storage / "projects").iterdir():
        if project.is_dir() and not project.is_symlink():
            gid = identity.ensure_group(identity.group_name(project.name, prefix))
            identity.secure_project(project, gid, service.pw_uid)


def _hand_over(folder: Path, service: pwd.struct_passwd, skip: set[Path]) -> None:
    """Give what root owns below `folder` to the service account (links not followed), but `skip`."""
    for parent, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if Path(parent, name) not in skip]
        for name in (*folders, *files):
            path = os.path.join(parent, name)
            found = os.lstat(path)
            if found.st_uid == 0:
                os.lchown(path, service.pw_uid, service.pw_gid if found.st_gid == 0 else -1)


def render_config(
    args: argparse.Namespace, home: Path, creds: dict, user_python: str = "", helper_socket: str = ""
) -> str:
    """Return the text of the generated jupyterhub_config.py.

    `user_python`: the Python of users' notebooks and jobs, and of the platform's own processes
    (every account can run it); `helper_socket`: the privileged helper's, through which users'
    processes run as their own accounts (empty: everything runs as this process's account, as
    when it is not root).
    """
    python = user_python or sys.executable
    authenticator = AUTHENTICATORS.get(args.authenticator, args.authenticator)
    service_port, hub_port, proxy_api_port, gateway_port = free_ports(4)
    hub_dir = home / "hub"
    service_url = f"http://127.0.0.1:{service_port}"
    gateway_token = secrets.token_hex(
        32
    )  # the gateway process's, to check users' tokens and read their groups
    platform = {"home": str(home)}
    if args.database_url:
        platform["database_url"] = args.database_url
    if args.storage_url:
        platform["storage_url"] = args.storage_url
    # the same catalog and storage for the service as for the spawner
    service_args = [f"--Platform.{key}={value}" for key, value in platform.items() if key != "home"]
    # the gateway process of deployments, on a port the proxy routes /services/kpl-gateway/ to
    host = socket.gethostname() if args.ip in ("", "0.0.0.0", "::") else args.ip  # what callers elsewhere use
    service_args += [
        f"--DeploymentService.gateway_port={gateway_port}",
        f"--DeploymentService.gateway_public_url=http://{host}:{args.port}/services/kpl-gateway",
        # there from the service's start: the hub waits for its route's URL and checks it every minute
        "--DeploymentService.gateway_always=True",
    ]
    if helper_socket:  # jobs and deployments as their users, through the privileged helper
        platform["helper_socket"] = helper_socket
        service_args += [
            f"--Platform.helper_socket={helper_socket}",
            f"--LocalExecutor.python={python}",
            f"--Sandbox.python={python}",
        ]
    allow_root = ["--allow-root"] if os.geteuid() == 0 and not helper_socket else []
    lines = [
        "# Generated by `kpl-lab up`; edit freely (later runs use this file as it is).",
        "import sys",
        "c = get_config()  # noqa: F821",
        f"c.JupyterHub.bind_url = {f'http://{args.ip}:{args.port}/'!r}",
        "c.JupyterHub.hub_ip = '127.0.0.1'",
        f"c.JupyterHub.hub_port = {hub_port}",
        f"c.JupyterHub.db_url = {'sqlite:///' + str(hub_dir / 'jupyterhub.sqlite')!r}",
        f"c.JupyterHub.cookie_secret_file = {str(hub_dir / 'jupyterhub_cookie_secret')!r}",
        f"c.ConfigurableHTTPProxy.pid_file = {str(hub_dir / 'proxy.pid')!r}",
        f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{proxy_api_port}'",
        # --proxy-timeout=0: no limit, as the Node proxy; the Python one otherwise cuts every answer at
        # 20 s (tornado's default): the spawn page's progress stream of a slow start, long uploads.
        # kpl_lab.hub.proxy: that Python proxy, answering a websocket's subprotocol (kernels ask one)
        f"c.ConfigurableHTTPProxy.command = [{python!r}, '-m', 'kpl_lab.hub.proxy', '--proxy-timeout=0']",
        "",
        "# who may log in",
        f"c.JupyterHub.authenticator_class = {authenticator!r}",
        f"c.Authenticator.admin_users = {{{creds['admin']!r}}}",
        "c.Authenticator.allow_all = True",
        "# each login goes to the platform's audit log (who, when, from where)",
        "from kpl_lab.monitoring.audit import login_hook  # noqa: E402",
        "c.Authenticator.post_auth_hook = login_hook",
    ]
    if args.authenticator == "shared":
        lines += [
            f"c.SharedPasswordAuthenticator.admin_password = {creds['admin_password']!r}",
            f"c.SharedPasswordAuthenticator.user_password = {creds['user_password']!r}",
        ]
    lines += [
        "",
        "# the platform: one home, database and storage for the service and the spawner",
        *(f"c.Platform.{key} = {value!r}" for key, value in platform.items()),
        "",
        "# notebooks: the KPL local spawner; projects are groups, quotas in group properties",
        "c.JupyterHub.spawner_class = 'kpl_lab.spawner.local.KPLLocalSpawner'",
        f"c.Spawner.args = {allow_root!r}",
        "c.Spawner.start_timeout = 120",
        *(
            [
                "# each notebook as its user's own account (kpl-<name>; the helper's socket is in c.Platform),",
                "# on a Python every account runs",
                f"c.KPLLocalSpawner.user_python = {user_python!r}",
            ]
            if helper_socket
            else []
        ),
        f"c.Spawner.environment = {{'KPL_SERVICE_URL': {service_url + '/services/kpl/'!r}}}",
        "c.Spawner.server_token_scopes = ['users:activity!user', 'access:servers!server', 'access:services!service=kpl',",
        f"                                 {GATEWAY_ACCESS!r}]",
        "c.KPLSpawner.profiles = [",
        "    {'slug': 'cpu', 'display_name': 'CPU notebook', 'cpu': 1, 'cpu_max': 4, 'memory': 2048,",
        "     'memory_max': 8192, 'default': True},",
        "]",
        "c.JupyterHub.load_groups = {",
        f"    'demo': {{'users': [{creds['admin']!r}], 'properties': {{'kpl_quota': {{'cpu': 4, 'memory': 8192, "
        "'gpu': 0, 'notebooks': 3}}},",
        "}",
        "",
        "# the service reads the hub's groups every few seconds: those reads log at debug level only",
        "from kpl_lab.hub.hublog import quiet_service_polling  # noqa: E402",
        "quiet_service_polling('kpl')",
        "",
        "# the platform API: the service `kpl` at /services/kpl/ (admin page at /services/kpl/admin)",
        "c.JupyterHub.services = [",
        "    {",
        "        'name': 'kpl',",
        f"        'url': {service_url!r},",
        f"        'command': [{python!r}, '-m', 'kpl_lab.hub.service', *{service_args!r}],",
        # the gateway process it starts takes hub users' API tokens with the kpl-gateway service's token
        f"        'environment': {{'KPL_LAB_HOME': {str(home)!r}, {GATEWAY_TOKEN_ENV!r}: {gateway_token!r}}},",
        *([f"        'timeout': {SERVICE_START_SECONDS},"] if _service_timeout_known() else []),
        "        'display': True,",
        "        'oauth_no_confirm': True,",
        f"        'oauth_client_allowed_scopes': {ADMIN_PAGE_SCOPES!r},",
        "    },",
        "    # predictions with deployment keys or users' API tokens: the gateway process the service starts",
        # not in the hub's Services menu: it serves predictions' POSTs, no page
        f"    {{'name': 'kpl-gateway', 'url': 'http://127.0.0.1:{gateway_port}', 'api_token': {gateway_token!r},",
        "     'display': False},",
        "]",
        "c.JupyterHub.load_roles = [",
        f"    {{'name': 'user', 'scopes': ['self', 'access:services!service=kpl', {GATEWAY_ACCESS!r}]}},",
        "    # the service reads who is who (admin flag, groups, quotas in group properties, servers); the",
        "    # admin page's changes go with the admin's own token (oauth_client_allowed_scopes below)",
        "    {'name': 'kpl-service', 'services': ['kpl'],",
        f"     'scopes': {SERVICE_SCOPES!r}}},",
        "    # whose a token is comes with the token; the gateway reads the owner's admin flag and groups",
        "    {'name': 'kpl-gateway', 'services': ['kpl-gateway'], 'scopes': ['read:users:name', 'read:users:groups']},",
        "]",
        "",
    ]
    return "\n".join(lines)


def _service_timeout_known() -> bool:
    """Say whether this JupyterHub takes a service's `timeout` (6.0 on; 5 refuses a field it lacks)."""
    from jupyterhub.services.service import Service

    return "timeout" in Service.class_trait_names()


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Return the options of `kpl-lab up`."""
    parser = argparse.ArgumentParser(
        prog="kpl-lab up", description="Start the multi-user KPL Lab on this machine."
    )
    parser.add_argument(
        "--home",
        help="platform home (default $KPL_LAB_HOME, else /var/lib/kpl-lab as root, ~/.kpl-lab otherwise)",
    )
    parser.add_argument("--ip", default="127.0.0.1", help="address the hub listens on (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=0, help="port of the hub (default 8000 if free, else a free one)"
    )
    parser.add_argument(
        "--authenticator",
        default="shared",
        help="shared (generated passwords, the default), dummy, pam, or a dotted class name",
    )
    parser.add_argument("--admin", default="admin", help="the first admin's user name")
    parser.add_argument("--database-url", help="SQLAlchemy URL of the platform's catalog")
    parser.add_argument("--storage-url", help="storage root of the platform")
    parser.add_argument(
        "--config", help="a jupyterhub_config.py to use instead of <home>/hub/jupyterhub_config.py"
    )
    parser.add_argument("--regenerate", action="store_true", help="rewrite <home>/hub/jupyterhub_config.py")
    parser.add_argument(
        "--user-python",
        default="",
        help="the Python users' notebooks and jobs run, as it is (it needs kpl-lab's requirements and "
        "every account must be able to run it); default: this Python when every account can run it, else "
        "<home>/user-env, built once on --user-env-base",
    )
    parser.add_argument(
        "--user-env-base",
        default=userenv.DEFAULT_PYTHON,
        help="a Python every account can run, on which <home>/user-env is built (default /usr/bin/python3)",
    )
    parser.add_argument(
        "--service-account",
        default=SERVICE_ACCOUNT,
        help=f"as root: the system account the hub, its proxy, the platform service and the gateway run as "
        f"(default {SERVICE_ACCOUNT}, made on the first run)",
    )
    parser.add_argument(
        "--account-prefix",
        default=identity.USER_PREFIX,
        help="prefix of users' OS accounts (default kpl-: kpl-alice; project groups kplp-<project>)",
    )
    parser.add_argument(
        "--keep-serving",
        action="store_true",
        help="when stopped, leave the deployments' replicas and their gateway running (default: stop them; "
        "the next start starts them again)",
    )
    parser.add_argument(
        "--no-sample-data",
        dest="sample_data",
        action="store_false",
        help="do not add the digits dataset and the image-classification algorithm to project demo",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Write the configuration if needed, print how to log in, and run JupyterHub until stopped."""
    args = parse(argv)
    home = Path(args.home or os.environ.get("KPL_LAB_HOME") or default_home()).expanduser().absolute()
    hub_dir = home / "hub"
    hub_dir.mkdir(parents=True, exist_ok=True)
    separated = Separation.prepare(home, args) if os.geteuid() == 0 else None
    creds, fresh = load_secrets(hub_dir, args.admin)
    config = Path(args.config).absolute() if args.config else hub_dir / "jupyterhub_config.py"
    python = separated.python if separated else sys.executable
    command = [python, "-m", "jupyterhub", "-f", str(config)]
    if not args.config and (args.regenerate or not config.exists()):
        if not args.port:
            args.port = 8000 if port_free(args.ip, 8000) else free_port(args.ip)
        text = render_config(
            args, home, creds, *((separated.python, str(separated.socket)) if separated else ())
        )
        tmp = config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, config)
        print(f"kpl-lab up: wrote {config} (edit it for a real deployment)")
        url = f"http://{args.ip}:{args.port}/"
    elif args.port:  # given now: it wins over the file's
        url = f"http://{args.ip}:{args.port}/"
        command.append(f"--JupyterHub.bind_url={url}")
    else:
        url = configured_url(config)
    if separated:
        separated.hand_over()  # the configuration and secrets just written are the service account's
    set_up_demo(home, args, python, separated.service if separated else None)
    sys.stdout.flush()

    def announce() -> None:
        print(f"kpl-lab up: KPL Lab at {url}  (admin page: {url.rstrip('/')}/services/kpl/admin)")
        if args.authenticator == "shared":
            if fresh:
                print(
                    f"kpl-lab up: log in as {creds['admin']!r} with password {creds['admin_password']} "
                    "(shown once)"
                )
                print(f"kpl-lab up: other users log in with any name and password {creds['user_password']}")
            else:
                print(
                    f"kpl-lab up: log in as {creds['admin']!r}; passwords are in {hub_dir / 'secrets.json'}"
                )
        sys.stdout.flush()

    hub_ran = False
    try:
        if separated:
            separated.start_helper()
        hub_ran = True
        code = run_hub(
            command,
            hub_dir,
            ready=(ready_probes(config, url), announce),
            account=separated.service if separated else None,
            env=hub_environment(home, separated.service if separated else None),
        )
        return code
    finally:
        if hub_ran and not args.keep_serving:
            with _signals_ignored():  # a second Ctrl-C must not cut the shutdown short
                stop_serving(home, args, python, separated.service if separated else None)
        if separated:
            separated.stop_helper()


class Separation:
    """Privilege separation under root: the service account, the Python it runs, the privileged helper."""

    def __init__(
        self, home: Path, storage: Path, service: pwd.struct_passwd, python: str, prefix: str
    ) -> None:
        self.home, self.storage, self.service, self.python, self.prefix = (
            home,
            storage,
            service,
            python,
            prefix,
        )
        self.socket = socket_path(home)
        self.helper: subprocess.Popen | None = None

    @classmethod
    def prepare(cls, home: Path, args: argparse.Namespace) -> Separation:
        """Make the service account, build the users' Python and give the home to the account (as root)."""
        os.umask(0o027)  # what the platform creates is not for other accounts
        service = identity.ensure_system_account(args.service_account)
        storage = Path(args.storage_url or home / "storage").absolute()
        python = str(userenv.prepare(home, args.user_python, args.user_env_base, log=_say))
        separated = cls(home, storage, service, python, args.account_prefix)
        separated.hand_over()
        return separated

    def hand_over(self) -> None:
        """Give the home (but users' homes, the users' Python, the helper's folder) to the service account."""
        secure_home(self.home, self.storage, self.service, self.prefix)

    def start_helper(self) -> None:
        """Start the privileged helper (root) and wait until it listens."""
        argv = [
            sys.executable,
            "-m",
            "kpl_lab.privileged.helper",
            f"--home={self.home}",
            f"--storage={self.storage}",
            f"--service-account={self.service.pw_name}",
            f"--account-prefix={self.prefix}",
        ]
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self.helper = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, start_new_session=True, env=environment.passed()
        )
        deadline = time.monotonic() + HELPER_START_SECONDS
        while not self.socket.exists():
            if self.helper.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"kpl-lab up: the privileged helper did not start (exit code {self.helper.poll()})"
                )
            time.sleep(0.05)

    def stop_helper(self) -> None:
        """Stop the helper (what it started runs on: jobs survive a restart)."""
        if self.helper is not None and self.helper.poll() is None:
            self.helper.terminate()
            try:
                self.helper.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.helper.kill()
                self.helper.wait()


def stop_serving(
    home: Path, args: argparse.Namespace, python: str, service: pwd.struct_passwd | None
) -> None:
    """Stop the deployments' replicas and their gateway, which the platform service started (as its account).

    The deployments stay: the service's next start starts them again.
    """
    urls = (args.database_url or "", args.storage_url or "")
    if not as_account(service, home, python, "suspend_serving", str(home), *urls):
        _say("the deployments' replicas and gateway may still run: stopping them failed (above)")


def suspend_serving(home: str, database_url: str = "", storage_url: str = "") -> None:
    """Stop the replicas and the gateway of a home's deployments (as the account that owns them)."""
    from ..platform import Platform

    settings = {"home": home}
    settings |= {k: v for k, v in (("database_url", database_url), ("storage_url", storage_url)) if v}
    platform = Platform(**settings)
    try:
        stopped = platform.deployments.suspend()
    finally:
        platform.close()
    if stopped:
        _say(f"stopped the gateway and {len(stopped)} replica(s) of deployments (the next start starts them)")


@contextlib.contextmanager
def _signals_ignored():
    """Ignore SIGTERM, SIGINT and SIGHUP for a while (the end of a shutdown)."""
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def hub_environment(home: Path, service: pwd.struct_passwd | None) -> dict[str, str]:
    """Return the hub's environment: the allowlist's, the platform home and, separated, the service account's names."""
    env = environment.passed()
    env["KPL_LAB_HOME"] = str(home)
    if service is not None:
        env = environment.for_account(env, service.pw_name, str(home / "hub"))
    return env


def set_up_demo(
    home: Path, args: argparse.Namespace, python: str, service: pwd.struct_passwd | None = None
) -> None:
    """Add the sample data unless `--no-sample-data`.

    As the service account when separated: the catalog and the storage are its own.
    """
    if not args.sample_data:
        return
    urls = (args.database_url or "", args.storage_url or "")
    if not as_account(service, home, python, "add_sample_data", str(home), *urls, python):
        print("kpl-lab up: no sample data: adding it failed (above)")


def runs_torch(python: str) -> bool:
    """Say whether `python` (what jobs run) can import torch, without importing it here."""
    check = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    return subprocess.run([python, "-c", check], capture_output=True, check=False).returncode == 0


def ready_probes(config: Path, url: str) -> tuple[Callable[[], bool], ...]:
    """Return what says, in order, that the hub of `config` serves at `url`.

    The hub adds its route and its services' to the proxy only once its own server answers
    and every service listens: a probe through the proxy before that is a 404 line in the
    proxy's log, so those are asked first. A service the hub starts is asked under its
    prefix until it stops answering 503 (the platform service loading).
    """
    services = _hub_config(config).get("services", [])
    return (
        functools.partial(answers, hub_own_url(config)),
        *(functools.partial(listens, s["url"]) for s in services if s.get("url")),
        *(
            functools.partial(serves, urllib.parse.urljoin(s["url"], f"/services/{s['name']}/"))
            for s in services
            if s.get("url") and s.get("command")
        ),
        functools.partial(answers, url),
    )


def serves(url: str) -> bool:
    """Say whether the server at `url` answers it now with a status below 500 (redirects not followed)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(*_address(parts), timeout=READY_PROBE_SECONDS)
    try:
        connection.request("GET", parts.path or "/")
        return connection.getresponse().status < 500
    except OSError:
        return False
    finally:
        connection.close()


def answers(url: str) -> bool:
    """Say whether the hub at `url` answers its health check now."""
    parts = urllib.parse.urlsplit(url)
    host, port = _address(parts)
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    probe = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}/hub/health"
    try:
        with urllib.request.urlopen(probe, timeout=READY_PROBE_SECONDS) as response:
            return response.status == 200
    except OSError:
        return False


def listens(url: str) -> bool:
    """Say whether a server accepts connections at `url`'s host and port now (asking it nothing)."""
    try:
        socket.create_connection(_address(urllib.parse.urlsplit(url)), timeout=READY_PROBE_SECONDS).close()
    except OSError:
        return False
    return True


def _address(parts: urllib.parse.SplitResult) -> tuple[str, int]:
    """Return the (host, port) to connect to for a URL a server binds (all addresses: loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(parts.hostname or "", parts.hostname)
    return host, parts.port or (443 if parts.scheme == "https" else 80)


def configured_url(config: Path) -> str:
    """Return the URL a jupyterhub_config.py binds the hub to (JupyterHub's default if it names none)."""
    hub = _hub_config(config)
    if "bind_url" in hub:
        return hub["bind_url"]
    return f"http://{hub.get('ip', '') or '127.0.0.1'}:{hub.get('port', 8000)}/"


def hub_own_url(config: Path) -> str:
    """Return the URL of the hub's own server behind the proxy, as a jupyterhub_config.py sets it."""
    hub = _hub_config(config)
    if "hub_bind_url" in hub:  # its path is the hub's base URL, which `answers` adds itself
        parts = urllib.parse.urlsplit(hub["hub_bind_url"])
        return f"{parts.scheme}://{parts.netloc}/"
    return f"http://{hub.get('hub_ip', '') or '127.0.0.1'}:{hub.get('hub_port', 8081)}/"


def _hub_config(config: Path):
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader(config.name, path=str(config.parent)).load_config().get("JupyterHub", {})


def _say(line: str) -> None:
    print(f"kpl-lab up: {line}", flush=True)


class _Stop(Exception):
    """This process was asked to stop (SIGTERM, SIGINT or SIGHUP)."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signum)


def run_hub(
    command: list[str],
    cwd: Path,
    stop_seconds: float = STOP_SECONDS,
    ready: tuple[tuple[Callable[[], bool], ...], Callable[[], None]] | None = None,
    account: pwd.struct_passwd | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Run JupyterHub until it ends or this process is asked to stop; leave none of its processes behind.

    `ready`: the probes to ask, in order (`ready_probes`), and what to call once all say yes
    (print the URL to open). `account`: the service account the hub runs as (this process is
    root), with `env` (default: this process's). Its log (and its services') passes through
    here: when it ends on its own, what it said last is said again with its exit status.
    """
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {sig: signal.signal(sig, _raise_stop) for sig in signals}
    started: dict[int, psutil.Process] = {}  # the hub's children: the proxy, the service, notebook servers
    hub = None
    log = HubLog()
    try:
        # its own session: a Ctrl-C in the terminal reaches only us, and we stop the hub in order
        drop = (
            {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": [], "umask": 0o027}
            if account
            else {}
        )
        hub = subprocess.Popen(
            command,
            cwd=cwd,
            start_new_session=True,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **drop,
        )
        log.follow(hub.stdout)
        while True:
            try:
                code = hub.wait(timeout=READY_PROBE_SECONDS if ready else WATCH_SECONDS)
            except subprocess.TimeoutExpired:
                _remember_children(hub.pid, started)
            else:
                for line in why_hub_exited(code, log.last_lines()):
                    _say(line)
                return code
            if ready and all(probe() for probe in ready[0]):
                ready[1]()
                ready = None
    except _Stop:
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
        print(
            "kpl-lab up: stopping JupyterHub, its proxy, the platform service and the notebooks", flush=True
        )
        if hub is not None:
            _remember_children(hub.pid, started)
            hub.terminate()  # the hub stops its notebook servers, its services and its proxy itself
            try:
                hub.wait(timeout=stop_seconds)
            except subprocess.TimeoutExpired:
                hub.kill()
                hub.wait()
        return 0
    finally:
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        if hub is not None and hub.poll() is None:  # an unexpected error here: do not leave the hub
            hub.kill()
            hub.wait()
        _stop_left(list(started.values()), stop_seconds)
        log.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class HubLog:
    """Pass the hub's output (its log, its services' and proxy's) on to this process's, keeping the last lines."""

    def __init__(self, keep: int = LAST_LINES) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.thread: threading.Thread | None = None
        self.pipe = None

    def follow(self, pipe) -> None:
        """Copy `pipe` to stderr line by line, on a thread of its own."""
        self.pipe = pipe
        self.thread = threading.Thread(target=self._copy, name="kpl-hub-log", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        out = sys.stderr.buffer
        for line in iter(self.pipe.readline, b""):
            with contextlib.suppress(OSError, ValueError):  # our own stderr closed: keep reading
                out.write(line)
                out.flush()
            self.lines.append(line.decode(errors="replace").rstrip())

    def last_lines(self) -> list[str]:
        """Return the last lines the hub wrote, once its end of the pipe closed (or a second passed)."""
        if self.thread is not None:
            self.thread.join(LOG_DRAIN_SECONDS)  # a child of the hub left running may hold the pipe open
        return list(self.lines)

    def close(self) -> None:
        """Stop reading (the hub and what it started are gone)."""
        if self.thread is not None:
            self.thread.join(LOG_DRAIN_SECONDS)
        if self.pipe is not None:
            with contextlib.suppress(OSError):
                self.pipe.close()


def why_hub_exited(code: int, lines: list[str]) -> list[str]:
    """Return what to say when the hub ended on its own: its exit status, the cause found, its last lines."""
    said = [f"JupyterHub exited with status {code}" + ("" if code else " (it stopped on its own)")]
    for line in reversed(lines):
        found = SERVICE_FAILED.search(line)
        if found:
            said.append(f"cause: {found.group(0)}")
            break
    if lines:
        said.append("the last lines of its log (the platform service's and the proxy's too):")
        said += [f"  {line}" for line in lines]
    return said


def _remember_children(pid: int, started: dict[int, psutil.Process]) -> None:
    """Note the hub's direct children (job supervisors, detached by design, are never among them)."""
    try:
        for child in psutil.Process(pid).children():
            started.setdefault(child.pid, child)
    except psutil.Error:
        pass


def _stop_left(processes: list[psutil.Process], stop_seconds: float) -> None:
    """Terminate what the hub left running, then kill what still runs."""
    left = [p for p in processes if _alive(p)]
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(left, timeout=stop_seconds)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=stop_seconds)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def as_account(account: pwd.struct_passwd | None, home: Path, python: str, function: str, *args: str) -> bool:
    """Run this module's `function(*args)` here, or for `account` in `python` as that account; say if it ran.

    Not in a fork of this Python: it may sit where the account reads nothing (under /root), and
    the first import there that this process has not made (sqlite3, say) would fail.
    """
    if account is None:
        globals()[function](*args)
        return True
    code = f"import sys; from kpl_lab.hub.up import {function}; {function}(*sys.argv[1:])"
    sys.stdout.flush()
    done = subprocess.run(
        [python, "-c", code, *args],
        env=hub_environment(home, account),
        cwd=home,
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        check=False,
    )
    return done.returncode == 0


def add_sample_data(
    home: Path, database_url: str | None = None, storage_url: str | None = None, python: str = sys.executable
) -> bool:
    """Register the digits dataset and the sample algorithms in the `demo` project once.

    The numpy one always; the PyTorch one too where `python` (what jobs run) has torch.
    """
    from ..errors import KPLError
    from ..example import examples_folder
    from ..platform import Platform

    try:
        examples = examples_folder()
    except FileNotFoundError as error:
        print(f"kpl-lab up: no sample data: {error}")
        return False
    script = examples / "datasets" / "make_digits.py"
    algorithms = [SAMPLE_ALGORITHM, *([TORCH_ALGORITHM] if runs_torch(python) else [])]
    settings = {"home": str(home)}
    settings |= {k: v for k, v in (("database_url", database_url), ("storage_url", storage_url)) if v}
    platform = Platform(**settings)
    try:
        catalog = platform.catalog
        if not any(d.name == SAMPLE_DATASET for d in catalog.list_datasets(SAMPLE_PROJECT)):
            with tempfile.TemporaryDirectory(prefix="kpl-digits-") as tmp:
                out = Path(tmp) / "digits"
                done = subprocess.run(
                    [python, str(script), str(out)], capture_output=True, text=True, check=False
                )
                if done.returncode != 0:
                    print(f"kpl-lab up: no sample data: {script.name} failed: {done.stderr.strip()[-500:]}")
                    return False
                catalog.add_dataset(
                    SAMPLE_PROJECT, SAMPLE_DATASET, out, description="handwritten digits (UCI optdigits)"
                )
        present = {a.name for a in catalog.list_algorithms(SAMPLE_PROJECT)}
        for name in algorithms:
            if name not in present:
                catalog.add_algorithm(SAMPLE_PROJECT, examples / "algorithms" / name, name=name)
    except (KPLError, ValueError, OSError) as error:
        print(f"kpl-lab up: no sample data: {error}")
        return False
    finally:
        platform.close()
    print(
        f"kpl-lab up: sample data in project {SAMPLE_PROJECT!r}: dataset {SAMPLE_DATASET!r}, "
        f"algorithm{'s' if len(algorithms) > 1 else ''} {', '.join(map(repr, algorithms))}"
    )
    return True


if __name__ == "__main__":
    sys.exit(main())
