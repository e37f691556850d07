"""Compare kpl_dataset's write/read speed and memory with the original 0.0.9 and common peers.

Every tool writes the same records (random bytes plus path, contentType and label) into
its own folder under one temporary directory; each phase of each tool then runs in a
fresh subprocess (benchmarks/_peers/worker.py) so peak RSS numbers do not mix. Records
read back are counted, summed and sampled against what was written, so no tool gets
credit for lazy or wrong reads. Each number is the median of --repeat runs.

    python benchmarks/dataset_io.py                       # full: 100k x 10 KiB, 20k x 64 KiB
    python benchmarks/dataset_io.py --scale small --only ours,loose
    python benchmarks/dataset_io.py --records 5000 --size 64KiB --repeat 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "_peers", "worker.py")
DEFAULT_VENV = os.path.join(HERE, ".venv-kpl009")
ORIGINAL = "kpl-0.0.9"

# Tool name -> adapter module in benchmarks/_peers (the original runs in its own venv).
TOOLS = {
    "ours": "ours",
    ORIGINAL: "orig",
    "tfrecord": "tfrecord_peer",
    "webdataset": "webdataset_peer",
    "loose": "loose",
    "hf-datasets": "hf_datasets",
    "ours-noverify": "ours_noverify",
    "ours-zerocopy": "ours_zerocopy",
    "memcpy": "memcpy",
}
DIAGNOSTIC = {"ours-noverify"}  # run only when named in --only
MEMCPY = "memcpy"  # the reference row: not a peer, never in the write targets
VARIANTS = {"ours-noverify", "ours-zerocopy"}  # our writer again: not peers either
SEQ_TARGET = 0.8  # issue 9: the bytes path reads at least 80 % of the same run's memcpy
SCALES = {
    "full": [(100_000, 10 << 10), (20_000, 64 << 10)],
    "small": [(1_000, 10 << 10), (200, 64 << 10)],
}
PHASES = ("write", "open", "seq", "rand")
DROP_CACHES = "/proc/sys/vm/drop_caches"

# (column title, phase, result key, higher is better)
COLUMNS = [
    ("write rec/s", "write", "records_per_s", True),
    ("seq GB/s", "seq", "gb_per_s", True),
    ("seq GB/s CPU", "seq", "cpu_gb_per_s", True),
    ("rand p50 µs", "rand", "p50_us", False),
    ("rand p99 µs", "rand", "p99_us", False),
    ("open ms", "open", "ms", False),
    ("MB write", "write", "peak_rss_mb", False),
    ("MB open", "open", "peak_rss_mb", False),
    ("MB seq", "seq", "peak_rss_mb", False),
    ("MB rand", "rand", "peak_rss_mb", False),
]


class BenchError(Exception):
    """A tool could not be run or returned wrong data."""


def parse_size(text: str) -> int:
    """Parse 10240, 10K, 10KB, 10KiB or 1MiB into bytes (K = 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)(i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"--size {text!r}: expected bytes such as 10240, 10KiB or 64KB")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20}[m.group(2).lower()]


def size_label(size: int) -> str:
    return f"{size >> 10} KiB" if size % 1024 == 0 else f"{size} B"


def original_env(env: dict) -> dict:
    """Return env without PYTHONPATH: a checkout on it would shadow the original kpl_dataset."""
    return {k: v for k, v in env.items() if k != "PYTHONPATH"}


def ensure_original_venv(venv: str) -> str:
    """Return the python of a venv holding kpl-dataset 0.0.9, creating the venv on first use."""
    python = os.path.join(venv, "bin", "python")
    probe = [python, "-c", "import kpl_dataset.define_pb2, kpl_dataset; print(kpl_dataset.__file__)"]
    env = original_env(os.environ)
    if os.path.exists(python):
        # cwd=venv: a probe run from the checkout would import our kpl_dataset instead.
        done = subprocess.run(probe, capture_output=True, text=True, cwd=venv, env=env)
        if done.returncode == 0 and venv in os.path.realpath(done.stdout.strip()):
            return python
    print(f"creating {venv} with kpl-dataset==0.0.9 (first use)...", file=sys.stderr)
    steps = [
        [sys.executable, "-m", "venv", "--clear", venv],
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "kpl-dataset==0.0.9",
            "protobuf<4",
        ],
        probe,
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, cwd=os.path.dirname(venv), env=env)
        if done.returncode != 0:
            raise BenchError(
                f"cannot prepare {venv}: {' '.join(step)} failed:\n{done.stderr.strip()[-2000:]}"
            )
    return python


def can_drop_caches() -> str | None:
    """Return why caches cannot be dropped here, or None when they can."""
    try:
        os.sync()
        with open(DROP_CACHES, "w") as f:
            f.write("1")
    except OSError as err:
        return f"cannot write {DROP_CACHES}: {err}"
    return None


def drop_caches() -> None:
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("1")


@dataclass
class Run:
    """Results of one tool on one payload: per phase, the list of repeats."""

    tool: str
    records: int
    size: int
    runs: dict[str, list[dict]] = field(default_factory=dict)
    error: str | None = None

    def median(self, phase: str, key: str) -> float | None:
        values = [r[key] for r in self.runs.get(phase, []) if key in r]
        return statistics.median(values) if values else None

    def note(self, phase: str) -> str | None:
        runs = self.runs.get(phase, [])
        return runs[0].get("n/a") if runs else None

    def summary(self) -> dict:
        out: dict = {"tool": self.tool, "records": self.records, "size": self.size, "error": self.error}
        for _, phase, key, _ in COLUMNS:
            out[f"{phase}.{key}"] = self.median(phase, key)
        out["disk_bytes"] = self.median("write", "disk_bytes")
        out["not_applicable"] = {p: self.note(p) for p in PHASES if self.note(p)}
        out["runs"] = self.runs
        return out


def run_worker(
    python: str, module: str, phase: str, root: str, args: argparse.Namespace, n: int, size: int
) -> dict:
    cmd = [python, WORKER, module, phase, root, "--records", str(n), "--size", str(size)]
    cmd += ["--lookups", str(args.lookups)]
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", PYTHONHASHSEED="0")
    env["HF_DATASETS_CACHE"] = os.path.join(args.workdir_now, "hf-cache")
    if python != sys.executable:
        env = original_env(env)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=args.workdir_now, env=env)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-15:]
        raise BenchError(f"{module} {phase} exited {done.returncode}:\n    " + "\n    ".join(tail))
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise BenchError(f"{module} {phase}: no JSON result on stdout: {done.stdout[-500:]!r}") from None


def bench_payload(tools: list[str], pythons: dict, n: int, size: int, args: argparse.Namespace) -> list[Run]:
    """Write args.repeat times (fresh folder each), then run each read phase args.repeat times.

    The tools take turns within every repeat, so a change of load on a shared machine hits
    all of them alike and the ratios between tools in one run stay meaningful.
    """
    runs = {tool: Run(tool, n, size) for tool in tools}
    base = {tool: os.path.join(args.workdir_now, f"{tool}-{n}x{size}") for tool in tools}

    def step(tool: str, phase: str) -> None:
        run = runs[tool]
        if run.error or (phase != "write" and run.note(phase)):
            return  # a failed tool stops; one without the operation is not repeated
        try:
            if phase == "write":
                shutil.rmtree(base[tool], ignore_errors=True)
                os.makedirs(base[tool])
            elif args.cold:
                drop_caches()
            result = run_worker(pythons[tool], TOOLS[tool], phase, base[tool], args, n, size)
            run.runs.setdefault(phase, []).append(result)
        except BenchError as err:
            run.error = str(err)

    try:
        for phase in PHASES:
            for r in range(args.repeat):
                print(
                    f"  {phase} {r + 1}/{args.repeat}: {n:,} × {size_label(size)}",
                    file=sys.stderr,
                    flush=True,
                )
                for tool in tools:
                    step(tool, phase)
    finally:
        if not args.keep:
            for folder in base.values():
                shutil.rmtree(folder, ignore_errors=True)
    return list(runs.values())


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.2g}"


def cell(run: Run, ours: Run | None, phase: str, key: str) -> str:
    if run.error and not run.runs.get(phase):
        return "error"
    if run.note(phase):
        return "n/a"
    value = run.median(phase, key)
    if value is None:
        return "-"
    base = ours.median(phase, key) if ours else None
    if not base:
        return fmt(value)
    ratio = value / base
    return f"{fmt(value)} ({ratio:.2f}×)" if ratio >= 0.095 else f"{fmt(value)} ({ratio:.1g}×)"


def table(runs: list[Run]) -> str:
    """Render one table: a block of rows per payload, each cell 'value (tool ÷ ours)'."""
    head = ["payload", "tool"] + [c[0] for c in COLUMNS]
    rows = []
    for run in runs:
        ours = next(
            (r for r in runs if r.tool == "ours" and (r.records, r.size) == (run.records, run.size)), None
        )
        payload = f"{run.records:,} × {size_label(run.size)}"
        rows.append([payload, run.tool] + [cell(run, ours, p, k) for _, p, k, _ in COLUMNS])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=False)), line]
    for row in rows:
        out.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)))
    return "\n".join(out)


def targets(runs: list[Run]) -> list[str]:
    """Check the targets of issues 2 and 9 for every payload that has our numbers."""
    lines = []
    for ours in (r for r in runs if r.tool == "ours" and not r.error):
        same = {r.tool: r for r in runs if (r.records, r.size) == (ours.records, ours.size) and not r.error}
        label = f"{ours.records:,} × {size_label(ours.size)}"

        def verdict(ok: bool) -> str:
            return "MET" if ok else "MISSED"

        seq = ours.median("seq", "gb_per_s")
        memcpy = same.get(MEMCPY)
        for key, clock in (("gb_per_s", "wall"), ("cpu_gb_per_s", "CPU")):
            limit = memcpy and memcpy.median("seq", key)
            mine = ours.median("seq", key)
            if not (limit and mine):
                continue
            lines.append(
                f"[{label}] seq read (bytes) ≥ {SEQ_TARGET:.0%} of memcpy, {clock} time: "
                f"{mine / limit:.0%} -> {verdict(mine >= SEQ_TARGET * limit)}"
            )
            zero = same.get("ours-zerocopy") and same["ours-zerocopy"].median("seq", key)
            if zero:
                lines.append(
                    f"[{label}] seq read (zero_copy=True), {clock} time: {zero / limit:.0%} of memcpy"
                )
        for peer, factor in ((ORIGINAL, 10), ("tfrecord", 5)):
            other = same.get(peer) and same[peer].median("seq", "gb_per_s")
            if seq and other:
                lines.append(
                    f"[{label}] seq read ≥ {factor}× {peer}: {seq / other:.2f}× -> {verdict(seq >= factor * other)}"
                )
        p50 = ours.median("rand", "p50_us")
        if p50 is not None:
            lines.append(f"[{label}] random read p50 ≤ 10 µs: {p50:.2f} µs -> {verdict(p50 <= 10)}")
        write = ours.median("write", "records_per_s")
        for peer, other in same.items():
            w = other.median("write", "records_per_s")
            if peer != "ours" and peer != MEMCPY and peer not in VARIANTS and write and w:
                lines.append(f"[{label}] write ≥ {peer}: {write / w:.2f}× -> {verdict(write >= w)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, help="records per payload (with --size: one payload only)")
    p.add_argument("--size", type=parse_size, help="bytes per record blob, e.g. 10KiB")
    p.add_argument(
        "--scale", choices=sorted(SCALES), default="full", help="payload set when no --records/--size"
    )
    p.add_argument("--only", action="append", help=f"comma-separated tools among: {', '.join(TOOLS)}")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown")
    p.add_argument("--lookups", type=int, default=10_000, help="random reads per rand run")
    p.add_argument(
        "--cold", action="store_true", help=f"drop the page cache before every read run ({DROP_CACHES})"
    )
    p.add_argument("--json", metavar="FILE", help="also write every run and median to FILE")
    p.add_argument(
        "--workdir", default=tempfile.gettempdir(), help="parent of the scratch folder (one disk for all)"
    )
    p.add_argument("--keep", action="store_true", help="keep the written datasets")
    p.add_argument(
        "--orig-venv", default=DEFAULT_VENV, help="venv for kpl-dataset 0.0.9 (created on first use)"
    )
    args = p.parse_args(argv)

    tools = [t for t in TOOLS if t not in DIAGNOSTIC]
    if args.only:
        tools = [t.strip() for spec in args.only for t in spec.split(",") if t.strip()]
        unknown = [t for t in tools if t not in TOOLS]
        if unknown:
            p.error(f"--only: unknown tool(s) {unknown}; choose among {list(TOOLS)}")
    if args.repeat < 1 or args.lookups < 1:
        p.error("--repeat and --lookups must be at least 1")
    payloads = SCALES[args.scale]
    if args.records is not None or args.size is not None:
        payloads = [(args.records or payloads[0][0], args.size or payloads[0][1])]
    if any(n < 1 or s < 1 for n, s in payloads):
        p.error("--records and --size must be positive")
    if args.cold:
        why = can_drop_caches()
        if why:
            p.error(f"--cold needs root and a writable {DROP_CACHES}: {why}")
    cache_mode = "cold page cache (dropped before every read run)" if args.cold else "warm page cache"

    pythons = {t: sys.executable for t in tools}
    setup_errors = {}
    if ORIGINAL in tools:
        try:
            pythons[ORIGINAL] = ensure_original_venv(os.path.abspath(args.orig_venv))
        except BenchError as err:
            setup_errors[ORIGINAL] = str(err)

    load_start = os.getloadavg()
    args.workdir_now = tempfile.mkdtemp(prefix="kpl-bench-", dir=args.workdir)
    runs: list[Run] = []
    started = time.time()
    try:
        for n, size in payloads:
            runs += [Run(t, n, size, error=setup_errors[t]) for t in tools if t in setup_errors]
            runs += bench_payload([t for t in tools if t not in setup_errors], pythons, n, size, args)
    finally:
        shutil.rmtree(args.workdir_now, ignore_errors=True)
    load_end = os.getloadavg()

    print(
        f"kpl_dataset I/O benchmark — {cache_mode}; median of {args.repeat} run(s); "
        f"{args.lookups:,} random lookups per rand run; scratch on {args.workdir}"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
        f"load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end (shared machine: noisy)"
    )
    print(
        "cells: value (tool ÷ ours); write rec/s and seq GB/s: higher is better; µs, ms, MB: lower is better"
    )
    print("open ms = open the reader and get the first record; MB = peak RSS of that phase's own process\n")
    print(table(runs))
    errors = [r for r in runs if r.error]
    for r in errors:
        print(f"\n{r.tool} ({r.records:,} × {size_label(r.size)}) failed: {r.error}")
    lines = targets(runs)
    if lines:
        print("\ntargets (issues 2 and 9):")
        print("\n".join("  " + line for line in lines))
    if args.json:
        doc = {
            "cache": cache_mode,
            "repeat": args.repeat,
            "lookups": args.lookups,
            "cpus": os.cpu_count(),
            "load_average": [load_start[0], load_end[0]],
            "seconds": time.time() - started,
            "results": [r.summary() for r in runs],
            "targets": lines,
        }
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, args.json)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
