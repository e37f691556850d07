"""Measure the job engine: start latency against a bare Popen, metric costs, memory while a job prints a lot.

Everything runs for real in a temporary platform home: detached supervisors (forked
from the forkserver, and for comparison started as a new Python each), the SQLite
database, cgroups when writable. Each latency is the median of --repeat runs.

    python benchmarks/jobs.py                      # 10 starts, 200k metric events, 1 GB of output
    python benchmarks/jobs.py --repeat 5 --events 50000 --log-mb 100 --points 200000
    python benchmarks/jobs.py --repeat 20 --start-only   # the start ratio alone

The start ratio is the median over pairs (one submit, one bare Popen of the same
`python first.py`, in turns first) of submit -> first line / bare Popen -> first line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

FIRST_LINE = "import time\nprint(repr(time.time()), flush=True)\n"
PRINT_MB = """\
import sys
line = b"x" * 1023 + b"\\n"
block = line * 1024
for _ in range({mb}):
    sys.stdout.buffer.write(block)
sys.stdout.buffer.flush()
"""
PUSH = """\
import time
from kpl_helper import metric
figure = metric.MetricFigure("loss", y1_name="train")
n = {n}
start = time.perf_counter()
for i in range(n):
    figure.push_metric(x=i, y1=1.0 / (i + 1))
print((time.perf_counter() - start) / n)
"""


def add_algorithm(platform, folder: Path, name: str, files: dict[str, str], cmd: str, memory: int = 512):
    folder = folder / name
    folder.mkdir(parents=True)
    (folder / "environment.yml").write_text(
        f"version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n"
        f"      memory: {memory}\n  cmd: {cmd}\n"
    )
    (folder / "parameter.yml").write_text("x: 1\n")
    for file, text in files.items():
        (folder / file).write_text(text)
    return platform.catalog.add_algorithm("bench", folder)


def wait_final(platform, job_id: str):
    while not (job := platform.jobs.get("bench", job_id)).is_final:
        time.sleep(0.02)
    return job


def first_line(path: Path) -> str:
    while True:
        try:
            with open(path) as log:
                line = log.readline()
            if line.endswith("\n"):
                return line
        except FileNotFoundError:
            pass
        time.sleep(0.001)


def bench_start(platform, src: Path, repeat: int) -> tuple[float, float, float, float, float]:
    """Return the medians of submit -> first line and of the bare Popen, the median of their ratios,
    and the medians of the job's line -> its end recorded (`succeeded`) and -> the bare Popen's exit seen.

    The two run in pairs, in turns first (a load that comes and goes hits both alike);
    each pair's ratio compares two starts a moment apart. The job prints one line and
    exits, so the end's time is what recording it costs (polled every 20 ms).
    """
    from kpl_lab.api.jobs import JobRequest
    from kpl_lab.engine.runfolder import is_alive

    add_algorithm(platform, src, "first", {"first.py": FIRST_LINE}, "python first.py")
    script = src / "first" / "first.py"

    def bare_start() -> tuple[float, float]:
        start = time.time()
        process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
        printed = float(process.stdout.readline())
        process.communicate()
        return printed - start, time.time() - printed

    def our_start() -> tuple[float, float]:
        start = time.time()
        job = platform.jobs.submit(JobRequest(project="bench", algorithm="first"))
        printed = float(first_line(platform.jobs.run_dir(job) / "output.log"))
        handle = wait_final(platform, job.id).handle
        end = time.time() - printed
        # as communicate() waits for the bare Python's exit: the supervisor's last writes are done
        while is_alive(handle.get("supervisor_pid"), handle.get("supervisor_start")):
            time.sleep(0.005)
        return printed - start, end

    our_start()  # the forkserver starts once per server, with its first job: not counted
    bare_start()
    ours, bare = [], []  # (start, end) pairs
    for i in range(repeat):
        if i % 2:
            ours.append(our_start())
            bare.append(bare_start())
        else:
            bare.append(bare_start())
            ours.append(our_start())
    ratio = statistics.median(o[0] / b[0] for o, b in zip(ours, bare, strict=True))
    return (
        statistics.median(o[0] for o in ours),
        statistics.median(b[0] for b in bare),
        ratio,
        statistics.median(o[1] for o in ours),
        statistics.median(b[1] for b in bare),
    )


def bench_push(n: int, folder: Path) -> float:
    env = dict(os.environ, KPL_INNER="1", KPL_ENV="job", KPL_EVENTS_FILE=str(folder / "push.jsonl"))
    out = subprocess.run(
        [sys.executable, "-c", PUSH.format(n=n)], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.split()[-1])


def bench_ingest(platform, src: Path, events: int) -> tuple[float, str]:
    from kpl_lab.api.jobs import JobRequest

    add_algorithm(platform, src, "empty", {"empty.py": "pass\n"}, "python empty.py")
    job = wait_final(platform, platform.jobs.submit(JobRequest(project="bench", algorithm="empty")).id)
    path = platform.jobs.run_dir(job) / "events.jsonl"
    with open(path, "a") as out:
        for i in range(events):
            event = {
                "type": "metric",
                "time": 1e9 + i,
                "title": "loss",
                "x": i,
                "values": {"train": i % 97, "val": i % 89},
            }
            out.write(json.dumps(event) + "\n")
    start = time.perf_counter()
    platform.jobs.ingest(job.id)
    seconds = time.perf_counter() - start
    return 2 * events / seconds, job.id


def bench_metrics_query(platform, job_id: str) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        figures = platform.jobs.metrics("bench", job_id, max_points=1000)
        times.append(time.perf_counter() - start)
        assert all(len(points) <= 1000 for series in figures.values() for points in series.values())
    return statistics.median(times)


def bench_output_memory(platform, src: Path, mb: int) -> tuple[float, float, float, float]:
    from kpl_lab.api.jobs import JobRequest

    add_algorithm(platform, src, "talk", {"talk.py": PRINT_MB.format(mb=mb)}, "python talk.py")
    me = psutil.Process()
    before = me.memory_info().rss
    job = platform.jobs.submit(JobRequest(project="bench", algorithm="talk"))
    peak = {"supervisor": 0, "server": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            handle = platform.jobs.get("bench", job.id).handle
            try:
                rss = psutil.Process(handle["supervisor_pid"]).memory_info().rss
                peak["supervisor"] = max(peak["supervisor"], rss)
            except (KeyError, psutil.Error):
                pass
            peak["server"] = max(peak["server"], me.memory_info().rss)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    read = sum(len(line) + 1 for line in platform.jobs.follow_logs("bench", job.id, follow=True))
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    assert read == mb * 1024 * 1024, read
    return peak["supervisor"] / 2**20, (peak["server"] - before) / 2**20, peak["server"] / 2**20, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--push", type=int, default=100_000, help="push_metric calls timed")
    parser.add_argument("--events", type=int, default=200_000, help="metric events ingested (2 series each)")
    parser.add_argument(
        "--points", type=int, default=1_000_000, help="points of the series queried downsampled"
    )
    parser.add_argument("--log-mb", type=int, default=1024, help="MB of output printed by the job")
    parser.add_argument(
        "--start-only", action="store_true", help="measure the start against a bare Popen, nothing else"
    )
    args = parser.parse_args()
    from traitlets.config import Config

    from kpl_lab.platform import Platform

    with tempfile.TemporaryDirectory(prefix="kpl-bench-") as tmp:
        tmp_path = Path(tmp)
        config = Config({"LocalExecutor": {"tick_seconds": 0.5}})
        platform = Platform(home=str(tmp_path / "home"), config=config)
        src = tmp_path / "src"
        ours, bare, ratio, our_end, bare_end = bench_start(platform, src, args.repeat)
        if args.start_only:
            platform.close()
            print(
                f"job start on {os.cpu_count()} CPUs, {args.repeat} pairs, load average {os.getloadavg()[0]:.1f}"
            )
            print(f"submit -> first line of user code  {ours * 1000:.0f} ms  bare Popen {bare * 1000:.0f} ms")
            print(f"ratio: median of the pairs {ratio:.2f}x, of the medians {ours / bare:.2f}x")
            print(
                f"last line -> end recorded  {our_end * 1000:.0f} ms  bare Popen's exit {bare_end * 1000:.0f} ms"
            )
            return
        # the same with each supervisor started as a new Python (no forkserver), as before
        config = Config({"LocalExecutor": {"tick_seconds": 0.5, "use_forkserver": False}})
        slow = Platform(home=str(tmp_path / "home-slow"), config=config)
        slow_ours, slow_bare, slow_ratio, _, _ = bench_start(slow, tmp_path / "src-slow", args.repeat)
        slow.close()
        push = bench_push(args.push, tmp_path)
        rate, job_id = bench_ingest(platform, src, args.events)
        _, big_job = bench_ingest(platform, src / "big", args.points // 2)
        query = bench_metrics_query(platform, big_job)
        supervisor_mb, server_growth_mb, server_mb, follow_s = bench_output_memory(platform, src, args.log_mb)
        enforcement = platform.jobs.get("bench", job_id).enforcement
        platform.close()
    rows = [
        (
            "submit -> first line of user code",
            f"{ours * 1000:.0f} ms",
            f"bare Popen {bare * 1000:.0f} ms",
            f"{ratio:.2f}x",
        ),
        (
            "  the same, supervisor as a new Python",
            f"{slow_ours * 1000:.0f} ms",
            f"bare Popen {slow_bare * 1000:.0f} ms",
            f"{slow_ratio:.2f}x",
        ),
        (
            "last line of user code -> end recorded",
            f"{our_end * 1000:.0f} ms",
            f"bare Popen's exit {bare_end * 1000:.0f} ms",
            "",
        ),
        ("push_metric per call", f"{push * 1e6:.2f} us", "", ""),
        (f"metric points ingested ({2 * args.events} points)", f"{rate:,.0f} points/s", "", ""),
        (f"metrics(max_points=1000) over {args.points:,} points", f"{query * 1000:.0f} ms", "", ""),
        (f"supervisor RSS while the job prints {args.log_mb} MB", f"{supervisor_mb:.0f} MB", "", ""),
        (
            f"server RSS following {args.log_mb} MB of logs",
            f"{server_mb:.0f} MB ({server_growth_mb:+.0f} MB)",
            f"{args.log_mb / follow_s:.0f} MB/s",
            "",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"job engine on {os.cpu_count()} CPUs, limits: {enforcement}")
    print(f"{'measure':<{width}}  {'KPL Lab':>22}  {'reference':>22}  ratio")
    for name, value, reference, ratio in rows:
        print(f"{name:<{width}}  {value:>22}  {reference:>22}  {ratio}")


if __name__ == "__main__":
    main()
