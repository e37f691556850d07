"""Measure the multi-user hub: notebook spawn latency and hub API latency with many users.

Two real JupyterHubs on loopback, each with its proxy, SQLite file and the platform service,
configured by `kpl-lab up`'s generator: one with KPLLocalSpawner (profile, project quota,
ledger reservation, cgroup), one with JupyterHub's stock SimpleLocalProcessSpawner. Spawns
alternate between them so that load on the machine hits both alike. Spawn latency is from
`POST /hub/api/users/<name>/server` to the server reported ready. The KPL profile asks for
as many CPUs as the machine has, so its cgroup does not slow the server down.

    python benchmarks/hub.py                      # 7 spawns each, 100 users, 50 API calls each
    python benchmarks/hub.py --spawns 3 --users 100 --calls 20 --json hub.json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from kpl_lab.hub.up import free_port, load_secrets, parse, render_config

DEADLINE = 180.0
CPUS = os.cpu_count() or 1


class Hub:
    """A real JupyterHub run as a subprocess, driven through its REST API by an admin service token."""

    def __init__(self, root: Path, spawner: str) -> None:
        self.root, self.home = root, root / "home"
        (self.home / "hub").mkdir(parents=True)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        token = secrets.token_hex(16)
        creds, _ = load_secrets(self.home / "hub", "admin")
        lines = [
            render_config(parse(["--authenticator", "dummy", "--port", str(port)]), self.home, creds),
            f"c.JupyterHub.services.append({{'name': 'bench', 'api_token': {token!r}}})",
            "c.JupyterHub.load_roles.append({'name': 'bench', 'services': ['bench'], 'scopes': "
            "['admin:users', 'admin:groups', 'admin:servers', 'tokens', 'list:users', 'list:groups']})",
            f"c.Ledger.cpu = {float(CPUS * 8)}",
            f"c.KPLSpawner.profiles = [{{'slug': 'bench', 'cpu': {CPUS}, 'cpu_max': {CPUS}, "
            "'memory': 2048, 'memory_max': 2048, 'default': True}]",
        ]
        if spawner == "stock":
            lines += [
                "c.JupyterHub.spawner_class = 'jupyterhub.spawner.SimpleLocalProcessSpawner'",
                f"c.SimpleLocalProcessSpawner.home_dir_template = {str(self.home / 'users' / '{username}')!r}",
            ]
        config = self.home / "hub" / "jupyterhub_config.py"
        config.write_text("\n".join(lines) + "\n")
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"token {token}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "KPL_"))}
        with open(root / "hub.log", "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(config)],
                cwd=self.home / "hub",
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.wait(lambda: self._status("/hub/api/") == 200, "the hub API")
        self.wait(lambda: self._status("/services/kpl/api/version") in (200, 403), "the platform service")

    def _status(self, path: str) -> int:
        if self.proc.poll() is not None:
            sys.exit(f"hub exited: see {self.root / 'hub.log'}")
        try:
            return self.http.get(self.url + path, timeout=10).status_code
        except requests.ConnectionError:
            return 0

    @staticmethod
    def wait(check, what: str, pause: float = 0.05):
        """Return check()'s first true value, polling every `pause` s."""
        end = time.monotonic() + DEADLINE
        while not (value := check()):
            if time.monotonic() > end:
                sys.exit(f"{what} did not happen within {DEADLINE:.0f} s")
            time.sleep(pause)
        return value

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        """Call the hub REST API."""
        answer = self.http.request(method, f"{self.url}/hub/api/{path}", timeout=60, **kwargs)
        if answer.status_code >= 400:
            sys.exit(f"{method} {path}: {answer.status_code} {answer.text}")
        return answer

    def server(self, user: str) -> dict | None:
        """Return the user's default server model, or None."""
        return self.api("GET", f"users/{user}").json()["servers"].get("")

    def spawn_seconds(self, user: str) -> float:
        """Start the user's notebook, wait until ready, stop it; return seconds to ready."""
        start = time.perf_counter()
        self.api("POST", f"users/{user}/server", json={})
        self.wait(lambda: (s := self.server(user)) and s["ready"], f"{user}'s spawn")
        seconds = time.perf_counter() - start
        self.api("DELETE", f"users/{user}/server")
        self.wait(lambda: self.server(user) is None, f"{user}'s stop", pause=0.2)
        return seconds

    def close(self) -> None:
        """Stop the hub, which stops its notebooks, proxy and service."""
        self.http.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def median_ms(call, count: int) -> float:
    """Return the median milliseconds of `count` calls."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=7, help="spawns per spawner (median of these)")
    parser.add_argument("--users", type=int, default=100, help="users known to the hub for the API latency")
    parser.add_argument("--calls", type=int, default=50, help="calls per API measurement")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kpl-hub-bench-") as tmp:
        kpl = Hub(Path(tmp) / "kpl", "kpl")
        stock = Hub(Path(tmp) / "stock", "stock")
        try:
            for hub in (kpl, stock):
                hub.api("POST", "users/bench")
            kpl.api("POST", "groups/bench", json={"users": ["bench"]})
            kpl.api("PUT", "groups/bench/properties", json={"kpl_quota": {"cpu": CPUS, "notebooks": 1}})
            times: dict[str, list[float]] = {"kpl": [], "stock": []}
            for round_ in range(args.spawns):
                order = [("kpl", kpl), ("stock", stock)]
                for name, hub in order if round_ % 2 == 0 else order[::-1]:
                    times[name].append(hub.spawn_seconds("bench"))
                    print(f"spawn {round_ + 1}/{args.spawns} {name}: {times[name][-1]:.2f} s", flush=True)

            names = [f"user{i:03d}" for i in range(args.users)]
            kpl.api("POST", "users", json={"usernames": names})
            for start in range(0, len(names), 10):  # ten users a project, as groups with quotas
                group = f"project{start // 10:02d}"
                kpl.api("POST", f"groups/{group}", json={"users": names[start : start + 10]})
                kpl.api("PUT", f"groups/{group}/properties", json={"kpl_quota": {"cpu": 4, "notebooks": 2}})
            admin_token = kpl.api("POST", "users/admin/tokens", json={"note": "bench"}).json()["token"]
            with requests.Session() as admin:
                admin.headers["Authorization"] = f"token {admin_token}"
                api = {
                    "GET /hub/api/users (all)": lambda: kpl.api("GET", "users", params={"limit": 500}),
                    "GET /hub/api/users/<one>": lambda: kpl.api("GET", "users/user042"),
                    "GET /hub/api/groups (all)": lambda: kpl.api("GET", "groups"),
                    "PUT /hub/api/groups/<one>/properties": lambda: kpl.api(
                        "PUT", "groups/project03/properties", json={"kpl_quota": {"cpu": 4, "notebooks": 2}}
                    ),
                    "GET /services/kpl/admin/api/overview": lambda: admin.get(
                        f"{kpl.url}/services/kpl/admin/api/overview", timeout=60
                    ).raise_for_status(),
                }
                latency = {what: median_ms(call, args.calls) for what, call in api.items()}
        finally:
            kpl.close()
            stock.close()

    medians = {name: statistics.median(values) for name, values in times.items()}
    ratio = medians["kpl"] / medians["stock"]
    print(f"\nspawn to ready, median of {args.spawns} (cores: {CPUS}):")
    print(f"  KPLLocalSpawner            {medians['kpl']:.2f} s  {[round(t, 2) for t in times['kpl']]}")
    print(f"  SimpleLocalProcessSpawner  {medians['stock']:.2f} s  {[round(t, 2) for t in times['stock']]}")
    print(f"  ratio KPL / stock          {ratio:.3f}")
    print(f"\nhub API with {args.users + 2} users, {args.users // 10} projects, median of {args.calls}:")
    for what, ms in latency.items():
        print(f"  {what:40s} {ms:7.1f} ms")
    if args.json:
        result = {"spawn_s": times, "spawn_median_s": medians, "ratio": ratio, "api_ms": latency}
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
