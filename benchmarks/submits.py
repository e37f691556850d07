"""Concurrent job submits from several processes, on SQLite and on PostgreSQL.

Every process opens its own platform on the same home and database and submits its
share of the jobs one after another through `JobService.submit` (check, queue, then the
locked schedule that reserves on the ledger and starts what fits). The machine has
--capacity CPUs and every job asks 1 and waits for a file, so exactly --capacity jobs
run and the rest queue: more running jobs, or more CPUs reserved, are over-allocations.
PostgreSQL is a throwaway server started the way the tests start theirs, with its
default (durable) settings, as SQLite keeps its own (WAL, synchronous commits).

    python benchmarks/submits.py                                   # 1000 submits, 8 processes
    python benchmarks/submits.py --submits 200 --processes 4 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select, update
from traitlets.config import Config

from kpl_lab.catalog.jobs import Job, Reservation
from kpl_lab.platform import Platform
from kpl_lab.testing.load import submit_at_once
from kpl_lab.testing.postgres import PostgresServer

PROJECT = "bench"
WAIT = "import os, time\nwhile not os.path.exists({release!r}):\n    time.sleep(0.1)\n"


def settings(home: Path, database_url: str | None, capacity: int) -> dict:
    """Return the configuration every process of one run opens its platform with."""
    platform = {"home": str(home), **({"database_url": database_url} if database_url else {})}
    return {
        "Platform": platform,
        "Ledger": {"cpu": float(capacity), "memory": 1 << 20, "devices": {"gpu": []}},
        "JobService": {"grace_seconds": 1.0},
    }


def add_algorithm(platform: Platform, folder: Path, release: Path) -> None:
    """Add the trivial algorithm: 1 CPU, waits until the release file exists."""
    folder.mkdir(parents=True)
    (folder / "environment.yml").write_text(
        "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n"
        "      memory: 64\n  cmd: python wait.py\n"
    )
    (folder / "parameter.yml").write_text("x: 1\n")
    (folder / "wait.py").write_text(WAIT.format(release=str(release)))
    platform.catalog.add_algorithm(PROJECT, folder, name="wait")


def run(database_url: str | None, args: argparse.Namespace) -> dict:
    """Submit --submits jobs from --processes processes on one fresh database; return what was measured."""
    with tempfile.TemporaryDirectory(prefix="kpl-submits-") as tmp:
        home, release = Path(tmp) / "home", Path(tmp) / "release"
        config = settings(home, database_url, args.capacity)
        platform = Platform(config=Config(config))
        try:
            add_algorithm(platform, Path(tmp) / "wait", release)
            wall, answers = submit_at_once(config, PROJECT, "wait", args.processes, args.submits)
            errors = [error for *_, error in answers if error]
            latencies = sorted(seconds for _, times, _, _ in answers for seconds in times)
            with platform.session() as session:
                running = session.scalar(select(func.count()).where(Job.state == "running")) or 0
                reserved = session.scalar(select(func.coalesce(func.sum(Reservation.cpu), 0.0)))
                submitted = session.scalar(select(func.count()).select_from(Job)) or 0
            # the queued jobs must not start when the running ones end
            with platform.session(immediate=True) as session:
                session.execute(update(Job).where(Job.state == "queued").values(state="stopped"))
            release.touch()
            for job in platform.jobs.list(PROJECT, state="running"):
                while not platform.jobs.get(PROJECT, job.id).is_final:
                    time.sleep(0.1)
        finally:
            platform.close()
    return {
        "throughput": len(latencies) / wall if wall else 0.0,
        "p50": latencies[len(latencies) // 2] * 1000 if latencies else float("nan"),
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
        if latencies
        else float("nan"),
        "submitted": submitted,
        "running": running,
        "over": max(0, running - args.capacity) + max(0, int(round(reserved - args.capacity))),
        "errors": errors,
    }


def median_of(runs: list[dict]) -> dict:
    """Return the median of each measure over repeated runs (counts: the worst run)."""
    return {
        "throughput": statistics.median(r["throughput"] for r in runs),
        "p50": statistics.median(r["p50"] for r in runs),
        "p99": statistics.median(r["p99"] for r in runs),
        "submitted": min(r["submitted"] for r in runs),
        "running": max(r["running"] for r in runs),
        "over": max(r["over"] for r in runs),
        "errors": [e for r in runs for e in r["errors"]],
    }


def cell(result: dict, base: dict | None, key: str) -> str:
    """Return one measure, with its ratio to the base run when there is one."""
    text = f"{result[key]:.1f}"
    if base is not None and base[key]:
        text += f" ({result[key] / base[key]:.2f}×)"
    return text


def table(results: dict[str, dict], args: argparse.Namespace) -> str:
    """Return the results as a table; ratios are against SQLite."""
    base = results.get("sqlite")
    lines = [
        f"{args.submits} submits from {args.processes} processes, {args.capacity} CPUs, "
        f"median of {args.repeat} run(s)",
        "",
        f"{'database':<12}{'submits/s':>20}{'p50 ms':>20}{'p99 ms':>20}{'jobs':>7}{'running':>9}{'over':>6}",
    ]
    for name, r in results.items():
        compare = base if name != "sqlite" else None
        lines.append(
            f"{name:<12}{cell(r, compare, 'throughput'):>20}{cell(r, compare, 'p50'):>20}"
            f"{cell(r, compare, 'p99'):>20}{r['submitted']:>7}{r['running']:>9}{r['over']:>6}"
        )
    lines.append("")
    lines.append(
        "ratios in brackets: ÷ sqlite; over = jobs running or CPUs reserved beyond capacity (must be 0)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--submits", type=int, default=1000, help="jobs submitted in all (default 1000)")
    parser.add_argument("--processes", type=int, default=8, help="submitting processes (default 8)")
    parser.add_argument("--capacity", type=int, default=5, help="CPUs of the machine; jobs ask 1 (default 5)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per database; medians are shown")
    parser.add_argument(
        "--only", default="sqlite,postgresql", help="databases, comma-separated (default sqlite,postgresql)"
    )
    args = parser.parse_args(argv)
    databases = args.only.split(",")
    results: dict[str, dict] = {}
    server = PostgresServer() if "postgresql" in databases else None
    if server is not None:
        server.start()
    try:
        for name in databases:
            runs = []
            for number in range(args.repeat):
                url = server.create_database(f"submits_{number}") if name == "postgresql" else None
                runs.append(run(url, args))
                if url is not None:
                    server.drop_database(f"submits_{number}")
                print(f"{name} run {number + 1}: {runs[-1]['throughput']:.1f} submits/s", file=sys.stderr)
            results[name] = median_of(runs)
    finally:
        if server is not None:
            server.stop()
    print(table(results, args))
    failed = False
    for name, r in results.items():
        for error in r["errors"]:
            print(f"{name}: a process failed: {error}")
            failed = True
        if r["over"] or r["submitted"] != args.submits:
            print(f"{name}: {r['over']} over-allocations, {r['submitted']} of {args.submits} jobs recorded")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
