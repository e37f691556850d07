"""Measure what hostile dataset uploads cost a running server: API latency during bombs, memory of a big entry.

A real Jupyter server with kpl_lab runs in a subprocess on a temporary home; the numbers
are that process's. Two measurements:

- latency: four `.tar.gz` bombs are uploaded at once (each a few MB that inflates to
  --bomb-gib GiB in members that each look legitimate), while one client asks
  `GET /kpl/api/datasets` back to back; the p50/p99/max of those requests, the wall time
  until every bomb was answered and the server's CPU seconds are reported, beside the
  same GET with no upload running.
- the same GET while four legitimate imports run at once (zips of one --legit-mib MiB
  entry each): imports must not take the threads that answer catalog queries.
- memory: one zip holding a single --entry-mib MiB entry (compressible about 100:1, under
  the ratio limit, so it is imported) is uploaded; the server's RSS is sampled every
  20 ms, and its peak total and anonymous (heap) RSS above the idle server are reported.

`--code DIR` runs the server from another source tree (e.g. `git worktree add` of an
older commit) to compare before and after on the same machine.

    python benchmarks/imports.py
    python benchmarks/imports.py --bomb-gib 4 --entry-mib 512 --code /tmp/kpl-base
    python benchmarks/imports.py --json after.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import psutil
import requests

MiB = 1 << 20
GiB = 1 << 30
ZEROS_MEMBER = 64 * MiB
MEMBER_GIB = 3  # under the 4 GiB per-file limit: every header looks legitimate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_bomb(path: Path, total_gib: int) -> None:
    """Write a tar.gz of members of zeros, MEMBER_GIB GiB each, `total_gib` GiB in all.

    It is a concatenation of gzip members (one per tar header, then the same compressed
    64 MiB of zeros repeated), which every gzip reader reads as one stream.
    """
    zeros = gzip.compress(bytes(ZEROS_MEMBER), compresslevel=9)
    left = total_gib * GiB
    with open(path, "wb") as out:
        index = 0
        while left > 0:
            size = min(MEMBER_GIB * GiB, left)
            info = tarfile.TarInfo(f"data/{index}.bin")
            info.size = size
            out.write(gzip.compress(info.tobuf(tarfile.GNU_FORMAT)))
            for _ in range(size // ZEROS_MEMBER):
                out.write(zeros)
            left -= size
            index += 1
        out.write(gzip.compress(bytes(1024)))  # end of archive


def make_big_entry_zip(path: Path, entry_mib: int) -> None:
    """Write a zip of one `entry_mib` MiB entry that deflates about 100:1."""
    chunk = bytearray(64 * 1024)
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("big.bin", "w", force_zip64=True) as out,
    ):
        for i in range(entry_mib * 16):
            chunk[:480] = os.urandom(480)  # the rest of each 64 KiB stays zeros
            chunk[-4:] = i.to_bytes(4, "little")
            out.write(chunk)


class Server:
    """A Jupyter server with kpl_lab in a subprocess, on a temporary home."""

    def __init__(self, home: Path, code: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/kpl/api"
        self.token = "bench-token"
        self.headers = {"Authorization": f"token {self.token}"}
        config = home / "jupyter_server_config.py"
        config.write_text(
            "c.ServerApp.jpserver_extensions = {'kpl_lab': True}\n"
            f"c.KPLLab.home = {str(home / 'kpl')!r}\n"
            "c.KPLLab.poll_seconds = 2.0\n"
        )
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"))
        env["PYTHONPATH"] = f"{code}{os.pathsep}{env.get('PYTHONPATH', '')}"
        self.log = open(home / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                f"--config={config}",
                f"--port={self.port}",
                "--ip=127.0.0.1",
                "--no-browser",
                "--allow-root",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={home}",
            ],
            env=env,
            cwd=home,  # not the caller's folder: `python -m` would import kpl_lab from there first
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.ps = psutil.Process(self.process.pid)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/datasets", headers=self.headers, timeout=5).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"the server did not start: see {home / 'server.log'}")

    def cpu_seconds(self) -> float:
        times = self.ps.cpu_times()
        return times.user + times.system

    def memory(self) -> tuple[int, int]:
        """Return (RSS, anonymous RSS) in bytes."""
        fields = {}
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields["VmRSS"], fields["RssAnon"]

    def upload(self, path: Path, name: str) -> tuple[int, str, float]:
        start = time.perf_counter()
        with open(path, "rb") as body:
            response = requests.post(
                f"{self.url}/datasets",
                params={"name": name, "filename": path.name},
                data=body,
                headers=self.headers,
                timeout=3600,
            )
        message = response.json().get("message", "") if response.status_code >= 400 else ""
        return response.status_code, message, time.perf_counter() - start

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def probe(server: Server, stop: threading.Event, times: list[float]) -> None:
    """GET /datasets back to back until STOP, recording each latency."""
    with requests.Session() as session:
        while not stop.is_set():
            start = time.perf_counter()
            response = session.get(f"{server.url}/datasets", headers=server.headers, timeout=600)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200, response.text


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_stats(times: list[float]) -> dict:
    return {
        "requests": len(times),
        "p50_ms": 1000 * statistics.median(times),
        "p99_ms": 1000 * percentile(times, 0.99),
        "max_ms": 1000 * max(times),
    }


def measure_idle(server: Server, seconds: float) -> dict:
    stop, idle = threading.Event(), []
    thread = threading.Thread(target=probe, args=(server, stop, idle))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join()
    return latency_stats(idle)


def measure_latency(server: Server, archive: Path, uploads: int, label: str) -> dict:
    stop, busy, answers = threading.Event(), [], []
    cpu_before = server.cpu_seconds()
    prober = threading.Thread(target=probe, args=(server, stop, busy))
    workers = [
        threading.Thread(target=lambda i=i: answers.append(server.upload(archive, f"{label}{i}")))
        for i in range(uploads)
    ]
    start = time.perf_counter()
    prober.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - start
    stop.set()
    prober.join()
    return {
        "get": latency_stats(busy),
        "answered_s": wall,
        "server_cpu_s": server.cpu_seconds() - cpu_before,
        "answers": sorted({(code, message[:160]) for code, message, _ in answers}),
    }


def measure_memory(server: Server, archive: Path) -> dict:
    idle_rss, idle_anon = server.memory()
    peak = [idle_rss, idle_anon]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            rss, anon = server.memory()
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], anon)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    code, message, seconds = server.upload(archive, "big")
    stop.set()
    sampler.join()
    return {
        "status": code,
        "message": message[:160],
        "import_s": seconds,
        "idle_rss_mb": idle_rss / MiB,
        "idle_anon_rss_mb": idle_anon / MiB,
        "peak_rss_mb": peak[0] / MiB,
        "peak_anon_rss_mb": peak[1] / MiB,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bomb-gib", type=int, default=16, help="GiB each bomb inflates to (default 16)")
    parser.add_argument("--uploads", type=int, default=4, help="bombs uploaded at once (default 4)")
    parser.add_argument("--entry-mib", type=int, default=512, help="size of the big zip entry (default 512)")
    parser.add_argument(
        "--legit-mib",
        type=int,
        default=128,
        help="entry size of the legitimate imports run at once (default 128)",
    )
    parser.add_argument("--idle-seconds", type=float, default=5.0, help="GET probing with nothing running")
    parser.add_argument("--code", type=Path, help="source tree to run the server from (default: this one)")
    parser.add_argument("--workdir", type=Path, help="where archives are built and kept (default: temp)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    work = args.workdir or Path(tempfile.gettempdir()) / "kpl-bench-imports"
    work.mkdir(parents=True, exist_ok=True)
    bomb = work / f"bomb-{args.bomb_gib}gib.tar.gz"
    if not bomb.exists():
        make_bomb(bomb, args.bomb_gib)
    big = work / f"entry-{args.entry_mib}mib.zip"
    if not big.exists():
        make_big_entry_zip(big, args.entry_mib)
    legit = work / f"entry-{args.legit_mib}mib.zip"
    if not legit.exists():
        make_big_entry_zip(legit, args.legit_mib)
    print(
        f"bomb: {bomb.stat().st_size / MiB:.1f} MB inflating to {args.bomb_gib} GiB; "
        f"big entry zip: {big.stat().st_size / MiB:.1f} MB holding {args.entry_mib} MiB"
    )

    code = args.code or Path(__file__).resolve().parents[1]
    results = {"code": str(code)}
    with tempfile.TemporaryDirectory(prefix="kpl-bench-", dir=work) as home:
        server = Server(Path(home), code)
        try:
            results["idle"] = measure_idle(server, args.idle_seconds)
            results["bombs"] = measure_latency(server, bomb, args.uploads, "bomb")
            results["memory"] = measure_memory(server, big)
            results["imports"] = measure_latency(server, legit, args.uploads, "legit")
        finally:
            server.stop()

    mem = results["memory"]
    print(f"\nGET /kpl/api/datasets back to back, while {args.uploads} uploads run at once")
    print(
        f"{'':>20} {'requests':>9} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'answered s':>11} {'CPU s':>7}"
    )
    idle = results["idle"]
    print(
        f"{'nothing else':>20} {idle['requests']:>9} {idle['p50_ms']:>9.1f} {idle['p99_ms']:>9.1f} {idle['max_ms']:>9.1f}"
    )
    for label, key in (("bombs", "bombs"), (f"{args.legit_mib} MiB imports", "imports")):
        row, get = results[key], results[key]["get"]
        print(
            f"{label:>20} {get['requests']:>9} {get['p50_ms']:>9.1f} {get['p99_ms']:>9.1f} {get['max_ms']:>9.1f} "
            f"{row['answered_s']:>11.1f} {row['server_cpu_s']:>7.1f}"
        )
        for code, message in row["answers"]:
            print(f"{'':>20}   {code} {message}")
    print(f"\n{args.entry_mib} MiB zip entry: {mem['status']} in {mem['import_s']:.1f} s {mem['message']}")
    print(
        f"server RSS idle {mem['idle_rss_mb']:.0f} MB, peak {mem['peak_rss_mb']:.0f} MB; "
        f"anonymous (heap) RSS idle {mem['idle_anon_rss_mb']:.0f} MB, peak {mem['peak_anon_rss_mb']:.0f} MB"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
