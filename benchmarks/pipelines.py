"""Pipelines against pandas: regex extract + select + left join + label id over N small records.

    python benchmarks/pipelines.py                      # 1M records, 3 repeats
    python benchmarks/pipelines.py --records 100000 --repeat 1
    python benchmarks/pipelines.py --spill              # the flow under a DuckDB memory limit 4x below the data
    python benchmarks/pipelines.py --ray                # also on the Ray backend (a local Ray on every core)

Each measurement runs in a fresh process; time is wall-clock of the work (reading the input
dataset, processing, writing the output dataset), memory is that process's peak RSS (its
mapped dataset pages included; any child process's peak is printed beside it).
Printed: medians and the ratios (pandas / ours for time and ours / pandas for memory),
and the cost of re-running the unchanged pipeline (every node cached) with where a fresh
process spends its time: Python's start, imports, opening the platform, validating and
recording the run, the nodes' cache checks, the rest (reading the checked pipeline back, history writes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

START = (time.perf_counter(), time.time())  # a child's own start: process creation to here is Python's

PATTERN = r"^[^/]+/(?P<type>[^/]+)/(?P<id>[^/]+)\.[A-Za-z]+$"
PIPELINE = f"""\
version: 1
name: bench
nodes:
  raw:     {{type: dataset, dataset: bench}}
  extract: {{type: regex_extract, input: raw, field: path, pattern: '{PATTERN}'}}
  images:  {{type: select, input: extract, where: "type = 'JPEGImages'"}}
  labels:  {{type: select, input: extract, where: "type = 'Labels'"}}
  named:   {{type: rename, input: labels, fields: {{contentType: label}}}}
  joined:  {{type: left_join, left: images, right: named, on: id, fields: [label]}}
  ids:     {{type: label_id, input: joined, field: label, output: label_id}}
"""


def make(home: Path, records: int) -> None:
    """Write the input dataset (half images, half label records, one in 10 images unlabelled) and register it."""
    import pyarrow as pa

    from kpl_dataset import WriteOnlyDataset
    from kpl_lab.platform import Platform

    folder = home / "upload"
    images = records // 2
    with WriteOnlyDataset(
        folder, "root", {"path": "String", "contentType": "String", "content": "ByteArray"}
    ) as w:
        step = 100_000
        for start in range(0, images, step):
            n = min(step, images - start)
            ids = [f"IMG_{i:08d}" for i in range(start, start + n)]
            paths = [f"Fruit/JPEGImages/{i}.jpg" for i in ids] + [
                f"Fruit/Labels/{i}.txt" for k, i in enumerate(ids) if (start + k) % 10
            ]
            # a label record names its class in contentType (a String to number)
            kinds = ["image/jpeg"] * n + [f"class{k % 37}" for k in range(len(paths) - n)]
            content = [b"\xff\xd8" + bytes(14)] * n + [b"label"] * (len(paths) - n)
            w.write_batch(
                pa.record_batch(
                    {"path": paths, "contentType": kinds, "content": pa.array(content, pa.binary())}
                )
            )
    platform = Platform(home=str(home))
    platform.catalog.add_dataset("p", "bench", folder)
    platform.close()


def _cpu() -> float:
    """Return this process's CPU seconds, all threads (steadier than wall time on a shared machine)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ours(home: Path, fresh: bool, memory_limit: str | None, backend: str = "local") -> dict:
    started = time.perf_counter()
    from kpl_lab.pipelines.runner import PipelineRunner
    from kpl_lab.platform import Platform

    imported = time.perf_counter()
    platform = Platform(home=str(home))
    platform.catalog.get_dataset("p", "bench")  # open the database first, as pandas' measure does
    ray_start = 0.0
    if backend == "ray":  # Ray's start is timed on its own: a server pays it once
        import ray

        from kpl_lab.pipelines import ray_backend

        for attempt in range(3):
            start = time.perf_counter()
            try:
                ray_backend.connect()
                break
            except Exception:  # Ray gives its raylet a fixed 30 s to register; a busy machine misses it
                ray.shutdown()
                if attempt == 2:
                    raise
        ray_start = time.perf_counter() - start
    opened, cpu = time.perf_counter(), _cpu()
    runner = PipelineRunner(platform, memory_limit=memory_limit or "", backend=backend)
    run_id = runner.create("p", PIPELINE, fresh=fresh)  # validate, record the run
    created = time.perf_counter()
    run = runner.execute("p", run_id)  # the checked pipeline from the record, then every node (cache checks)
    seconds, cpu = time.perf_counter() - opened, _cpu() - cpu
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]
    rows = next(n.rows_out for n in run.nodes if n.node == "ids")
    cached = sum(n.state == "cached" for n in run.nodes)
    nodes = max(n.finished for n in run.nodes) - min(n.started for n in run.nodes)
    platform.close()
    return {
        "seconds": seconds,
        "cpu": cpu,
        "rows": rows,
        "cached": cached,
        "ray_start": ray_start,
        "phases": {
            "python start": started - START[0] + (START[1] - psutil.Process().create_time()),
            "imports": imported - started,
            "open platform": opened - imported,
            "validate + record": created - opened,
            "nodes (cache checks)": nodes.total_seconds(),
            "rest of execute": time.perf_counter() - created - nodes.total_seconds(),
        },
    }


def pandas(home: Path) -> dict:
    import pandas as pd
    import pyarrow as pa

    from kpl_dataset import ReadOnlyDataset, WriteOnlyDataset
    from kpl_lab.platform import Platform

    platform = Platform(home=str(home))
    folder = platform.catalog.path(platform.catalog.get_dataset("p", "bench"))
    start, cpu = time.perf_counter(), _cpu()
    df = ReadOnlyDataset(folder).to_pandas()
    df = pd.concat([df, df["path"].str.extract(PATTERN)], axis=1)
    images = df[df["type"] == "JPEGImages"]
    labels = df[df["type"] == "Labels"][["id", "contentType"]].rename(columns={"contentType": "label"})
    joined = images.merge(labels, on="id", how="left")
    names = sorted(joined["label"].dropna().unique())
    joined["label_id"] = joined["label"].map({v: i for i, v in enumerate(names)}).astype("Int64")
    out = Path(tempfile.mkdtemp(dir=home))
    types = {
        "path": "String",
        "contentType": "String",
        "content": "ByteArray",
        "type": "String",
        "id": "String",
        "label": "String",
        "label_id": "Int",
    }
    with WriteOnlyDataset(out, "root", types, nullable=["type", "id", "label", "label_id"]) as w:
        for batch in pa.Table.from_pandas(joined, preserve_index=False).to_batches(65536):
            w.write_batch(batch)
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    platform.close()
    return {"seconds": seconds, "cpu": cpu, "rows": len(joined), "cached": 0}


def child(args: argparse.Namespace) -> None:
    home = Path(args.home)
    if args.tool == "make":
        make(home, args.records)
        result = {}
    elif args.tool == "pandas":
        result = pandas(home)
    elif args.tool == "ours-ray":
        result = ours(home, fresh=True, memory_limit=None, backend="ray")
    else:
        result = ours(home, fresh=args.tool == "ours", memory_limit=args.memory_limit)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # peak RSS counts mapped dataset pages too; work handed to a child process would count here
    result["children_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps(result))


def measure(home: Path, tool: str, memory_limit: str | None = None, records: int = 0) -> dict:
    command = [sys.executable, __file__, "--child", tool, "--home", str(home), "--records", str(records)]
    if memory_limit:
        command += ["--memory-limit", memory_limit]
    out = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
    if out.returncode:
        raise SystemExit(f"{tool} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--spill", action="store_true", help="also run under a DuckDB memory limit 4x below the data"
    )
    parser.add_argument("--ray", action="store_true", help="also run on the Ray backend (needs kpl-lab[ray])")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    parser.add_argument("--memory-limit", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.tool = args.child
        child(args)
        return
    with tempfile.TemporaryDirectory(prefix="kpl-bench-pipelines-") as tmp:
        home = Path(tmp)
        measure(home, "make", records=args.records)
        size = sum(f.stat().st_size for f in (home / "storage").rglob("*") if f.is_file())
        print(f"{args.records} records, dataset {size / 2**20:.0f} MiB")
        runs = {"ours": [], "pandas": [], **({"ours-ray": []} if args.ray else {})}
        for _ in range(args.repeat):
            for tool in runs:
                runs[tool].append(measure(home, tool))
        assert runs["ours"][0]["rows"] == runs["pandas"][0]["rows"], (runs["ours"][0], runs["pandas"][0])
        cached = [measure(home, "ours-cached") for _ in range(args.repeat)]
        med = {
            tool: {k: statistics.median(r[k] for r in rs) for k in ("seconds", "cpu", "peak_rss_mb")}
            for tool, rs in runs.items()
        }
        for tool, m in med.items():
            children = max(r["children_rss_mb"] for r in runs[tool])
            print(
                f"{tool:8s} {m['seconds']:7.2f} s  CPU {m['cpu']:6.2f} s  peak RSS {m['peak_rss_mb']:7.0f} MB"
                f"  (child processes: {children:.0f} MB)"
            )
        print(f"time: pandas / ours = {med['pandas']['seconds'] / med['ours']['seconds']:.2f}x (aim >= 3x)")
        print(f"CPU time: pandas / ours = {med['pandas']['cpu'] / med['ours']['cpu']:.2f}x (all threads)")
        print(
            f"memory: ours / pandas = {med['ours']['peak_rss_mb'] / med['pandas']['peak_rss_mb']:.2f}x (aim <= 0.5x)"
        )
        print(
            f"unchanged re-run (all {cached[0]['cached']} processors cached): "
            f"{statistics.median(c['seconds'] for c in cached):.3f} s (aim < 1 s) after the platform is open;"
            " where a fresh process spends its time (medians):"
        )
        for phase in cached[0]["phases"]:
            print(f"  {phase:22s} {statistics.median(c['phases'][phase] for c in cached):6.3f} s")
        if args.ray:
            ray_start = statistics.median(r["ray_start"] for r in runs["ours-ray"])
            assert runs["ours-ray"][0]["rows"] == runs["ours"][0]["rows"]
            print(
                f"ray backend: local / ray = {med['ours']['seconds'] / med['ours-ray']['seconds']:.2f}x, "
                f"pandas / ray = {med['pandas']['seconds'] / med['ours-ray']['seconds']:.2f}x "
                f"(Ray's start, not counted: {ray_start:.1f} s)"
            )
        if args.spill:
            limit = f"{max(64, int(size / 2**20 / 4))}MB"  # DuckDB needs some room of its own
            spilled = measure(home, "ours", memory_limit=limit)
            print(
                f"under a {limit} engine limit: {spilled['seconds']:.2f} s, peak RSS {spilled['peak_rss_mb']:.0f} MB, {spilled['rows']} rows"
            )


if __name__ == "__main__":
    main()
