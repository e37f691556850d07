"""How soon the platform service answers the hub after its start, and how soon its API serves.

`python -m kpl_lab.hub.service` runs from a source tree (`--code`, default this checkout) against
a stand-in hub (every hub API call answers `[]`), with `--busy N` processes spinning beside it.
The hub counts any answer below 500 at the service's URL as up, within the service's `timeout`
(30 s unless configured); the API is ready once `/services/kpl/api/version` answers other than
503. Prints one JSON line.

    python benchmarks/service_start.py
    python benchmarks/service_start.py --busy 4 --code /tmp/kpl-before
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIVE_UP_SECONDS = 300.0


class StandInHub(http.server.BaseHTTPRequestHandler):
    """Answer every hub API call with an empty list (no users, no groups)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"[]")

    def log_message(self, *args):
        pass


def status(port: int, path: str) -> int:
    """Return the status of GET `path` on the service, 0 while nothing listens."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    """Start the service once and print when it first answered and when its API served."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="source tree to run the service from")
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU meanwhile")
    args = parser.parse_args(argv)
    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInHub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = tempfile.mkdtemp(prefix="kpl-service-start-")
    env = {
        **os.environ,
        "PYTHONPATH": str(args.code),
        "KPL_LAB_HOME": home,
        "JUPYTERHUB_API_URL": f"http://127.0.0.1:{hub.server_address[1]}/hub/api",
        "JUPYTERHUB_API_TOKEN": "stand-in",
        "JUPYTERHUB_CLIENT_ID": "service-kpl",
        "JUPYTERHUB_SERVICE_NAME": "kpl",
        "JUPYTERHUB_SERVICE_PREFIX": "/services/kpl/",
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_OAUTH_CALLBACK_URL": "/services/kpl/oauth_callback",
        "JUPYTERHUB_OAUTH_ACCESS_SCOPES": "[]",
    }
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    started = time.monotonic()
    service = subprocess.Popen(
        [sys.executable, "-m", "kpl_lab.hub.service", f"--Platform.home={home}"],
        env=env,
        cwd=args.code,  # `-m` puts the working folder first on the path
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = ready = None
    try:
        while ready is None and time.monotonic() - started < GIVE_UP_SECONDS:
            answered = status(port, "/")
            if first is None and 0 < answered < 500:
                first = time.monotonic() - started
            if status(port, "/services/kpl/api/version") not in (0, 503):
                ready = time.monotonic() - started
            time.sleep(0.05)
    finally:
        service.terminate()
        service.wait()
        for process in spinning:
            process.kill()
            process.wait()
        hub.shutdown()
        shutil.rmtree(home, ignore_errors=True)
    print(
        json.dumps(
            {
                "code": str(args.code),
                "busy_processes": args.busy,
                "first_answer_s": round(first, 2) if first is not None else None,
                "api_ready_s": round(ready, 2) if ready is not None else None,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
