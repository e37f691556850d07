"""Measure what the platform's metrics (and audit) cost on the request path: server CPU per request, with and without.

A real `jupyter server` with kpl_lab serves kept-alive GET requests from one client; its
process's CPU time (user + system, from psutil) over the requests, divided by their number,
is a request's CPU. "without" runs the same server with the two calls of `KPLHandler.on_finish`
(`observe_request`, `note_request`) replaced by no-ops. Runs alternate, with and without, so
a busy machine weighs on both alike; the background round is slowed to once an hour so it
does not count. Beside it, the two calls alone, timed in this process on a finished handler.

    python benchmarks/metrics_cost.py                        # 3000 requests a run, 3 runs each way
    python benchmarks/metrics_cost.py --requests 300 --runs 1
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import psutil

ROUTES = ("/kpl/api/version", "/kpl/api/datasets", "/kpl/api/jobs?state=running")
# the server, with `off`: the request path's metrics and audit calls replaced by no-ops
LAUNCH = """
import sys
if sys.argv[1] == "off":
    import kpl_lab.server_ext.base as base
    base.observe_request = lambda handler: None
    base.note_request = lambda handler, audit: None
from jupyter_server.serverapp import main
sys.argv = ["jupyter-server", *sys.argv[2:]]
sys.exit(main())
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


MIN_CPU = 0.2  # seconds of the server's CPU each measure spans at least


class Server:
    """A jupyter server with kpl_lab on a temp home, metrics on or off."""

    def __init__(self, root: Path, metrics: bool) -> None:
        self.port, self.token = free_port(), secrets.token_hex(16)
        home, config = root / "home", root / "config"
        config.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "KPL_LAB_HOME": str(home), "JUPYTER_CONFIG_DIR": str(config)}
        env.pop("KPL_API_URL", None)
        self.log = open(root / f"server-{metrics}.log", "wb")  # noqa: SIM115 - closed by stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                LAUNCH,
                "on" if metrics else "off",
                "--allow-root",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={self.port}",
                "--ServerApp.port_retries=0",
                f"--ServerApp.token={self.token}",
                f"--ServerApp.root_dir={root}",
                "--ServerApp.jpserver_extensions=kpl_lab=True",
                "--KPLLab.poll_seconds=3600",
                "--ServerApp.log_level=WARN",
            ],
            env=env,
            cwd=root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        deadline = time.monotonic() + 120
        while self.get(ROUTES[0], check=False) != 200:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"the server did not start: {(root / f'server-{metrics}.log').read_text()[-2000:]}"
                )
            time.sleep(0.3)

    def get(self, path: str, check: bool = True) -> int:
        try:
            self.connection.request("GET", path, headers={"Authorization": f"token {self.token}"})
            answer = self.connection.getresponse()
            answer.read()
        except OSError:
            self.connection.close()
            return 0
        if check and answer.status != 200:
            raise SystemExit(f"{path}: {answer.status}")
        return answer.status

    def cpu_per_request(self, path: str, requests: int) -> float:
        """Return the server's CPU seconds per request of `path` over `requests` requests."""
        for _ in range(50):  # warm: caches, the first connection's setup
            self.get(path)
        process = psutil.Process(self.process.pid)
        before = process.cpu_times()

        def used() -> float:
            after = process.cpu_times()
            return after.user - before.user + after.system - before.system

        done = 0
        while done < requests or used() < MIN_CPU:  # CPU times tick by 10 ms: enough ticks to read
            self.get(path)
            done += 1
        return used() / done

    def stop(self) -> None:
        self.connection.close()
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def calls_alone(number: int = 20000) -> float:
    """Return the seconds the two calls take on a finished request, in this process."""
    from types import SimpleNamespace

    from kpl_lab.monitoring.audit import note_request
    from kpl_lab.monitoring.metrics import observe_request
    from kpl_lab.server_ext.routes import ROUTES, handler_of

    DatasetsHandler = handler_of(next(route for route in ROUTES if route.path == "/datasets"))  # noqa: N806

    request = SimpleNamespace(
        method="GET", request_time=lambda: 0.0012, path="/kpl/api/datasets", remote_ip="127.0.0.1"
    )
    handler = DatasetsHandler.__new__(DatasetsHandler)  # the route's class, as tornado made it
    handler.request, handler.path_args = request, []
    handler.get_status = lambda: 200
    audit = SimpleNamespace(record=lambda *a, **k: None)

    def both() -> None:
        observe_request(handler)
        note_request(handler, audit)

    return min(timeit.repeat(both, number=number, repeat=5)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per route and run")
    parser.add_argument("--runs", type=int, default=3, help="runs with and without, alternately")
    args = parser.parse_args()
    measured: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="kpl-metrics-cost-") as folder:
        for run in range(args.runs):
            for metrics in (True, False) if run % 2 == 0 else (False, True):
                server = Server(Path(folder) / f"run-{run}-{metrics}", metrics)
                try:
                    for route in ROUTES:
                        measured.setdefault((route, metrics), []).append(
                            server.cpu_per_request(route, args.requests)
                        )
                finally:
                    server.stop()
    alone = calls_alone()
    print(f"server CPU per request, median of {args.runs} run(s) of {args.requests} requests each way")
    print(f"{'route':32} {'without µs':>11} {'with µs':>9} {'ratio':>7}   runs without | with (µs)")
    ratios = []
    for route in ROUTES:
        without = statistics.median(measured[(route, False)]) * 1e6
        with_ = statistics.median(measured[(route, True)]) * 1e6
        ratios.append(with_ / without)
        runs = " ".join(f"{v * 1e6:.0f}" for v in measured[(route, False)])
        runs += " | " + " ".join(f"{v * 1e6:.0f}" for v in measured[(route, True)])
        print(f"{route:32} {without:11.1f} {with_:9.1f} {with_ / without:7.3f}   {runs}")
    cheapest = min(statistics.median(measured[(route, False)]) for route in ROUTES)
    print(f"the two calls alone (observe_request + note_request): {alone * 1e6:.2f} µs")
    print(f"that is {100 * alone / cheapest:.2f} % of the cheapest route's CPU (target: 2 % or less)")
    print(f"median ratio with / without: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
