"""`kpl-lab model add|list|show|delete|evaluate`."""

from __future__ import annotations

import argparse
import time

from ..text import emit_json, render_table
from .catalog import add_commands
from .job import _parameters

FOLLOW_INTERVAL = 0.5


def _add_args(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("name", metavar="NAME", help=f"{kind} name")
    what = "kpl-dataset folder" if kind == "dataset" else "model file or folder"
    parser.add_argument("path", metavar="PATH", help=what)


def cmd_model_evaluate(args, platform) -> int:
    from ..experiments.compare import compare_jobs, comparison_rows
    from ..experiments.evaluation import evaluate_models

    version = platform.catalog.get_algorithm(args.project, args.algorithm)
    jobs = evaluate_models(
        platform,
        args.project,
        version.ref,
        args.data,
        args.model,
        function=args.function,
        data_key=args.data_key,
        model_key=args.model_key,
        parameters=_parameters(version.parameters or {}, args.param),
    )
    ids = [job.id for job in jobs]
    if not args.follow:
        print(f"submitted {', '.join(ids)}; compare them with: kpl-lab job compare {' '.join(ids)}")
        return 0
    while any(platform.jobs.get(args.project, job_id).state in ("queued", "running") for job_id in ids):
        platform.jobs.tick()
        time.sleep(FOLLOW_INTERVAL)
    if len(ids) < 2:
        job = platform.jobs.get(args.project, ids[0])
        print(f"job {job.id} {job.state}: {job.results}")
        return 0 if job.state == "succeeded" else 1
    comparison = compare_jobs(platform, args.project, ids)
    if args.json:
        emit_json(comparison.model_dump(mode="json"))
    else:
        headers, rows = comparison_rows(comparison)
        print(
            render_table(
                ["", *headers], [[("* " if d else "  ") + label, *cells] for label, cells, d in rows]
            )
        )
    return 0 if all(job.state == "succeeded" for job in comparison.jobs) else 1


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
    evaluate.set_defaults(
        func=cmd_model_evaluate,
        on_this_machine="Client().submit of the test function per model, then %kpl_compare",
    )
