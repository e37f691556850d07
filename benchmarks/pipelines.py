"""Pipelines against pandas, polars and plain DuckDB: the same flow, each tool in a process of its own.

    python benchmarks/pipelines.py                                  # 1k, 100k and 1M records, 5 rounds
    python benchmarks/pipelines.py --records 100000 --rounds 3
    python benchmarks/pipelines.py --code /tmp/kpl-before           # also ours from another tree ("before")
    python benchmarks/pipelines.py --tools kpl,polars --records 1000000
    python benchmarks/pipelines.py --tools kpl,kpl-ray,polars       # also ours on the Ray backend (a local Ray)

The flow (the issue's): regex extract of a path's folder and stem, select images and label
records, rename, left join each image to its label, label id over the sorted labels, a
seeded 80/20 split, and each part saved as a dataset (kpl_dataset format). Ours is the
`kpl-lab pipeline run FILE --wait --fresh` command as a user types it (the console script's
`main`, in a fresh process); the peers read the same input dataset, do the same work with
their own API and write the same two datasets with `WriteOnlyDataset`. Every tool's output
is checked equal to ours (records, field order and types) once per size.

Measured from outside, per process, in interleaved rounds (the order of the tools turns
each round): wall time from spawn to exit, CPU seconds of the process and every child it
waited for (ours: the sandboxed worker that runs the query), and peak RSS: the process's
own plus, for ours, its sandboxed worker's (the two peaks added: an upper bound of what
they held at once). Printed: the median of each and the median of the per-round ratios
(ours / peer). At 1k records everything is fixed cost. `validate` is `kpl-lab pipeline
validate FILE`; `cached` an unchanged re-run (every node reused).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

PATTERN = r"^[^/]+/(?P<type>[^/]+)/(?P<id>[^/]+)\.[A-Za-z]+$"
SEED = 7
RATIOS = {"train": 0.8, "val": 0.2}
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
  parts:   {{type: split, input: ids, ratios: {{train: 0.8, val: 0.2}}, seed: {SEED}}}
  train:   {{type: save_dataset, input: parts.train, name: bench-train}}
  val:     {{type: save_dataset, input: parts.val, name: bench-val}}
"""
TYPES = {
    "path": "String",
    "contentType": "String",
    "content": "ByteArray",
    "type": "String",
    "id": "String",
    "label": "String",
    "label_id": "Int",
}
NULLABLE = ["type", "id", "label", "label_id"]
PEERS = ("pandas", "polars", "duckdb")
MASK = (1 << 64) - 1


# what a measured process runs (only what the tool itself needs is imported)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _input(home: Path) -> Path:
    """Return the input dataset's folder, found the way a peer script would: the catalog's one version."""
    (folder,) = (home / "storage" / "projects" / "p" / "datasets" / "bench").iterdir()
    return folder


def _draws(count: int):
    """Return split's part per row: SplitMix64 of the seed and the row number, as the pipeline draws."""
    import numpy as np

    rows = np.arange(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = rows + np.uint64((SEED * 0x9E3779B97F4A7C15) & MASK)
        z = z * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    uniform = (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    bounds = np.cumsum(list(RATIOS.values()))
    bounds[-1] = 1.0
    return np.searchsorted(bounds, uniform, side="right")


def _save(out: Path, batches_of) -> None:
    """Write each part's Arrow record batches as a dataset out/PART (part root)."""
    from kpl_dataset import WriteOnlyDataset

    for part in RATIOS:
        with WriteOnlyDataset(out / part, "root", TYPES, nullable=NULLABLE) as writer:
            for batch in batches_of(part):
                writer.write_batch(batch)


def run_pandas(home: Path, out: Path) -> None:
    import pandas as pd
    import pyarrow as pa

    from kpl_dataset import ReadOnlyDataset

    df = ReadOnlyDataset(_input(home)).to_pandas()
    df = pd.concat([df, df["path"].str.extract(PATTERN)], axis=1)
    images = df[df["type"] == "JPEGImages"]
    labels = df[df["type"] == "Labels"][["id", "contentType"]].rename(columns={"contentType": "label"})
    joined = images.merge(labels, on="id", how="left")
    names = sorted(joined["label"].dropna().unique())
    joined["label_id"] = joined["label"].map({v: i for i, v in enumerate(names)}).astype("Int64")
    which = _draws(len(joined))
    parts = {part: joined[which == i] for i, part in enumerate(RATIOS)}
    _save(
        out,
        lambda part: pa.Table.from_pandas(parts[part], preserve_index=False).to_batches(65536),
    )


def run_polars(home: Path, out: Path) -> None:
    import polars as pl

    from kpl_dataset import ReadOnlyDataset

    df = pl.from_arrow(ReadOnlyDataset(_input(home)).to_arrow())
    df = df.with_columns(pl.col("path").str.extract_groups(PATTERN).alias("m")).unnest("m")
    images = df.filter(pl.col("type") == "JPEGImages")
    labels = df.filter(pl.col("type") == "Labels").select("id", pl.col("contentType").alias("label"))
    joined = images.join(labels, on="id", how="left", maintain_order="left")
    joined = joined.with_columns((pl.col("label").rank("dense") - 1).cast(pl.Int64).alias("label_id"))
    which = pl.Series(_draws(joined.height))
    parts = {part: joined.filter(which == i) for i, part in enumerate(RATIOS)}
    _save(out, lambda part: parts[part].to_arrow().to_batches(65536))


def run_duckdb(home: Path, out: Path) -> None:
    import duckdb
    import pyarrow.compute as pc

    from kpl_dataset import ReadOnlyDataset

    raw = ReadOnlyDataset(_input(home)).to_arrow()
    con = duckdb.connect()
    con.register("raw", raw)
    pattern = "'" + PATTERN.replace("'", "''") + "'"
    joined = con.sql(f"""
        WITH x AS (
            SELECT *, CASE WHEN regexp_matches(path, {pattern})
                      THEN regexp_extract(path, {pattern}, ['type', 'id']) END AS m,
                   row_number() OVER () AS r
            FROM raw),
        y AS (SELECT * EXCLUDE (m), m.type AS type, m.id AS id FROM x),
        images AS (SELECT * FROM y WHERE type = 'JPEGImages'),
        labels AS (SELECT id, contentType AS label, r FROM y WHERE type = 'Labels'),
        joined AS (
            SELECT i.path, i.contentType, i.content, i.type, i.id, l.label, i.r, l.r AS lr
            FROM images i LEFT JOIN labels l ON i.id = l.id)
        SELECT path, contentType, content, type, id, label,
               CASE WHEN label IS NOT NULL
                    THEN dense_rank() OVER (PARTITION BY label IS NULL ORDER BY label) - 1 END AS label_id
        FROM joined ORDER BY r, lr NULLS FIRST
    """).to_arrow_table()
    con.close()
    which = _draws(joined.num_rows)
    _save(
        out,
        lambda part: joined.filter(pc.equal(which, list(RATIOS).index(part))).to_batches(65536),
    )


def run_kpl(home: Path, command: list[str]) -> None:
    from kpl_lab.cli import main

    code = main(["--home", str(home), "--project", "p", *command])
    if code:
        raise SystemExit(f"kpl-lab {' '.join(command)} exited {code}")


def child(tool: str, home: Path, file: Path, out: Path) -> None:
    """Run one tool in this (fresh) process; print what it measured of itself as JSON."""
    started, cpu = time.perf_counter(), _cpu()
    if tool == "kpl":
        run_kpl(home, ["pipeline", "run", str(file), "--wait", "--fresh"])
    elif tool == "kpl-cached":
        run_kpl(home, ["pipeline", "run", str(file), "--wait"])
    elif tool == "kpl-validate":
        run_kpl(home, ["pipeline", "validate", str(file)])
    elif tool == "kpl-ray":
        run_kpl(home, ["pipeline", "run", str(file), "--wait", "--fresh", "--backend", "ray"])
    else:
        {"pandas": run_pandas, "polars": run_polars, "duckdb": run_duckdb}[tool](home, out)
    result = {"work_seconds": time.perf_counter() - started, "work_cpu": _cpu() - cpu}
    sys.stdout.flush()
    os.write(1, ("\n" + json.dumps(result) + "\n").encode())


# the measuring side


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
    (home / "bench.kpl-pipeline.yaml").write_text(PIPELINE)


def measure(tool: str, home: Path, code: Path | None, out: Path, env: dict) -> dict:
    """Run one tool in a fresh process; return its wall time, its own figures and its memory, sampled."""
    import shutil
    import subprocess

    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, __file__, "--child", tool, "--home", str(home), "--out", str(out)]
    here = dict(env)
    # ours from that tree: its modules first, and its sandboxed workers' (`python -m` in cwd)
    if code is not None:
        here["PYTHONPATH"] = str(code)
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=here, cwd=code or Path.cwd()
    )
    memory = Memory(process.pid)
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - started
    memory.stop()
    if process.returncode:
        raise SystemExit(
            f"{tool} failed ({process.returncode}):\n{stdout.decode()[-2000:]}\n{stderr.decode()[-4000:]}"
        )
    own = json.loads(stdout.decode().strip().splitlines()[-1])
    return {"wall": wall, **own, **memory.found()}


class Memory:
    """Sample a process and its descendants every few ms: the peak of their summed RSS, each one's own peak.

    Each process's own peak is its VmHWM (its address space's high-water mark, which starts
    afresh at exec), not ru_maxrss: that one keeps the spawning process's peak across the exec.
    """

    def __init__(self, pid: int, every: float = 0.005) -> None:
        import threading

        self.pid, self.every = pid, every
        self.peak_sum = 0.0  # MB, summed over the processes alive at one sample
        self.hwm: dict[int, float] = {}  # pid -> MB
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _tree(self) -> list[int]:
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as f:
                        todo.extend(int(c) for c in f.read().split())
            except OSError:
                pass
        return found

    def _run(self) -> None:
        while not self.done.is_set():
            total = 0.0
            for pid in self._tree():
                try:
                    with open(f"/proc/{pid}/status") as f:
                        status = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
                except (OSError, ValueError):
                    continue
                if "VmRSS" not in status:  # a zombie
                    continue
                total += int(status["VmRSS"].split()[0]) / 1024
                self.hwm[pid] = max(self.hwm.get(pid, 0.0), int(status["VmHWM"].split()[0]) / 1024)
            self.peak_sum = max(self.peak_sum, total)
            self.done.wait(self.every)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def found(self) -> dict:
        own = self.hwm.get(self.pid, 0.0)
        return {
            "rss_mb": own,
            "children_rss_mb": sum(v for p, v in self.hwm.items() if p != self.pid),
            "rss_together_mb": self.peak_sum,
        }


class Usage:
    """CPU seconds of the children this process waited for, read before and after each one."""

    def __init__(self) -> None:
        self.last = self.read()

    @staticmethod
    def read() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def take(self) -> float:
        now = self.read()
        spent, self.last = now - self.last, now
        return spent


def same_output(home: Path, out: Path, tool: str) -> None:
    """Check a peer's two datasets hold our saved datasets' records, field types and order."""
    from kpl_dataset import ReadOnlyDataset
    from kpl_lab.platform import Platform

    platform = Platform(home=str(home))
    try:
        for part in RATIOS:
            ours = ReadOnlyDataset(platform.catalog.path(platform.catalog.get_dataset("p", f"bench-{part}")))
            theirs = ReadOnlyDataset(out / part)
            a, b = ours.to_arrow(), theirs.to_arrow()
            if not (a.schema.equals(b.schema) and a.equals(b)):
                raise SystemExit(f"{tool}'s {part} differs from ours: {a.num_rows} / {b.num_rows} rows")
    finally:
        platform.close()


def main() -> None:
    import argparse
    import shutil
    import tempfile

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", default="1000,100000,1000000", help="sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--tools", default="kpl,pandas,polars,duckdb", help="ours (kpl, kpl-ray) and peers, comma-separated"
    )
    parser.add_argument("--code", type=Path, help="also run ours from this source tree (as `before`)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    tools = args.tools.split(",")
    # as a user runs it: bytecode cached (PYTHONDONTWRITEBYTECODE would compile every module in every process)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    this = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(this))  # the input is made with this tree
    print(
        f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="kpl-bench-pipelines-") as tmp:
        results: dict[tuple[int, str], list[dict]] = {}
        homes: dict[tuple[int, str], Path] = {}
        for records in map(int, args.records.split(",")):
            home = Path(tmp) / f"{records}-after"
            make(home, records)
            homes[(records, "after")] = home
            if args.code:
                shutil.copytree(home, Path(tmp) / f"{records}-before", symlinks=True)
                homes[(records, "before")] = Path(tmp) / f"{records}-before"
            size = sum(f.stat().st_size for f in (home / "upload").rglob("*") if f.is_file())
            print(f"{records} records: input dataset {size / 2**20:.1f} MiB")
        kinds = [t for t in tools if t != "kpl"]
        ours = [("kpl", "after")] + ([("kpl", "before")] if args.code else []) if "kpl" in tools else []
        runs = [*ours, *((t, "") for t in kinds)]
        extra = [("kpl-validate", "after"), ("kpl-cached", "after")]
        if args.code:
            extra += [("kpl-validate", "before"), ("kpl-cached", "before")]
        usage = Usage()
        for round_ in range(args.rounds):
            for records in map(int, args.records.split(",")):
                turn = runs[round_ % len(runs) :] + runs[: round_ % len(runs)]
                for tool, tree in [
                    *turn,
                    *(extra if records == min(map(int, args.records.split(","))) else []),
                ]:
                    home = homes[(records, tree or "after")]
                    code = (args.code if tree == "before" else this) if tool.startswith("kpl") else None
                    out = Path(tmp) / "out"
                    found = measure(tool, home, code, out, {**env, "PYTHONPATH": str(this)})
                    found["cpu"] = usage.take()
                    found["load"] = os.getloadavg()[0]
                    if round_ == 0 and tool in PEERS:
                        same_output(homes[(records, "after")], out, tool)
                    results.setdefault((records, f"{tool} {tree}".strip()), []).append(found)
            loads = [r["load"] for rs in results.values() for r in rs[-1:]]
            print(f"round {round_ + 1}: load {min(loads):.1f}-{max(loads):.1f}", flush=True)
        report(results, args)


def report(results: dict, args) -> None:
    import statistics

    def med(rows: list[dict], key) -> float:
        return statistics.median(key(r) for r in rows)

    def rss(r: dict) -> float:
        return r["rss_mb"] + r["children_rss_mb"]

    print()
    print(
        "| records | tool | wall s | CPU s | peak RSS MB: own + children's | held together (sampled) | work s |"
    )
    print("|---|---|---|---|---|---|---|")
    for (records, tool), rows in sorted(results.items()):
        print(
            f"| {records:,} | {tool} | {med(rows, lambda r: r['wall']):.3f} | {med(rows, lambda r: r['cpu']):.3f} "
            f"| {med(rows, rss):.0f} ({med(rows, lambda r: r['rss_mb']):.0f} + "
            f"{med(rows, lambda r: r['children_rss_mb']):.0f}) | {med(rows, lambda r: r['rss_together_mb']):.0f} "
            f"| {med(rows, lambda r: r['work_seconds']):.3f} |"
        )
    print()
    print("Ratios, ours / peer (median of the per-round ratios; < 1: ours is faster or smaller):")
    print("| records | ours | peer | wall | CPU | peak RSS |")
    print("|---|---|---|---|---|---|")
    for (records, tool), rows in sorted(results.items()):
        if not tool.startswith("kpl "):
            continue
        for peer in PEERS:
            theirs = results.get((records, peer))
            if not theirs:
                continue
            pairs = list(zip(rows, theirs, strict=True))  # one of each per round

            def ratio(key, pairs=pairs) -> float:
                return statistics.median(key(a) / key(b) for a, b in pairs)

            print(
                f"| {records:,} | {tool} | {peer} | {ratio(lambda r: r['wall']):.2f} | "
                f"{ratio(lambda r: r['cpu']):.2f} | {ratio(rss):.2f} |"
            )


if __name__ == "__main__":
    if "--child" in sys.argv:  # a measured process: nothing imported beyond what its tool needs
        at = sys.argv.index
        child(
            sys.argv[at("--child") + 1],
            Path(sys.argv[at("--home") + 1]),
            Path(sys.argv[at("--home") + 1]) / "bench.kpl-pipeline.yaml",
            Path(sys.argv[at("--out") + 1]),
        )
    else:
        main()
