"""`kpl-lab example NAME DIR`: write an example dataset or algorithm to a folder, from wherever one stands.

The examples live in the source checkout's `examples/` folder (a wheel carries them as
`kpl_lab/examples`); datasets are generated offline by their `make_*.py` scripts,
algorithms are copied.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
ALGORITHMS = {
    "mlp-classification": "a small multilayer perceptron for the digits (numpy only: the demo's)",
    "image-classification": "a small CNN for the digits (PyTorch, CPU or one GPU)",
    "detection": "a tiny CenterNet-style detector for shapes-detection (PyTorch)",
    "segmentation": "a small U-Net for shapes-segmentation (PyTorch)",
}
DATASETS = {
    "digits": "1797 handwritten digits as PNGs, parts train and test (classification)",
    "shapes-detection": "coloured shapes with their boxes, parts train and test",
    "shapes-segmentation": "coloured shapes with their masks, parts train and test",
}


def examples_folder() -> Path:
    """Return the examples folder: the one packaged with kpl_lab, else the source checkout's."""
    for folder in (HERE / "examples", HERE.parent / "examples"):
        if (folder / "algorithms").is_dir():
            return folder
    raise FileNotFoundError(f"no examples folder next to {HERE}: install kpl-lab from its source or wheel")


def _script(name: str) -> ModuleType:
    path = examples_folder() / "datasets" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kpl_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_example(name: str, out: Path) -> str:
    """Write example `name` into the new folder `out`; return what was written, in words."""
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    if name in ALGORITHMS:
        shutil.copytree(
            examples_folder() / "algorithms" / name,
            out,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        return f"algorithm {name} in {out} (kpl-lab algorithm add {out})"
    if name == "digits":
        counts = _script("make_digits").make_digits(out)
    elif name in DATASETS:
        counts = _script("make_shapes").make_shapes(out, name.removeprefix("shapes-"))
    else:
        raise KeyError(name)
    parts = ", ".join(f"{part} {count}" for part, count in counts.items())
    return f"dataset {name} in {out} ({parts} records; kpl-lab dataset add {name} {out})"


def main(argv: list[str]) -> int:
    """Run `kpl-lab example`."""
    listing = "\n".join(f"  {name:<22}{words}" for name, words in (*DATASETS.items(), *ALGORITHMS.items()))
    parser = argparse.ArgumentParser(
        prog="kpl-lab example",
        description="Write an example dataset or algorithm to a folder.",
        epilog="examples:\n" + listing,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", choices=[*DATASETS, *ALGORITHMS], metavar="NAME", help="which example")
    parser.add_argument("dir", type=Path, metavar="DIR", help="the folder to write (new or empty)")
    args = parser.parse_args(argv)
    try:
        print(write_example(args.name, args.dir))
    except (FileExistsError, FileNotFoundError) as error:
        print(f"kpl-lab example: error: {error}", file=sys.stderr)
        return 2
    return 0
