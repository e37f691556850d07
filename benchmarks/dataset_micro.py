"""Quick in-process micro-benchmark of kpl_dataset: write MB/s, sequential GB/s, random p50/p99.

    python benchmarks/dataset_micro.py --records 20000 --size 10240 --repeat 5
    python benchmarks/dataset_micro.py --records 4000 --size 65536 --verify full

Records look like the issue's: random `data` bytes plus path, contentType and label.
Every phase runs in this process (use benchmarks/dataset_io.py for fresh-process numbers
and the comparison with peers); each number is the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

from kpl_dataset import BasicType, ReadOnlyDataset, WriteOnlyDataset

RECORD_TYPE = {
    "data": BasicType.ByteArray,
    "path": BasicType.String,
    "contentType": BasicType.String,
    "label": BasicType.Int,
}


def write(root: str, ring: list[bytes], n: int) -> float:
    """Write n records and return MB/s of payload."""
    start = time.perf_counter()
    with WriteOnlyDataset(root, "root", RECORD_TYPE) as ds:
        for i in range(n):
            ds.write(
                {
                    "data": ring[i % len(ring)],
                    "path": f"images/{i:08d}.bin",
                    "contentType": "application/octet-stream",
                    "label": i % 1000,
                }
            )
    return n * len(ring[0]) / (time.perf_counter() - start) / 1e6


def seq(root: str, verify: str | bool) -> float:
    """Read every record in order through a fresh reader and return GB/s of payload."""
    total = 0
    start = time.perf_counter()
    with ReadOnlyDataset(root, "root", verify=verify) as reader:
        for rec in reader:
            total += len(rec["data"])
    return total / (time.perf_counter() - start) / 1e9


def rand(root: str, n: int, lookups: int, verify: str | bool) -> tuple[float, float]:
    """Time random lookups one by one through a fresh reader; return (p50, p99) in µs."""
    rng = random.Random(1)
    order = [rng.randrange(n) for _ in range(lookups)]
    clock = time.perf_counter_ns
    times = []
    with ReadOnlyDataset(root, "root", verify=verify) as reader:
        for i in order:
            t0 = clock()
            reader[i]
            times.append(clock() - t0)
    times.sort()
    return times[len(times) // 2] / 1e3, times[len(times) * 99 // 100] / 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=20000)
    p.add_argument("--size", type=int, default=10240)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--lookups", type=int, default=10000)
    p.add_argument(
        "--verify", default="default", help="reader verify= argument (default: the reader's default)"
    )
    p.add_argument("--workdir", default=None)
    a = p.parse_args()
    verify: str | bool = {"default": True, "true": True, "false": False}.get(a.verify, a.verify)
    rng = random.Random(20261124)
    ring = [rng.randbytes(a.size) for _ in range(257)]
    results: dict[str, list[float]] = {"write MB/s": [], "seq GB/s": [], "rand p50 µs": [], "rand p99 µs": []}
    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        for r in range(a.repeat):
            root = os.path.join(tmp, f"run{r}")
            results["write MB/s"].append(write(root, ring, a.records))
            results["seq GB/s"].append(seq(root, verify))
            p50, p99 = rand(root, a.records, a.lookups, verify)
            results["rand p50 µs"].append(p50)
            results["rand p99 µs"].append(p99)
    print(f"{a.records} records x {a.size} bytes, verify={a.verify}, median of {a.repeat}:")
    for name, values in results.items():
        print(
            f"  {name:12s} {statistics.median(values):10.2f}   runs: {', '.join(f'{v:.2f}' for v in values)}"
        )


if __name__ == "__main__":
    main()
