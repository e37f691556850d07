"""Run one phase (write, open, seq, rand) of one tool in this fresh process; print JSON on stdout.

Stdlib only at import time: it also runs inside the venv of the original kpl-dataset 0.0.9.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from payload import Payload  # noqa: E402

SAMPLES = 64  # records compared with what was written, per phase


class WrongData(Exception):
    """A tool returned records that differ from what was written."""


def _check(tool: str, phase: str, i: int, got: tuple, payload: Payload) -> None:
    want = payload.record(i)
    if tuple(got) != want:
        fields = ("data", "path", "contentType", "label")
        bad = [f for f, a, b in zip(fields, got, want, strict=False) if a != b]
        raise WrongData(f"{tool} {phase}: record {i} differs from what was written in field(s) {bad}")


def _du(root: str) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            total += os.path.getsize(os.path.join(folder, name))
    return total


def phase_write(tool, name: str, root: str, payload: Payload, n: int) -> dict:
    start = time.perf_counter()
    tool.write(root, payload, n)
    seconds = time.perf_counter() - start
    if hasattr(tool, "cleanup"):
        tool.cleanup(root)
    return {"seconds": seconds, "records_per_s": n / seconds, "disk_bytes": _du(root)}


def phase_open(tool, name: str, root: str, payload: Payload, n: int) -> dict:
    """Time from nothing to the first record in hand (eager and lazy readers alike)."""
    start = time.perf_counter()
    reader = tool.open_reader(root)
    first = tool.get(reader, 0) if tool.get else next(iter(tool.scan(reader)))
    seconds = time.perf_counter() - start
    _check(name, "open", 0, first, payload)
    tool.close(reader)
    return {"ms": seconds * 1e3}


def phase_seq(tool, name: str, root: str, payload: Payload, n: int) -> dict:
    """Read every record in order; the bytes are summed so every payload is materialised."""
    reader = tool.open_reader(root)
    step = max(1, n // SAMPLES)
    kept = []
    total = count = 0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
    cpu = time.process_time()
    start = time.perf_counter()
    for row in tool.scan(reader):
        total += len(row[0])
        if count % step == 0:
            kept.append((count, row))
        count += 1
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults
    tool.close(reader)
    if count != n or total != n * payload.size:
        raise WrongData(f"{name} seq: read {count} records / {total} bytes, wrote {n} / {n * payload.size}")
    for i, row in kept:
        _check(name, "seq", i, row, payload)
    # CPU time leaves out the time this process waited for a CPU: steadier on a shared machine.
    return {
        "seconds": seconds,
        "gb_per_s": total / seconds / 1e9,
        "records_per_s": n / seconds,
        "cpu_gb_per_s": total / max(cpu, 1e-9) / 1e9,
        "major_faults": faults,
    }


def phase_rand(tool, name: str, root: str, payload: Payload, n: int, lookups: int, seed: int) -> dict:
    """Time each lookup of a random index separately, right after opening."""
    if tool.get is None:
        return {"n/a": "no random access by record index"}
    rng = random.Random(seed)
    order = [rng.randrange(n) for _ in range(lookups)]
    reader = tool.open_reader(root)
    get = tool.get
    clock = time.perf_counter_ns
    times = [0] * lookups
    step = max(1, lookups // SAMPLES)
    kept = []
    total = 0
    for k, i in enumerate(order):
        t0 = clock()
        row = get(reader, i)
        times[k] = clock() - t0
        total += len(row[0])
        if k % step == 0:
            kept.append((i, row))
    tool.close(reader)
    if total != lookups * payload.size:
        raise WrongData(f"{name} rand: {total} bytes for {lookups} lookups of {payload.size}")
    for i, row in kept:
        _check(name, "rand", i, row, payload)
    times.sort()
    return {
        "p50_us": times[lookups // 2] / 1e3,
        "p99_us": times[min(lookups - 1, lookups * 99 // 100)] / 1e3,
        "lookups": lookups,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("tool", help="adapter module in this folder")
    p.add_argument("phase", choices=["write", "open", "seq", "rand"])
    p.add_argument("root")
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--lookups", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    tool = importlib.import_module(a.tool)
    if not hasattr(tool, "get"):
        raise SystemExit(f"adapter {a.tool} lacks get (set get = None when it has no random access)")
    payload = Payload(a.size)
    n = a.records
    if a.phase == "write":
        out = phase_write(tool, a.tool, a.root, payload, n)
    elif a.phase == "open":
        out = phase_open(tool, a.tool, a.root, payload, n)
    elif a.phase == "seq":
        out = phase_seq(tool, a.tool, a.root, payload, n)
    else:
        out = phase_rand(tool, a.tool, a.root, payload, n, min(a.lookups, max(n, 1) * 10), a.seed)
    # ru_maxrss is KiB on Linux: the peak resident set of this process alone.
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    except WrongData as err:
        print(f"WRONG DATA: {err}", file=sys.stderr)
        sys.exit(3)
