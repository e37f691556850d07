"""`kpl-lab job ...`: submit, follow, list, show, stop jobs and read their logs and metrics."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from ..api.choices import FINAL_STATES, JOB_STATES
from ..errors import BadRequest, parameter_error
from ..text import (
    comparison_rows,
    display_width,
    emit_json,
    format_number,
    human_duration,
    human_time,
    progress_bar,
    render_fields,
    render_table,
    short,
    sparkline,
)

FOLLOW_INTERVAL = 0.5


def usage_text(usage: dict) -> str:
    """Return a job's latest resource use in one line (empty before the first sample)."""
    latest = usage.get("latest")
    if not latest:
        return ""
    parts = []
    if latest.get("cpu_percent") is not None:
        parts.append(f"cpu {latest['cpu_percent']:.0f}%")
    parts.append(f"memory {latest.get('memory_mb', 0):.0f} MB (peak {usage.get('peak_memory_mb', 0):.0f} MB)")
    for gpu in latest.get("gpus") or []:
        parts.append(f"gpu{gpu['index']} {gpu['utilization_percent']}% {gpu['memory_mb']:.0f} MB")
    memory = [sample.get("memory_mb", 0) for sample in usage.get("history", [])]
    if len(memory) > 1:
        parts.append(f"memory over time {sparkline(memory)}")
    return ", ".join(parts)


def job_json(platform, job: dict) -> dict:
    """Return the job as the REST API answers it, with its latest metric values and use."""
    return job | {
        "metrics": platform.latest_metrics(job["id"]),
        "metric_summaries": [
            {k: v for k, v in summary.items() if k != "curve"}
            for summary in platform.metric_summaries(job["id"])
        ],
        "usage": {k: v for k, v in platform.client.usage(job["id"]).items() if k != "history"},
    }


def _moment(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _duration(job: dict) -> float | None:
    start = _moment(job["started"])
    if start is None:
        return None
    end = _moment(job["finished"]) or datetime.now(timezone.utc)
    return (end - start).total_seconds()


def _waits(job: dict) -> str:
    """Return why a queued job waits (empty once it runs)."""
    return (job.get("queue") or {}).get("message") or ""


def _resources_text(limits: dict) -> str:
    parts = [f"cpu {limits.get('cpu', '-'):g}" if limits.get("cpu") else "cpu -"]
    parts.append(f"memory {limits.get('memory', '-')} MB")
    if limits.get("shm") is not None:
        parts.append(f"shm {limits['shm']} MB")
    parts += [f"{kind} {count}" for kind, count in sorted((limits.get("devices") or {}).items())]
    workers = limits.get("workers", 1)
    return ", ".join(parts) + (f" (each of {workers} workers)" if workers > 1 else "")


def status_line(job: dict, metrics: dict[str, dict[str, float]]) -> str:
    """Return the one-line live status of a followed job (figure -> series -> last value)."""
    line = f"{job['id']} {job['state']:<9} {progress_bar(job['progress'])}"
    if job["state"] == "running" and job["eta_seconds"] is not None:
        line += f"  {human_duration(job['eta_seconds'])} left"
    values = "  ".join(
        f"{name}={format_number(value)}" for series in metrics.values() for name, value in series.items()
    )
    return f"{line}  {values}" if values else line


def _parameters(base: dict, texts: Sequence[str]) -> dict:
    """Type `NAME=VALUE` overrides against `base` (YAML values; text where the default is text)."""
    from ..algorithms.errors import ParameterError
    from ..algorithms.parameters import apply_overrides

    if not texts:
        return {}
    try:
        return apply_overrides(base, list(texts))
    except ParameterError as exc:
        raise parameter_error(exc) from exc


def _resources(args) -> dict:
    return {
        name: getattr(args, name)
        for name in ("cpu", "memory", "shm", "gpu", "npu", "workers")
        if getattr(args, name, None) is not None
    }


def cmd_job_submit(args, platform) -> int:
    from ..arguments import parse_inputs

    ref, defaults = platform.algorithm_parameters(args.algorithm)
    request = {
        "algorithm": ref,
        "function": args.function,
        "inputs": parse_inputs(args.input),
        "parameters": _parameters(defaults, args.param),
        "resources": _resources(args) or None,
    }
    job = platform.client.submit(**request)
    return _started(args, platform, job, f"submitted job {job['id']} ({job['algorithm']} {job['function']})")


def cmd_job_rerun(args, platform) -> int:
    job = platform.client.rerun(args.job_id)
    return _started(args, platform, job, f"job {job['id']} re-runs job {args.job_id}")


def cmd_job_copy(args, platform) -> int:
    source = platform.client.job(args.job_id)
    parameters = _parameters(source["parameters"] or {}, args.param) or None
    job = platform.client.copy(args.job_id, parameters, _resources(args) or None)
    return _started(args, platform, job, f"job {job['id']} copies job {args.job_id}")


def cmd_job_resume(args, platform) -> int:
    source = platform.client.job(args.job_id)
    job = platform.client.resume(args.job_id, _parameters(source["parameters"] or {}, args.param) or None)
    return _started(args, platform, job, f"job {job['id']} resumes job {args.job_id}")


def _started(args, platform, job: dict, message: str) -> int:
    if args.json and not args.follow:
        emit_json(job_json(platform, job))
        return 0
    print(f"{message}: {job['state']}" + (f" ({job['reason']})" if job["reason"] else ""))
    if args.follow:
        return follow_job(platform, job["id"])
    return 0


def follow_job(platform, job_id: str, out=None) -> int:
    """Show a live status line until the job ends; exit status 0 when it succeeded, else 1."""
    try:
        return _follow(platform, job_id, out or sys.stdout)
    except KeyboardInterrupt:
        print(f"\nstopped following; job {job_id} goes on (kpl-lab job show {job_id})", file=sys.stderr)
        return 130


def _follow(platform, job_id: str, out) -> int:
    live = out.isatty()
    shown, width, waits = None, 0, ""
    while True:
        job = platform.client.job(job_id)
        why = _waits(job)
        if why and why != waits:  # a line of its own, above the status line
            out.write(("\r" + " " * width + "\r" if live else "") + f"{job_id} {why}\n")
            width = 0
        waits = why
        metrics = platform.latest_metrics(job_id)
        line = status_line(job, metrics)
        if live:
            out.write("\r" + line + " " * max(0, width - display_width(line)))
            width = display_width(line)
        else:  # a log file: a line when state, percentage or metrics change
            key = (job["state"], int(job["progress"] * 100), repr(metrics))
            if key != shown:
                out.write(line + "\n")
                shown = key
        out.flush()
        if job["state"] in FINAL_STATES:
            break
        platform.tick()  # with no host on the home, a round here: a queued job must start to end
    if live:
        out.write("\n")
    summary = f"job {job['id']} {job['state']} after {human_duration(_duration(job))}"
    if job["reason"]:
        summary += f": {job['reason']}"
    out.write(summary + "\n")
    for key, spec in (job["outputs"] or {}).items():
        if spec.get("registered"):
            out.write(f"output {key}: {spec['registered']}\n")
    if job["state"] != "succeeded" and job["last_log_lines"]:
        out.write("last log lines:\n" + job["last_log_lines"].rstrip("\n") + "\n")
    out.flush()
    return 0 if job["state"] == "succeeded" else 1


def cmd_job_list(args, platform) -> int:
    jobs = platform.client.jobs(args.state)
    if args.json:
        emit_json([job_json(platform, job) for job in jobs])
        return 0
    if not jobs:
        print(f"no jobs in project {platform.project}" + (f" in state {args.state}" if args.state else ""))
        return 0
    rows = [
        [
            job["id"],
            job["state"],
            job["algorithm"],
            job["function"],
            f"{job['progress'] * 100:.0f}%",
            human_time(job["created"]),
            human_duration(_duration(job)),
            short(job["reason"] or _waits(job)),
        ]
        for job in jobs
    ]
    headers = ["ID", "STATE", "ALGORITHM", "FUNCTION", "PROGRESS", "CREATED", "DURATION", "REASON"]
    print(render_table(headers, rows))
    return 0


def cmd_job_show(args, platform) -> int:
    job = platform.client.job(args.job_id)
    if args.json:
        emit_json(job_json(platform, job))
        return 0
    progress = progress_bar(job["progress"])
    if job["state"] == "running":
        eta = job["eta_seconds"]
        progress += f"  {human_duration(eta)} left" if eta is not None else "  time left unknown"
    inputs = ", ".join(
        f"{key}={spec.get('kind')}:{spec.get('version')}" for key, spec in job["inputs"].items()
    )
    outputs = ", ".join(
        f"{key}={spec.get('registered') or '(not registered)'}"
        for key, spec in (job["outputs"] or {}).items()
    )
    devices = ", ".join(
        f"{kind} {indexes}" for kind, indexes in (job["assigned_devices"] or {}).items() if indexes
    )
    pairs = [
        ("job", job["id"]),
        ("state", job["state"]),
        ("algorithm", f"{job['algorithm']} ({job['function']})"),
        ("inputs", inputs),
        ("parameters", job["parameters"]),
        ("progress", progress),
        ("resources", _resources_text(job["limits"] or {})),
        ("devices", devices),
        ("enforcement", job["enforcement"]),
        ("usage", usage_text(platform.client.usage(job["id"]))),
        ("created", human_time(job["created"])),
        ("started", human_time(job["started"])),
        ("finished", human_time(job["finished"])),
        ("duration", human_duration(_duration(job))),
        ("exit code", job["exit_code"]),
        ("reason", job["reason"]),
        ("outputs", outputs),
    ]
    if job["state"] == "queued":
        pairs.insert(2, ("waits", _waits(job)))
    if job["copied_from"]:
        pairs.append(("copied from", job["copied_from"]))
    if job["resumed_from"]:
        pairs.append(("resumed from", job["resumed_from"]))
    print(render_fields(pairs))
    summaries = platform.metric_summaries(job["id"])
    if summaries:
        print("metrics:")
        rows = [
            [
                s["series"],
                s["figure"],
                s["points"],
                s["curve"],
                *(format_number(s[k]) if s[k] is not None else "-" for k in ("last", "min", "max")),
            ]
            for s in summaries
        ]
        print(render_table(["SERIES", "FIGURE", "POINTS", "CURVE", "LAST", "MIN", "MAX"], rows))
    if job["state"] in FINAL_STATES and job["state"] != "succeeded" and job["last_log_lines"]:
        print("last log lines:")
        print(job["last_log_lines"].rstrip("\n"))
    return 0


def _metrics_table(figures: dict, summaries: list[dict]) -> str:
    last = {(s["figure"], s["series"]): s["last"] for s in summaries}
    rows = []
    for figure, curves in figures.items():
        for name, points in curves.items():
            values = [y for _, y in points]
            value = last.get((figure, name), points[-1][1] if points else None)
            rows.append(
                [
                    name,
                    figure,
                    sparkline(values),
                    format_number(value) if value is not None else "-",
                    format_number(min(values)) if values else "-",
                    format_number(max(values)) if values else "-",
                ]
            )
    return render_table(["SERIES", "FIGURE", "CURVE", "LAST", "MIN", "MAX"], rows)


def cmd_job_logs(args, platform) -> int:
    for line in platform.logs(args.job_id, follow=args.follow, worker=args.worker):
        print(line, flush=args.follow)
    return 0


def cmd_job_stop(args, platform) -> int:
    job = platform.client.stop(args.job_id)
    # the job's supervisor records the end; wait for it (SIGKILL comes after the grace period)
    deadline = time.monotonic() + platform.grace_seconds + 10
    while job["state"] not in FINAL_STATES and time.monotonic() < deadline:
        time.sleep(FOLLOW_INTERVAL / 2)
        job = platform.client.job(args.job_id)
    print(f"job {job['id']} {job['state']}" + (f": {job['reason']}" if job["reason"] else ""))
    return 0


def cmd_job_metrics(args, platform) -> int:
    job = platform.client.job(args.job_id)
    metrics = platform.client.metrics(job["id"], args.max_points)
    figures = metrics["figures"]
    title = f"job {job['id']} ({job['algorithm']} {job['function']})"
    if args.plot:
        if not figures:
            raise BadRequest(f"job {job['id']} has no metrics to plot yet", field="plot")
        plot_metrics(figures, args.plot, title=title)
        print(f"wrote {args.plot}")
        return 0
    if args.json:
        emit_json(metrics)
        return 0
    if not figures:
        print(f"job {job['id']} has no metrics yet")
        return 0
    print(_metrics_table(figures, platform.metric_summaries(job["id"])))
    return 0


def plot_metrics(figures: dict[str, dict], path: str, title: str) -> None:
    """Draw each metric figure as one panel of a PNG: {figure: {series: [(x, y), ...]}}."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise BadRequest("--plot needs matplotlib: pip install matplotlib", field="plot") from exc
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise BadRequest(f"--plot {path}: the file name must end in .png", field="plot")
    if not target.parent.is_dir():
        raise BadRequest(f"--plot {path}: folder {target.parent} does not exist", field="plot")
    figure, panels = plt.subplots(len(figures), 1, figsize=(8, 3.2 * len(figures)), squeeze=False)
    try:
        for axes, (name, curves) in zip(panels[:, 0], sorted(figures.items()), strict=True):
            for series, points in sorted(curves.items()):
                axes.plot([x for x, _ in points], [y for _, y in points], label=series)
            axes.set_title(name or "(untitled)")
            axes.grid(alpha=0.3)
            axes.legend()
        figure.suptitle(title)
        figure.tight_layout()
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        figure.savefig(tmp, dpi=100, format="png")
        os.replace(tmp, target)  # a reader never sees half a PNG
    finally:
        plt.close(figure)


def cmd_job_compare(args, platform) -> int:
    from ..api.experiments import Comparison

    comparison = platform.client.compare(args.job_ids)
    if args.json:
        emit_json(comparison)
        return 0
    headers, rows = comparison_rows(Comparison.model_validate(comparison))
    # a `*` marks the rows whose values differ between the jobs
    print(
        render_table(
            ["", *headers], [[("* " if differ else "  ") + label, *cells] for label, cells, differ in rows]
        )
    )
    return 0


def register(groups) -> None:
    """Add the `job` commands."""
    jobs = groups.add_parser("job", help="submit and watch jobs").add_subparsers(
        dest="command", required=True
    )
    submit = jobs.add_parser("submit", help="run one function of an algorithm as a job")
    submit.add_argument("algorithm", metavar="ALGO", help="NAME (latest version) or NAME:VERSION")
    submit.add_argument("--function", default="train", help="train, test, infer, deploy or compile")
    submit.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="KEY=REF",
        help="an input: REF is dataset:NAME[:VERSION], model:NAME[:VERSION] or NAME[:VERSION]",
    )
    _job_run_args(submit)
    submit.set_defaults(func=cmd_job_submit)
    for name, func, text in (
        ("rerun", cmd_job_rerun, "run a job again exactly"),
        ("copy", cmd_job_copy, "run a job again with other parameters or resources"),
        ("resume", cmd_job_resume, "continue a job from the model it produced"),
    ):
        sub = jobs.add_parser(name, help=text)
        sub.add_argument("job_id", metavar="ID")
        _job_run_args(sub, parameters=name != "rerun", resources=name == "copy")
        sub.set_defaults(func=func)
    listing = jobs.add_parser("list", help="list the project's jobs, newest first")
    listing.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=cmd_job_list)
    show = jobs.add_parser("show", help="state, progress, resources, metrics and reason of a job")
    show.add_argument("job_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=cmd_job_show)
    logs = jobs.add_parser("logs", help="print a job's output")
    logs.add_argument("job_id", metavar="ID")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    logs.add_argument(
        "--worker", type=int, default=0, metavar="N", help="the log of worker N of a distributed job"
    )
    logs.set_defaults(func=cmd_job_logs)
    stop = jobs.add_parser("stop", help="stop a queued or running job")
    stop.add_argument("job_id", metavar="ID")
    stop.set_defaults(func=cmd_job_stop)
    metrics = jobs.add_parser("metrics", help="a job's metric curves")
    metrics.add_argument("job_id", metavar="ID")
    metrics.add_argument("--plot", metavar="OUT.png", help="draw the curves into a PNG (needs matplotlib)")
    metrics.add_argument("--max-points", type=int, default=1000, help="points per series at most")
    metrics.add_argument("--json", action="store_true", help="print JSON")
    metrics.set_defaults(func=cmd_job_metrics)
    compare = jobs.add_parser("compare", help="jobs side by side: parameters, metrics, inputs, time, memory")
    compare.add_argument("job_ids", metavar="ID", nargs="+", help="two or more jobs")
    compare.add_argument("--json", action="store_true", help="print JSON")
    compare.set_defaults(func=cmd_job_compare)


def _job_run_args(parser: argparse.ArgumentParser, parameters: bool = True, resources: bool = True) -> None:
    if parameters:
        parser.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="override a parameter.yml value (e.g. lr=0.01, model.depth=18)",
        )
    if resources:
        parser.add_argument("--cpu", type=float, help="CPUs")
        parser.add_argument("--memory", type=int, metavar="MB", help="memory limit in MB")
        parser.add_argument("--shm", type=int, metavar="MB", help="shared memory in MB")
        parser.add_argument("--gpu", type=int, metavar="N", help="GPUs")
        parser.add_argument("--npu", type=int, metavar="N", help="NPUs")
        parser.add_argument(
            "--workers", type=int, metavar="N", help="distributed training workers, each with the above"
        )
    parser.add_argument("--follow", action="store_true", help="show live progress until the job ends")
    parser.add_argument("--json", action="store_true", help="print the job as JSON")
