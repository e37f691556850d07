"""Run a real JupyterHub for the hub browser tests: the KPL spawner and service, a temp home, until SIGTERM.

The port and the admin API token come from KPL_HUB_PORT and KPL_HUB_TOKEN (chosen by
playwright.hub.config.js). Projects: `demo` (the admin, `admin`) with the sample data
`kpl-lab up` adds (the digits dataset and the mlp-classification algorithm), `nlp`
(alice; no notebook allowed) and `vision` (bob); the profile `gpu` is for `vision` only. The
machine has 2 CPUs for the platform, whatever this one has (the small machine of the first
hour's walk).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from kpl_lab.hub.up import load_secrets, parse, render_config, set_up_demo

PROFILES = [
    {"slug": "small", "display_name": "Small CPU notebook", "cpu": 1, "cpu_max": 2, "memory": 512,
     "memory_max": 1024, "default": True},
    {"slug": "gpu", "display_name": "One GPU", "cpu": 1, "cpu_max": 2, "memory": 512, "memory_max": 1024,
     "accelerator": "gpu", "accelerators": 1, "accelerators_max": 1, "projects": ["vision"]},
]  # fmt: skip
GROUPS = {
    "nlp": {"users": ["alice"], "properties": {"kpl_quota": {"cpu": 2, "memory": 2048, "notebooks": 0}}},
    "vision": {"users": ["bob"], "properties": {"kpl_quota": {"cpu": 4, "memory": 4096, "gpu": 1}}},
}
MACHINE_CPUS = 2
SCOPES = [
    "admin:users",
    "admin:groups",
    "admin:servers",
    "list:users",
    "list:groups",
    "read:groups",
    "read:servers",
]


def config_text(home: Path, args: argparse.Namespace, token: str) -> str:
    """Return the hub configuration of `kpl-lab up` with the test profiles, projects and an API token."""
    creds, _ = load_secrets(home / "hub", args.admin)
    extra = [
        f"c.KPLSpawner.profiles = {PROFILES!r}",
        f"c.JupyterHub.load_groups.update({GROUPS!r})",
        # notebooks load the lab extension JUPYTER_PATH names, if any (a build under test)
        "c.Spawner.env_keep.append('JUPYTER_PATH')",
        "c.Spawner.http_timeout = 120  # a single-user server on a busy 2-core machine starts slowly",
        # the first hour's walk on the small machine of issue 31, whatever cores this one has: two
        # members' notebooks and a deployment share 2 CPUs
        f"c.Ledger.cpu = {MACHINE_CPUS}",
        "c.Spawner.start_timeout = 120",
        f"c.JupyterHub.services.append({{'name': 'tester', 'api_token': {token!r}}})",
        f"c.JupyterHub.load_roles.append({{'name': 'tester', 'services': ['tester'], 'scopes': {SCOPES!r}}})",
    ]
    return render_config(args, home, creds) + "\n".join(extra) + "\n"


def main() -> int:
    """Start the hub in a temp home, stop it and all it started on SIGTERM or SIGINT, remove the home."""
    port, token = int(os.environ["KPL_HUB_PORT"]), os.environ["KPL_HUB_TOKEN"]
    args = parse(["--authenticator", "dummy", "--port", str(port)])
    home = Path(tempfile.mkdtemp(prefix="kpl-hub-ui-"))
    try:
        (home / "hub").mkdir()
        config = home / "hub" / "jupyterhub_config.py"
        config.write_text(config_text(home, args, token))
        set_up_demo(
            home, args, sys.executable
        )  # jobs run this Python (no users' Python: not as their accounts)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "KPL_"))}
        hub = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=home / "hub", env=env
        )
        signal.signal(signal.SIGTERM, lambda *_: hub.terminate())
        signal.signal(signal.SIGINT, lambda *_: hub.terminate())
        seen: dict[int, psutil.Process] = {}
        while hub.poll() is None:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(hub.pid).children(recursive=True):
                    seen.setdefault(child.pid, child)
            with contextlib.suppress(subprocess.TimeoutExpired):
                hub.wait(timeout=1)
        left = [p for p in seen.values() if p.is_running()]
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=30)
        return hub.returncode
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
