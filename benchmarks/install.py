"""`pip install` of what kpl-lab's README run command installs, into a fresh virtual environment: time and disk.

The README's run command is `pip install -e ".[demo]" && kpl-lab up`. Its cost is kpl-lab's
requirements and the extra's, as pyproject.toml declares them (read by the one reader,
`kpl_lab.hub.userenv.requirements`); kpl-lab's own build (the labextension, measured by CI's
build) is not part of it. Each route gets a new virtual environment on this Python and a
pip that downloads everything (`--no-cache-dir`, as on a fresh machine; `--cache` uses
pip's wheel cache instead), and reports the seconds pip took, the size of the environment
on disk (`du`), and the packages installed. With more than one route, each later one is
given as a ratio to the first.

    python benchmarks/install.py                      # the demo route (the README's command)
    python benchmarks/install.py --extra demo --extra torch   # and the PyTorch examples' route
    python benchmarks/install.py --json install.json --keep /tmp/venvs

Run it on each change to the dependencies; benchmarks/README.md keeps the results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kpl_lab.hub import userenv  # noqa: E402


def du_bytes(folder: Path) -> int:
    """Return the disk use of `folder` in bytes, as `du` counts it (blocks, each file once)."""
    done = subprocess.run(
        ["du", "-s", "--block-size=1", str(folder)], capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[0])


def route(extra: str, where: Path, cache: bool) -> dict:
    """Install kpl-lab's requirements with `extra` into a new virtual environment in `where`; measure it."""
    pins = userenv.requirements(extras=(extra,) if extra else ())
    env = where / f"venv-{extra or 'base'}"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    python = str(userenv.python_of(env))
    before = du_bytes(env)
    options = [] if cache else ["--no-cache-dir"]
    started = time.monotonic()
    done = subprocess.run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q", *options, *pins],
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"pip failed for extra {extra!r}:\n{done.stderr[-3000:]}")
    listed = json.loads(
        subprocess.run(
            [python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    names = {package["name"].lower(): package["version"] for package in listed}
    return {
        "extra": extra,
        "requirements": len(pins),
        "packages": len(names),
        "seconds": round(seconds, 1),
        "installed_mb": round((du_bytes(env) - before) / 1e6),
        "venv_mb": round(du_bytes(env) / 1e6),
        "torch": names.get("torch"),
        "nvidia_packages": sum(name.startswith("nvidia-") and name != "nvidia-ml-py" for name in names),
        "cache": cache,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
    }


def main(argv: list[str] | None = None) -> int:
    """Measure each route; print one JSON line each, then the ratios of the later ones to the first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--extra",
        action="append",
        help="an extra to install with the requirements (repeat for several routes; default: demo)",
    )
    parser.add_argument("--cache", action="store_true", help="let pip use its wheel cache")
    parser.add_argument("--keep", type=Path, help="build the environments here and keep them")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    extras = args.extra or ["demo"]
    where = args.keep or Path(tempfile.mkdtemp(prefix="kpl-install-"))
    where.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for extra in extras:
            results.append(route(extra, where, args.cache))
            print(json.dumps(results[-1]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(where, ignore_errors=True)
    first = results[0]
    for later in results[1:]:
        print(
            f"{later['extra']} / {first['extra']}: {later['seconds'] / max(first['seconds'], 0.1):.1f}x the time, "
            f"{later['installed_mb'] / max(first['installed_mb'], 1):.1f}x the disk"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
