"""Time a model's structure view: torch.jit.load / torch.load(weights_only) against the static reader.

Writes into a temporary folder a TorchScript model of about --size-mb MB (Linear layers of
--width features), the same weights as a state dict, and a state dict of many small tensors
(--blocks of Conv2d and BatchNorm2d: the reader's per-opcode check is what it costs). Each file
is described --repeat times each way, files in the page cache:

- old: what the structure view did before issue #29, in this process with torch imported:
  torch.jit.load and the module's named_modules() and parameters(); torch.load(weights_only=True)
  and the tensors' numel;
- static: kpl_lab's describe_model_files, in a second process that never imports torch (as the
  service runs it now; in one process, torch's idle threads after a load slow whatever runs next).

Prints each file's median per way and old/static (over 1: the static reader is faster), and
checks both ways count the same parameters. The import of torch the old way needs once per
process is timed apart, in fresh interpreters.

    python benchmarks/model_structure.py
    python benchmarks/model_structure.py --size-mb 200 --repeat 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("big-scripted.pt", "big-weights.pt", "many-weights.pt")


def old_torchscript(path: Path) -> int:
    import torch

    module = torch.jit.load(str(path), map_location="cpu")
    layers = [sum(p.numel() for p in sub.parameters(recurse=False)) for _, sub in module.named_modules()]
    assert layers
    return sum(p.numel() for p in module.parameters())


def old_state_dict(path: Path) -> int:
    import torch

    state = torch.load(str(path), map_location="cpu", weights_only=True)
    return sum(t.numel() for t in state.values() if isinstance(t, torch.Tensor))


def make_files(folder: Path, size_mb: float, width: int, blocks: int) -> list[str]:
    """Write the three files; return their titles."""
    import torch
    from torch import nn

    layers = max(1, round(size_mb * 1e6 / (4 * (width * width + width))))
    big = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).eval()
    many = nn.Sequential(*[nn.Sequential(nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8)) for _ in range(blocks)])
    torch.jit.script(big).save(str(folder / FILES[0]))
    torch.save(big.state_dict(), folder / FILES[1])
    torch.save(many.state_dict(), folder / FILES[2])
    return [
        f"TorchScript, {layers} x Linear {width}",
        f"state dict, {layers} x Linear {width}",
        f"state dict, {len(many.state_dict()):,} small tensors",
    ]


def time_static(folder: Path, repeat: int) -> None:
    """Print, as JSON, each file's static times and parameter count (the second process's part)."""
    sys.path.insert(0, str(ROOT))  # the tree this script is in, not an installed kpl_lab
    from kpl_lab.catalog.model_structure import describe_model_files

    results = {}
    for name in FILES:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            [entry] = describe_model_files(folder, [name])
            times.append(time.perf_counter() - start)
        if "error" in entry:
            raise SystemExit(f"{name}: {entry['error']}")
        results[name] = {"times": times, "parameters": entry["parameters"]}
    print(json.dumps({"results": results, "torch imported": "torch" in sys.modules}))


def import_seconds(module: str, repeat: int) -> float:
    """Median wall time of a fresh interpreter importing `module`, less one importing nothing."""

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
        return time.perf_counter() - start

    bare = statistics.median(run("pass") for _ in range(repeat))
    return statistics.median(run(f"import {module}") for _ in range(repeat)) - bare


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=float, default=50.0, help="size of the big model's weights")
    parser.add_argument("--width", type=int, default=2048, help="features of each big Linear layer")
    parser.add_argument(
        "--blocks", type=int, default=300, help="Conv2d+BatchNorm2d blocks of the small-tensor file"
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--static-only", metavar="DIR", help=argparse.SUPPRESS)  # the second process
    args = parser.parse_args()
    if args.static_only:
        time_static(Path(args.static_only), args.repeat)
        return

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        titles = make_files(folder, args.size_mb, args.width, args.blocks)
        done = subprocess.run(
            [sys.executable, __file__, "--static-only", tmp, "--repeat", str(args.repeat)],
            capture_output=True,
            text=True,
            check=True,
        )
        static = json.loads(done.stdout)
        if static["torch imported"]:
            raise SystemExit("the static reader's process imported torch")
        print(f"{'file':<36} {'MB':>7} {'old ms':>9} {'static ms':>10} {'old/static':>11}")
        for title, name, old in zip(
            titles, FILES, (old_torchscript, old_state_dict, old_state_dict), strict=True
        ):
            path = folder / name
            times, counts = [], set()
            for _ in range(args.repeat):
                start = time.perf_counter()
                counts.add(old(path))
                times.append(time.perf_counter() - start)
            counts.add(static["results"][name]["parameters"])
            if len(counts) != 1:
                raise SystemExit(f"{title}: the two ways count different parameters {sorted(counts)}")
            old_ms = statistics.median(times) * 1e3
            static_ms = statistics.median(static["results"][name]["times"]) * 1e3
            size = path.stat().st_size / 1e6
            print(f"{title:<36} {size:7.1f} {old_ms:9.2f} {static_ms:10.2f} {old_ms / static_ms:10.1f}x")
        print(f"parameters agree ({args.repeat} rounds each way); the static reader's process has no torch")
    repeat = min(args.repeat, 5)
    print(
        f"import, fresh interpreter (median of {repeat}): torch {import_seconds('torch', repeat):.2f} s, "
        f"kpl_lab.catalog.model_structure {import_seconds('kpl_lab.catalog.model_structure', repeat):.2f} s"
    )


if __name__ == "__main__":
    main()
