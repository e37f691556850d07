"""The sandbox's cost: member-supplied work in the project's worker process against in this process.

Issue #29 moved the parsing of what members supply out of the platform's process: pipeline
validation (DuckDB parsing the pipeline's SQL) and the structure view of model files now run
in a sandboxed worker of the project. This measures what that costs a user, in one run:

- validating seed 001's three pipeline templates (segmentation, classification, detection)
  over generated fruit datasets: in this process (the engine opened here, as before) against
  the project's worker (each validation a session with an engine of its own there);
- the structure view of a ~50 MB TorchScript model and of its ~50 MB state dict: read here
  against read in the worker;
- a worker's first call, when none is idle (its process's start and imports).

Interleaved rounds, warm files; prints medians and sandboxed/in-process ratios (the aim: at most
1.5x for the warm calls users make). No helper here: the worker runs as this account, the
same process hop as under `kpl-lab up` (where the helper also starts it as the sandbox account).

    python benchmarks/sandbox.py
    python benchmarks/sandbox.py --size-mb 5 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

# a train function as the templates' algorithm nodes read it: input `data`, output `model`
TRAIN = """\
version: 1
image:
  runs: []
train:
  inputs:
    - {key: data, name: data}
  outputs:
    - {key: model, name: model}
  cmd: python train.py
"""


def timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def make_models(folder: Path, size_mb: int) -> list[str]:
    """Write a TorchScript model of about size_mb MB (Linear layers) and its state dict."""
    import warnings

    import torch

    width = 1024
    layers = max(1, size_mb * (1 << 20) // (width * width * 4))
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.script(model).save(str(folder / "scripted.pt"))
    torch.save(model.state_dict(), folder / "weights.pt")
    return ["scripted.pt", "weights.pt"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=50, help="size of the model files (MB)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds of each measure")
    parser.add_argument("--records", type=int, default=40, help="records of each generated fruit dataset")
    args = parser.parse_args()

    from kpl_lab.catalog.model_structure import describe_model_files
    from kpl_lab.pipelines import parse
    from kpl_lab.pipelines.templates import NAMES, template_text
    from kpl_lab.pipelines.validate import PlatformCatalog, validate
    from kpl_lab.platform import Platform
    from kpl_lab.testing.fruit import fruit_files, write_raw

    with tempfile.TemporaryDirectory(prefix="kpl-bench-sandbox-") as tmp:
        folder = Path(tmp)
        platform = Platform(home=str(folder / "home"))
        try:
            specs = [parse(template_text(name)) for name in NAMES]
            for name, spec in zip(NAMES, specs, strict=True):  # what each template's nodes name
                for node in spec.nodes.values():
                    if node["type"] == "dataset":
                        files = fruit_files(name, args.records)
                        raw = write_raw(folder / "upload" / node["dataset"], files, node.get("part", "root"))
                        platform.catalog.add_dataset("p", node["dataset"], raw)
                    elif node["type"] == "train" and not (folder / node["algorithm"]).exists():
                        code = folder / node["algorithm"]
                        code.mkdir()
                        (code / "environment.yml").write_text(TRAIN)
                        platform.catalog.add_algorithm("p", code)
            sandboxed = PlatformCatalog(platform, "p")

            class HereCatalog:
                """The platform's catalog with no sandbox: the SQL is checked in this process, as before."""

                dataset, model, algorithm = sandboxed.dataset, sandboxed.model, sandboxed.algorithm

            here = HereCatalog()
            for spec in specs:  # both ways agree, and every template validates
                for result in (validate(spec, here), validate(spec, sandboxed)):
                    assert result.ok, (spec.name, [n.problems for n in result.nodes.values() if n.problems])
            models = folder / "models"
            models.mkdir()
            files = make_models(models, args.size_mb)
            size = sum((models / name).stat().st_size for name in files) / (1 << 20)
            structure = "kpl_lab.catalog.model_structure:describe_model_files"
            assert describe_model_files(models, files) == platform.sandbox.call(
                "p", structure, str(models), files
            )

            measures = {
                "validate the 3 templates": (
                    lambda: [validate(spec, here) for spec in specs],
                    lambda: [validate(spec, sandboxed) for spec in specs],
                ),
                f"structure of {size:.0f} MB of models": (
                    lambda: describe_model_files(models, files),
                    lambda: platform.sandbox.call("p", structure, str(models), files),
                ),
            }
            times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in measures}
            for _ in range(args.rounds):
                for name, (local, remote) in measures.items():
                    times[name][0].append(timed(local))
                    times[name][1].append(timed(remote))
            cold = []
            for _ in range(max(3, args.rounds // 3)):
                platform.sandbox.close()  # no idle worker: the next call starts one
                cold.append(timed(lambda: platform.sandbox.call("p", "kpl_lab.testing.probes:echo", 1)))
        finally:
            platform.close()

    print(f"{'':38} {'in-process':>12} {'sandboxed':>12} {'ratio':>7}")
    for name, (local, remote) in times.items():
        here_ms, there_ms = statistics.median(local) * 1e3, statistics.median(remote) * 1e3
        print(f"{name:38} {here_ms:10.1f}ms {there_ms:10.1f}ms {there_ms / here_ms:6.2f}x")
    print(f"{'a worker started for a call':38} {'':>12} {statistics.median(cold) * 1e3:10.1f}ms")
    print(f"medians of {args.rounds} interleaved rounds (the aim for the warm calls: at most 1.5x)")


if __name__ == "__main__":
    main()
