"""A real `kpl-lab up` started as root, and members who attack it through its REST API and their own processes.

The platform runs as a service account of the test's own (`<prefix stem>svc`), users as their
accounts (`<prefix>alice`), through the privileged helper: exactly the embedded default.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from kpl_lab.hub.up import free_port
from kpl_lab.testing.accounts import remove_accounts

DEADLINE = 180.0  # seconds: only so that a broken start fails instead of hanging


def wait_for(check: Callable[[], Any], what: str, deadline: float = DEADLINE) -> Any:
    """Return the first true value of check(), or fail naming what never happened."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{what} did not happen within {deadline:.0f} s")
        time.sleep(0.2)


class Up:
    """`kpl-lab up` as root: start it, make members and projects, call its API as them, stop it."""

    def __init__(self, folder: Path, user_python: str, prefix: str) -> None:
        self.folder = folder
        self.home = folder / "home"
        self.prefix = prefix
        self.service = prefix.rstrip("-") + "svc"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "up.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "KPL_"))}
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kpl_lab.cli",
                    "up",
                    f"--home={self.home}",
                    f"--port={self.port}",
                    "--authenticator=dummy",
                    f"--user-python={user_python}",
                    f"--service-account={self.service}",
                    f"--account-prefix={prefix}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=folder,
            )
        try:
            wait_for(lambda: self._exited() or "KPL Lab at" in self.log(), "kpl-lab up's start")
        except AssertionError as error:
            raise AssertionError(f"{error}:\n{self.log()[-3000:]}") from None
        self._exited()
        self.admin = self.token("admin", password="anything")
        wait_for(lambda: self.get("/services/kpl/api/version", self.admin).status_code == 200, "the service")

    def _exited(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"kpl-lab up exited with {self.process.returncode}:\n{self.log()[-3000:]}")
        return False

    def log(self) -> str:
        return self.log_path.read_text()

    def token(self, user: str, password: str = "anything") -> str:
        """Return a new API token of `user` (the dummy authenticator takes any password)."""
        answer = requests.post(
            f"{self.url}/hub/api/users/{user}/tokens",
            json={"auth": {"username": user, "password": password}, "note": "security test"},
            timeout=60,
        )
        assert answer.status_code == 201, answer.text
        return answer.json()["token"]

    def hub(self, method: str, path: str, **kwargs) -> requests.Response:
        """Call the hub's REST API as the admin."""
        return requests.request(
            method,
            f"{self.url}/hub/api/{path}",
            headers={"Authorization": f"token {self.admin}"},
            timeout=60,
            **kwargs,
        )

    def project(self, name: str, users: list[str], quota: dict | None = None) -> None:
        """Make the users and a project (hub group) holding them."""
        for user in users:
            assert self.hub("POST", f"users/{user}").status_code in (201, 409)
        assert self.hub("POST", f"groups/{name}", json={"users": users}).status_code in (201, 409)
        if quota is not None:
            assert self.hub("PUT", f"groups/{name}/properties", json={"kpl_quota": quota}).status_code == 200

    def request(self, method: str, path: str, token: str, **kwargs) -> requests.Response:
        """Call the platform through the proxy as the owner of `token`."""
        headers = {"Authorization": f"token {token}", **kwargs.pop("headers", {})}
        return requests.request(
            method, self.url + path, headers=headers, timeout=kwargs.pop("timeout", 120), **kwargs
        )

    def get(self, path: str, token: str, **kwargs) -> requests.Response:
        return self.request("GET", path, token, **kwargs)

    def post(self, path: str, token: str, **kwargs) -> requests.Response:
        return self.request("POST", path, token, **kwargs)

    def api(self, path: str, project: str) -> str:
        """Return the service's URL path of an API route in a project."""
        joiner = "&" if "?" in path else "?"
        return f"/services/kpl/api/{path.lstrip('/')}{joiner}project={project}"

    def service_process(self) -> psutil.Process:
        """Return the platform service's process."""
        for process in psutil.Process(self.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "kpl_lab.hub.service" in " ".join(process.cmdline()):
                    return process
        raise AssertionError("no platform service is running")

    def secrets(self) -> dict[str, str]:
        """Return every credential of the platform's (read as root): none may reach a member's process."""
        found = json.loads((self.home / "hub" / "secrets.json").read_text())
        config = (self.home / "hub" / "jupyterhub_config.py").read_text()
        tokens = set(re.findall(r"['\"]([0-9a-f]{64})['\"]", config))
        service = self.service_process()
        env = service.environ()
        secrets = {f"token {i}": token for i, token in enumerate(sorted(tokens))}
        secrets |= {key: value for key, value in found.items() if "password" in key}
        secrets |= {key: value for key, value in env.items() if "TOKEN" in key and value}
        secrets["cookie secret"] = (self.home / "hub" / "jupyterhub_cookie_secret").read_bytes().hex()
        return secrets

    def stop(self) -> None:
        """Stop `kpl-lab up` as a person would (SIGTERM) and wait for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="package")
def up(tmp_path_factory, user_python) -> Iterator[Up]:
    """Return one `kpl-lab up` as root shared by this folder's tests (each uses projects of its own)."""
    import secrets as random
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root")
    prefix = f"ks{random.token_hex(2)}-"
    folder = Path(tempfile.mkdtemp(prefix="kpl-security-"))
    folder.chmod(0o711)  # the platform's account and users pass through to the home
    running = None
    try:
        running = Up(folder, user_python, prefix)
        yield running
    finally:
        if running is not None:
            running.stop()
        remove_accounts(prefix)
        shutil.rmtree(folder, ignore_errors=True)
