"""Many processes reserving or submitting at once: the load of the ledger's concurrency test and benchmark.

Each worker is a process of its own (a forkserver child with the platform already
imported) with its own Platform on the same home and database, as job supervisors,
servers and the hub's spawner are. Workers connect first, then wait for one start
signal, so their transactions really overlap.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from traitlets.config import Config

from ..engine.launch import Resources
from ..engine.ledger import Ledger
from ..engine.service import JobRequest
from ..platform import Platform

START_SECONDS = 600  # workers wait this long for the others to be ready


def _context():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def _platform(settings: dict) -> Platform:
    platform = Platform(config=Config(settings))
    with platform.engine.connect():  # upgrade and connect before the start: only the load is timed
        pass
    return platform


def _reserve(settings: dict, project: str, owner_id: str, ready, start, results) -> None:
    platform = _platform(settings)
    try:
        ledger = Ledger(platform)
        ready.release()
        start.wait(START_SECONDS)
        began = time.perf_counter()
        granted = ledger.reserve(project, "job", owner_id, Resources(cpu=1, memory=1)) is not None
        results.put((owner_id, [time.perf_counter() - began], int(granted), None))
    except Exception as error:  # reported by the parent
        results.put((owner_id, [], 0, repr(error)))
    finally:
        platform.close()


def _submit(
    settings: dict, project: str, algorithm: str, count: int, name: str, ready, start, results
) -> None:
    platform = _platform(settings)
    try:
        jobs = platform.jobs
        request = JobRequest(project=project, algorithm=algorithm)
        ready.release()
        start.wait(START_SECONDS)
        latencies = []
        for _ in range(count):
            began = time.perf_counter()
            jobs.submit(request)
            latencies.append(time.perf_counter() - began)
        results.put((name, latencies, count, None))
    except Exception as error:  # reported by the parent
        results.put((name, [], 0, repr(error)))
    finally:
        platform.close()


def _run(target, argument_lists: list[tuple]) -> tuple[float, list[tuple[str, list[float], int, str | None]]]:
    """Run one worker process per argument tuple at once; return the wall time and each one's result."""
    context = _context()
    ready, start, results = context.Semaphore(0), context.Event(), context.Queue()
    processes = [
        context.Process(target=target, args=(*arguments, ready, start, results))
        for arguments in argument_lists
    ]
    for process in processes:
        process.start()
    for _ in processes:
        ready.acquire(timeout=START_SECONDS)
    began = time.perf_counter()
    start.set()
    answers = [results.get(timeout=START_SECONDS) for _ in processes]
    wall = time.perf_counter() - began
    for process in processes:
        process.join()
    return wall, answers


def reserve_at_once(settings: dict[str, Any], project: str, processes: int) -> list[tuple]:
    """Let `processes` processes each reserve 1 CPU for `project` at the same moment.

    Return (owner id, [latency s], 1 if granted else 0, error or None) per process.
    """
    return _run(_reserve, [(settings, project, f"worker-{n}") for n in range(processes)])[1]


def submit_at_once(
    settings: dict[str, Any], project: str, algorithm: str, processes: int, submits: int
) -> tuple[float, list[tuple]]:
    """Let `processes` processes submit `submits` jobs in all, each its share one after another.

    Return the wall time (s) and (worker, [latency s per submit], submits, error or None) per process.
    """
    shares = [submits // processes + (n < submits % processes) for n in range(processes)]
    return _run(
        _submit, [(settings, project, algorithm, share, f"worker-{n}") for n, share in enumerate(shares)]
    )
