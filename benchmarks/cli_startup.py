"""What a `kpl-lab` command costs before it does anything: CPU-seconds per command against `python -c pass`.

Each command runs `--runs` times in a fresh interpreter (`python -m kpl_lab.cli`, as the
`kpl-lab` script does) on a home of its own; the child's user + system CPU time is read
from `resource.getrusage(RUSAGE_CHILDREN)`. Prints the median per command and its ratio to
an interpreter that imports nothing (the floor every command pays). `--importtime` adds the modules that took longest
to import, cumulative, from `python -X importtime`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "kpl-lab --help": ["-m", "kpl_lab.cli", "--help"],
    "kpl-lab job list": ["-m", "kpl_lab.cli", "job", "list"],
    "kpl-lab dataset list": ["-m", "kpl_lab.cli", "dataset", "list"],
}


def cpu_seconds(arguments: list[str], env: dict[str, str]) -> float:
    """Return the user + system CPU seconds of one run of the interpreter with `arguments`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, *arguments], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(arguments)} failed: {done.stderr.decode()[-2000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def slowest_imports(arguments: list[str], env: dict[str, str], count: int) -> list[tuple[int, str]]:
    """Return the `count` modules with the largest cumulative import time (µs) of one run."""
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-X", "importtime", *arguments], env=env, capture_output=True, text=True, check=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
            if cumulative.isdigit():
                rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (the median is printed)")
    parser.add_argument("--importtime", type=int, default=0, help="show this many slowest imports")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "KPL_LAB_HOME": home}
        for name in ("KPL_SERVICE_URL", "JUPYTERHUB_API_TOKEN", "KPL_API_URL"):
            env.pop(name, None)
        cpu_seconds(COMMANDS["kpl-lab job list"], env)  # the home's first open makes its database
        medians = {}
        for name, arguments in COMMANDS.items():
            medians[name] = statistics.median(cpu_seconds(arguments, env) for _ in range(args.runs))
        floor = medians["python -c pass"]
        print(f"{'command':<24} {'CPU-s (median)':>15} {'× python -c pass':>17}")
        for name, seconds in medians.items():
            print(f"{name:<24} {seconds:>15.3f} {seconds / floor:>17.2f}")
        if args.importtime:
            for name, arguments in COMMANDS.items():
                if name.startswith("kpl-lab"):
                    print(f"\nslowest imports of {name} (cumulative ms):")
                    for micros, module in slowest_imports(arguments, env, args.importtime):
                        print(f"  {micros / 1000:8.1f}  {module}")


if __name__ == "__main__":
    main()
