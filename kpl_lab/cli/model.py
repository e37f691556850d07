"""`kpl-lab model add|list|show|delete|alias|unalias|infer|evaluate`."""

from __future__ import annotations

import argparse

from ..errors import BadRequest
from ..text import comparison_rows, emit_json, human_size, render_table
from .catalog import add_commands, cmd_show
from .job import _parameters, _started


def _add_args(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("name", metavar="NAME", help=f"{kind} name")
    parser.add_argument(
        "path", metavar="PATH", help="model file, folder or archive (.zip, .tar, .tar.gz, .tgz)"
    )


def structure_text(files: list[dict]) -> str:
    """Return the structure view as text: each file with its layers, parameters and shapes."""
    out = []
    for entry in files:
        out.append(f"{entry['path']}  ({entry['format']}, {human_size(entry['size_bytes'])})")
        if entry.get("error"):
            out.append(f"  {entry['error']}")
            continue
        if entry.get("parameters") is not None:
            out.append(f"  parameters: {entry['parameters']:,}")
        for word in ("inputs", "outputs"):
            for tensor in entry.get(word, []):
                shape = "x".join(str(d) for d in tensor["shape"])
                out.append(f"  {word[:-1]}: {tensor['name']} {tensor['dtype']}[{shape}]")
        if entry.get("op_counts"):
            out.append("  ops: " + ", ".join(f"{op} {n}" for op, n in entry["op_counts"].items()))
        if entry.get("layers"):
            rows = [[layer["name"], layer["type"], f"{layer['parameters']:,}"] for layer in entry["layers"]]
            table = render_table(["LAYER", "TYPE", "PARAMETERS"], rows)
            out += ["  " + line for line in table.splitlines()]
            if entry["layers_total"] > len(entry["layers"]):
                out.append(f"  ... {entry['layers_total'] - len(entry['layers'])} more")
    return "\n".join(out)


def cmd_model_show(args, platform) -> int:
    if not args.structure:
        return cmd_show(args, platform)
    structure = platform.model_structure(args.ref)
    if args.json:
        emit_json(structure)
    else:
        print(f"model {structure['ref']}")
        print(structure_text(structure["files"]))
    return 0


def cmd_alias(args, platform) -> int:
    ref = platform.set_alias(args.ref, args.alias)
    print(f"model {ref.partition(':')[0]}@{args.alias} -> {ref}")
    return 0


def cmd_unalias(args, platform) -> int:
    ref = platform.remove_alias(args.name, args.alias)
    print(f"removed model alias {args.name}@{args.alias} (was {ref})")
    return 0


def cmd_infer(args, platform) -> int:
    """Submit the `infer` function of the model's algorithm over a dataset (batch inference)."""
    model, _ = platform.catalog_show("model", args.model)
    algorithm_ref = args.algorithm or (model["lineage"] or {}).get("algorithm")
    if not algorithm_ref:
        raise BadRequest(
            f"model {model['ref']} was not made by a job: name the algorithm that infers (--algorithm)",
            field="algorithm",
        )
    algorithm = platform.algorithm_detail(algorithm_ref)
    spec = algorithm["function_specs"].get("infer")
    if spec is None:
        raise BadRequest(f"algorithm {algorithm['ref']} has no infer function", field="algorithm")
    keys = [port["key"] for port in spec["inputs"]]
    data_keys = [key for key in keys if key != args.model_key]
    if args.model_key not in keys or not data_keys:
        raise BadRequest(
            f"algorithm {algorithm['ref']}: infer takes inputs {', '.join(keys)}; "
            f"expected {args.model_key!r} and one for the dataset",
            field="algorithm",
        )
    dataset, _ = platform.catalog_show("dataset", args.dataset)
    job = platform.client.submit(
        **{
            "algorithm": algorithm["ref"],
            "function": "infer",
            "inputs": {args.model_key: f"model:{model['ref']}", data_keys[0]: f"dataset:{dataset['ref']}"},
            "parameters": _parameters(algorithm["parameters"] or {}, args.param),
        }
    )
    return _started(
        args, platform, job, f"submitted job {job['id']} ({model['ref']} infers {dataset['ref']})"
    )


def cmd_model_evaluate(args, platform) -> int:
    """Submit the algorithm's test function once per model version; with --follow, compare their reports."""
    from ..api.experiments import Comparison

    ref, defaults = platform.algorithm_parameters(args.algorithm)
    parameters = _parameters(defaults, args.param)
    ids = [
        platform.client.submit(
            **{
                "algorithm": ref,
                "function": args.function,
                "inputs": {
                    args.data_key: args.data,
                    args.model_key: model if model.startswith("model:") else f"model:{model}",
                },
                "parameters": parameters,
            }
        )["id"]
        for model in args.model
    ]
    if not args.follow:
        print(f"submitted {', '.join(ids)}; compare them with: kpl-lab job compare {' '.join(ids)}")
        return 0
    while any(platform.client.job(job_id)["state"] in ("queued", "running") for job_id in ids):
        platform.tick()
    if len(ids) < 2:
        job = platform.client.job(ids[0])
        print(f"job {job['id']} {job['state']}: {job['results']}")
        return 0 if job["state"] == "succeeded" else 1
    comparison = platform.client.compare(ids)
    if args.json:
        emit_json(comparison)
    else:
        headers, rows = comparison_rows(Comparison.model_validate(comparison))
        print(
            render_table(
                ["", *headers], [[("* " if d else "  ") + label, *cells] for label, cells, d in rows]
            )
        )
    return 0 if all(job["state"] == "succeeded" for job in comparison["jobs"]) else 1


def register(groups) -> None:
    """Add the `model` commands."""
    group = add_commands(groups, "model", _add_args)
    evaluate = group.add_parser(
        "evaluate",
        help="run an algorithm's test function on several model versions and compare their reports",
    )
    evaluate.add_argument("algorithm", metavar="ALGO", help="NAME or NAME:VERSION")
    evaluate.add_argument("--data", required=True, metavar="REF", help="the dataset, e.g. dataset:digits")
    evaluate.add_argument(
        "--model", action="append", required=True, metavar="REF", help="a model version (repeat: several)"
    )
    evaluate.add_argument(
        "--function", default="test", help="the function that writes the report (default test)"
    )
    evaluate.add_argument("--data-key", default="data", help="its dataset input (default data)")
    evaluate.add_argument("--model-key", default="model", help="its model input (default model)")
    evaluate.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a parameter")
    evaluate.add_argument(
        "--follow", action="store_true", help="wait for every job, then print them side by side"
    )
    evaluate.add_argument("--json", action="store_true", help="with --follow: the comparison as JSON")
    evaluate.set_defaults(func=cmd_model_evaluate)
    show = group.choices["show"]
    show.add_argument(
        "--structure", action="store_true", help="layers/ops, parameter counts and shapes of its files"
    )
    show.set_defaults(func=cmd_model_show)
    alias = group.add_parser("alias", help="point NAME@ALIAS at a model version")
    alias.add_argument("ref", metavar="NAME[:VERSION]", help="the version (default: latest)")
    alias.add_argument("alias", metavar="ALIAS", help="e.g. production, canary, best")
    alias.set_defaults(func=cmd_alias)
    unalias = group.add_parser("unalias", help="remove an alias")
    unalias.add_argument("name", metavar="NAME")
    unalias.add_argument("alias", metavar="ALIAS")
    unalias.set_defaults(func=cmd_unalias)
    infer = group.add_parser("infer", help="batch inference: run the model over a dataset as a job")
    infer.add_argument("model", metavar="MODEL", help="NAME, NAME:VERSION or NAME@ALIAS")
    infer.add_argument("dataset", metavar="DATASET", help="NAME or NAME:VERSION")
    infer.add_argument("--algorithm", metavar="A", help="default: the one whose job made the model")
    infer.add_argument("--model-key", default="model", help="the infer input that takes the model")
    infer.add_argument("--param", action="append", default=[], metavar="K=V", help="override a parameter")
    infer.add_argument("-f", "--follow", action="store_true", help="follow the job until it ends")
    infer.add_argument("--json", action="store_true", help="print the job as JSON")
    infer.set_defaults(func=cmd_infer)
