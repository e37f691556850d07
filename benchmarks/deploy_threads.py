"""Measure the examples' `deploy` at each `deploy_threads`: p50 of one prediction at a time.

For each example algorithm: its dataset (digits, or shapes for its task), one epoch of
training through `kpl-lab`, then one deployment per thread count (the algorithm added again
with `deploy_threads: N` in its parameter.yml), each replica called directly with a test
image by the gateway's own forwarder, in interleaved rounds. The examples ship
`deploy_threads: 1`: this is how that was chosen.

    python benchmarks/deploy_threads.py                                  # the three examples, 1 and 2 threads
    python benchmarks/deploy_threads.py --examples detection --threads 1,2,4 --requests 500
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from trained_example import EXAMPLES, ROOT, train

START_TIMEOUT = 120.0


def add_versions(platform, example: str, threads: list[int], base: Path) -> dict[int, str]:
    """Add the example once per thread count (its `deploy_threads` changed); return each version's ref."""
    refs = {}
    for count in threads:
        copy = base / f"{example}-{count}"
        shutil.copytree(ROOT / "examples/algorithms" / example, copy)
        parameters = copy / "parameter.yml"
        text = parameters.read_text()
        assert "deploy_threads: 1\n" in text, f"{example}'s parameter.yml has no deploy_threads: 1"
        parameters.write_text(text.replace("deploy_threads: 1\n", f"deploy_threads: {count}\n"))
        refs[count] = platform.catalog.add_algorithm("default", copy, name=example).ref
    return refs


async def latencies(replica: str, body: bytes, requests: int) -> list[float]:
    """Return the latencies (ms) of `requests` predictions sent one at a time, after a warm-up."""
    from kpl_lab.serving.upstream import Upstream

    upstream = Upstream(5.0, 60.0)
    try:
        for _ in range(20):
            await upstream.post(replica, "/predict", body, "image/png")
        found = []
        for _ in range(requests):
            start = time.perf_counter()
            await upstream.post(replica, "/predict", body, "image/png")
            found.append((time.perf_counter() - start) * 1000)
        return found
    finally:
        upstream.close()


def measure(example: str, threads: list[int], requests: int, rounds: int) -> dict[int, float]:
    """Train the example, deploy it at each thread count; return the median p50 (ms) of each."""
    from kpl_lab.platform import Platform

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        home = base / "home"
        platform = Platform(home=str(home))
        try:
            versions = add_versions(platform, example, threads, base)
            ref, body = train(home, base, example, epochs=1, algorithm=versions[threads[0]])
            service = platform.deployments
            for count in threads:
                service.create("default", f"t{count}", ref, algorithm=versions[count])
            try:
                replicas = {}
                for count in threads:
                    service.wait("default", f"t{count}", START_TIMEOUT)
                    (replicas[count],) = service.routing("default", f"t{count}").ready[ref]
                p50s: dict[int, list[float]] = {count: [] for count in threads}
                for _ in range(rounds):
                    for count, replica in replicas.items():
                        p50s[count].append(statistics.median(asyncio.run(latencies(replica, body, requests))))
                return {count: statistics.median(found) for count, found in p50s.items()}
            finally:
                for count in threads:
                    service.delete("default", f"t{count}")
        finally:
            platform.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", default=",".join(EXAMPLES), help="comma-separated example algorithms")
    parser.add_argument("--threads", default="1,2", help="deploy_threads values, comma-separated")
    parser.add_argument("--requests", type=int, default=300, help="predictions per round and thread count")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is printed)")
    args = parser.parse_args(argv)
    examples = args.examples.split(",")
    unknown = sorted(set(examples) - set(EXAMPLES))
    if unknown:
        parser.error(f"--examples: no example named {', '.join(unknown)} (choose from {', '.join(EXAMPLES)})")
    threads = [int(count) for count in args.threads.split(",")]
    print(f"p50 of one prediction at a time (ms), median of {args.rounds} rounds of {args.requests}")
    print(
        f"{'example':<22}" + "".join(f" {f'{count} thread(s)':>12}" for count in threads) + f" {'ratio':>6}"
    )
    for example in examples:
        found = measure(example, threads, args.requests, args.rounds)
        ratio = found[threads[-1]] / found[threads[0]]
        print(f"{example:<22}" + "".join(f" {found[count]:>12.2f}" for count in threads) + f" {ratio:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
