"""`kpl-lab experiment ...`: create, list, show, stop and resume hyperparameter searches."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..api.choices import Direction, PrunerName, SamplerName
from ..errors import BadRequest, validation_error
from ..text import emit_json, format_number, human_duration, human_time, render_fields, render_table

if TYPE_CHECKING:
    from ..api.experiments import ExperimentRequest


def _request(args) -> ExperimentRequest:
    from pydantic import ValidationError

    from ..api.experiments import ExperimentRequest
    from ..arguments import parse_inputs, parse_space, read_yaml

    body = read_yaml(Path(args.file).read_text(), args.file, "file") if args.file else {}
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise BadRequest(f"{args.file}: expected a mapping of the request's fields", field="file")
    body["name"] = args.name
    if args.algorithm:
        body["algorithm"] = args.algorithm
    if args.function:
        body["function"] = args.function
    if args.input:
        body["inputs"] = {**body.get("inputs", {}), **parse_inputs(args.input)}
    for text in args.param:
        key, sep, value = text.partition("=")
        if not sep:
            raise BadRequest(f"--param {text!r}: expected NAME=VALUE", field="parameters")
        body.setdefault("parameters", {})[key] = read_yaml(value, f"--param {text!r}", f"parameters.{key}")
    for text in args.space:
        key, entry = parse_space(text)
        body.setdefault("space", {})[key] = entry
    if args.objective:
        body["objective"] = {"metric": args.objective, "direction": args.direction}
    budget = body.setdefault("budget", {})
    if args.trials:
        budget["trials"] = args.trials
    if args.seconds:
        budget["seconds"] = args.seconds
    if args.parallelism:
        body["parallelism"] = args.parallelism
    if args.sampler or args.seed is not None:
        body["sampler"] = {
            **body.get("sampler", {}),
            "name": args.sampler or body.get("sampler", {}).get("name", "tpe"),
            "seed": args.seed,
        }
    if args.pruner:
        body["pruner"] = {**(body.get("pruner") or {}), "name": args.pruner}
    try:
        return ExperimentRequest.model_validate(body)
    except ValidationError as error:
        raise validation_error(error) from None


def show_text(shown) -> str:
    """Return an experiment's fields and its trials as a table."""
    objective = f"{shown.objective['direction']} {shown.objective['metric']}"
    pairs = [
        ("experiment", shown.name),
        ("state", shown.state.value + (f" ({shown.reason})" if shown.reason else "")),
        ("algorithm", f"{shown.algorithm} {shown.function}"),
        ("inputs", shown.inputs),
        ("objective", objective),
        ("budget", shown.budget),
        ("sampler", shown.sampler["name"] + (f", pruner {shown.pruner['name']}" if shown.pruner else "")),
        (
            "best",
            f"trial {shown.best_trial}: {format_number(shown.best_value)} {shown.best_params}"
            if shown.best_trial is not None
            else "-",
        ),
        ("best model", shown.best_model),
    ]
    pairs += [("warning", warning) for warning in shown.warnings]
    rows = [
        [
            trial.number,
            trial.state.value,
            trial.job_id,
            "-" if trial.value is None else format_number(trial.value),
            trial.reported,
            " ".join(
                f"{key}={format_number(v) if isinstance(v, float) else v}" for key, v in trial.params.items()
            ),
        ]
        for trial in shown.trials
    ]
    table = (
        render_table(["TRIAL", "STATE", "JOB", "VALUE", "POINTS", "PARAMETERS"], rows)
        if rows
        else "no trials"
    )
    return render_fields(pairs) + "\n\n" + table


def _follow(platform, name: str) -> int:
    """Wait for an experiment to end (driving it, on this machine), printing each trial as it ends."""
    from ..api.experiments import Experiment

    printed: set[tuple[int, str]] = set()
    while True:
        experiment = Experiment.model_validate(platform.client.experiment(name))
        for trial in experiment.trials:
            if (trial.number, trial.state.value) not in printed:
                printed.add((trial.number, trial.state.value))
                value = "" if trial.value is None else f" {format_number(trial.value)}"
                print(
                    f"trial {trial.number} {trial.state.value}{value} (job {trial.job_id}) {trial.params}",
                    flush=True,
                )
        if experiment.state.value != "running":
            print(show_text(experiment))
            return 0 if experiment.state.value == "succeeded" else 1
        platform.tick()


def _answer(args, platform, shown: dict) -> int:
    from ..api.experiments import Experiment

    if getattr(args, "follow", False):
        return _follow(platform, shown["name"])
    if args.json:
        emit_json(shown)
    else:
        print(show_text(Experiment.model_validate(shown)))
    return 0


def cmd_experiment_create(args, platform) -> int:
    shown = platform.client.create_experiment(_request(args).model_dump(mode="json", exclude_unset=True))
    for warning in shown["warnings"]:
        print(f"kpl-lab: warning: {warning}", file=sys.stderr)
    return _answer(args, platform, shown)


def cmd_experiment_list(args, platform) -> int:
    from ..api.experiments import Experiment

    listed = platform.client.experiments()
    if args.json:
        emit_json(listed)
        return 0
    if not listed:
        print(f"no experiments in project {platform.project}")
        return 0
    table = []
    for shown in map(Experiment.model_validate, listed):
        table.append(
            [
                shown.name,
                shown.state.value,
                shown.algorithm,
                f"{shown.objective['direction']} {shown.objective['metric']}",
                f"{len(shown.trials)}/{shown.budget['trials']}",
                "-" if shown.best_value is None else format_number(shown.best_value),
                human_time(shown.created),
                human_duration(shown.searched_seconds) if shown.finished else "",
            ]
        )
    headers = ["NAME", "STATE", "ALGORITHM", "OBJECTIVE", "TRIALS", "BEST", "CREATED", "DURATION"]
    print(render_table(headers, table))
    return 0


def cmd_experiment_show(args, platform) -> int:
    return _answer(args, platform, platform.client.experiment(args.name))


def cmd_experiment_stop(args, platform) -> int:
    return _answer(args, platform, platform.client.stop_experiment(args.name))


def cmd_experiment_resume(args, platform) -> int:
    return _answer(args, platform, platform.client.resume_experiment(args.name, args.trials, args.seconds))


def register(groups) -> None:
    """Add the `experiment` commands."""
    commands = groups.add_parser(
        "experiment", help="hyperparameter searches whose trials are jobs"
    ).add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="check a search space and start searching")
    create.add_argument("name", metavar="NAME")
    create.add_argument("algorithm", metavar="ALGO", nargs="?", help="NAME or NAME:VERSION")
    create.add_argument("--file", metavar="EXPERIMENT.yml", help="the request as YAML; options override it")
    create.add_argument("--function", help="function to run (default train)")
    create.add_argument(
        "--input", action="append", default=[], metavar="KEY=REF", help="an input of every trial"
    )
    create.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="a fixed parameter"
    )
    create.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="float:LOW:HIGH[:log], int:LOW:HIGH[:log|:STEP] or categorical:A,B,...",
    )
    create.add_argument(
        "--objective", metavar="FIGURE/SERIES", help="the metric to optimise (its last value)"
    )
    create.add_argument("--direction", choices=[d.value for d in Direction], default="maximize")
    create.add_argument("--trials", type=int, help="budget: trials (default 10)")
    create.add_argument("--seconds", type=float, help="budget: seconds of searching")
    create.add_argument("--parallelism", type=int, help="trials queued or running at once (default 1)")
    create.add_argument("--sampler", choices=[s.value for s in SamplerName], help="default tpe")
    create.add_argument("--seed", type=int, help="the sampler's seed")
    create.add_argument("--pruner", choices=[p.value for p in PrunerName], help="stop poor trials early")
    create.set_defaults(func=cmd_experiment_create)
    listing = commands.add_parser("list", help="the project's experiments, newest first")
    listing.set_defaults(func=cmd_experiment_list)
    show = commands.add_parser("show", help="an experiment, its trials and best trial")
    show.add_argument("name", metavar="NAME")
    show.set_defaults(func=cmd_experiment_show)
    stop = commands.add_parser("stop", help="stop an experiment and its running trials")
    stop.add_argument("name", metavar="NAME")
    stop.set_defaults(func=cmd_experiment_stop)
    resume = commands.add_parser(
        "resume", help="resume a stopped experiment (or a finished one with more budget)"
    )
    resume.add_argument("name", metavar="NAME")
    resume.add_argument("--trials", type=int, help="a new trial budget")
    resume.add_argument("--seconds", type=float, help="a new time budget")
    resume.set_defaults(func=cmd_experiment_resume)
    for sub in (create, show, resume):
        sub.add_argument("--follow", action="store_true", help="drive it here and print trials until it ends")
    for sub in (create, listing, show, stop, resume):
        sub.add_argument("--json", action="store_true", help="print JSON")
