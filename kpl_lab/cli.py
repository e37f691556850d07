"""The `kpl-lab` command: algorithms, datasets, models and jobs from a terminal."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unicodedata
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from .api.jobs import JOB_STATES
from .catalog import serialize
from .errors import BadRequest, KPLError, parameter_error, validation_error

# ----------------------------------------------------------------- formatting


def human_size(size: int | None) -> str:
    """Return a byte count as a short human-readable string."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_time(moment: datetime | None) -> str:
    """Return a stored (UTC) time in local time, to the minute."""
    if moment is None:
        return "-"
    if moment.tzinfo is None:  # SQLite returns naive UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


def display_width(text: str) -> int:
    """Return how many terminal columns `text` takes (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Return rows as an aligned plain-text table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(display_width(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c + " " * (w - display_width(c)) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_fields(pairs: Sequence[tuple[str, object]]) -> str:
    """Return `key: value` lines, keys aligned."""
    width = max(len(k) for k, _ in pairs)
    out = []
    for key, value in pairs:
        if isinstance(value, (dict, list)):
            value = json.dumps(value, ensure_ascii=False, sort_keys=True) if value else "-"
        out.append(f"{key + ':':<{width + 1}} {'-' if value in (None, '') else value}")
    return "\n".join(out)


def emit_json(data: object) -> None:
    """Print data as JSON for scripts."""
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))


# ----------------------------------------------------------------- catalog objects as data


def version_json(kind: str, row, catalog) -> dict:
    """Return a dataset, model or algorithm version as plain data, with its kind and folder."""
    return {"kind": kind, **serialize.version_json(kind, row), "path": str(catalog.path(row))}


def named_json(kind: str, named, catalog) -> dict:
    """Return a dataset, model or algorithm with all its versions as plain data."""
    return {
        **serialize.named_json(kind, named),
        "versions": [version_json(kind, v, catalog) for v in named.versions],
    }


# ----------------------------------------------------------------- commands


def cmd_add(args, platform) -> int:
    catalog = platform.catalog
    if args.kind == "algorithm":
        row = catalog.add_algorithm(args.project, args.path, name=args.name, description=args.description)
    elif args.kind == "dataset":
        row = catalog.add_dataset(args.project, args.name, args.path, description=args.description)
    else:
        row = catalog.add_model(args.project, args.name, args.path, description=args.description)
    if args.json:
        emit_json(version_json(args.kind, row, catalog))
    else:
        print(f"added {args.kind} {row.ref} ({human_size(row.size_bytes)}) in project {args.project}")
    return 0


def cmd_list(args, platform) -> int:
    listing = getattr(platform.catalog, f"list_{args.kind}s")(args.project)
    if args.json:
        emit_json([named_json(args.kind, named, platform.catalog) for named in listing])
        return 0
    if not listing:
        print(f"no {args.kind}s in project {args.project}")
        return 0
    headers = ["NAME", "VERSIONS", "LATEST"]
    headers += {"dataset": ["RECORDS"], "model": ["FILES"], "algorithm": ["FUNCTIONS"]}[args.kind]
    headers += ["SIZE", "CREATED", "DESCRIPTION"]
    rows = []
    for named in listing:
        latest = named.versions[-1] if named.versions else None
        if latest is None:
            extra = "-"
        elif args.kind == "dataset":
            extra = latest.record_count
        elif args.kind == "model":
            extra = len(latest.files)
        else:
            extra = ",".join(latest.functions)
        rows.append(
            [
                named.name,
                len(named.versions),
                latest.version if latest else "-",
                extra,
                human_size(latest.size_bytes if latest else None),
                human_time(latest.created if latest else named.created),
                _short(named.description),
            ]
        )
    print(render_table(headers, rows))
    return 0


def cmd_show(args, platform) -> int:
    catalog = platform.catalog
    row = getattr(catalog, f"get_{args.kind}")(args.project, args.ref)
    data = version_json(args.kind, row, catalog)
    versions = [v.version for v in getattr(row, args.kind).versions]
    if args.json:
        emit_json(data | {"all_versions": versions})
        return 0
    pairs = [(args.kind, data["ref"]), ("path", data["path"]), ("description", data["description"])]
    pairs.append(("size", human_size(row.size_bytes)))
    if args.kind == "dataset":
        parts = ", ".join(f"{part} ({count})" for part, count in row.parts.items())
        pairs += [("records", row.record_count), ("parts", parts)]
    elif args.kind == "model":
        pairs.append(("files", ", ".join(row.files[:20]) + (" ..." if len(row.files) > 20 else "")))
    else:
        pairs += [("functions", ", ".join(row.functions)), ("parameters", row.parameters)]
    pairs += [("created", human_time(row.created)), ("lineage", row.lineage)]
    pairs.append(("versions", ", ".join(v + (" *" if v == row.version else "") for v in versions)))
    print(render_fields(pairs))
    return 0


def cmd_delete(args, platform) -> int:
    deleted = getattr(platform.catalog, f"delete_{args.kind}")(args.project, args.ref)
    for ref in deleted:
        print(f"deleted {args.kind} {ref}")
    return 0


def _short(text: str, width: int = 40) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


# ----------------------------------------------------------------- jobs

SPARKS = "▁▂▃▄▅▆▇█"
FOLLOW_INTERVAL = 0.5


def human_duration(seconds: float | None) -> str:
    """Return seconds as `1h02m`, `3m20s` or `12s`."""
    if seconds is None:
        return "-"
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def progress_bar(fraction: float, width: int = 24) -> str:
    """Return `[#######.........]  42%`."""
    fraction = min(1.0, max(0.0, fraction or 0.0))
    done = int(round(fraction * width))
    return f"[{'#' * done}{'.' * (width - done)}] {fraction * 100:3.0f}%"


def sparkline(values: Sequence[float], width: int = 30) -> str:
    """Return a one-line chart of `values` (resampled to at most `width` characters)."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [values[min(len(values) - 1, int(i * step))] for i in range(width)] + [values[-1]]
        values = values[:width]
    low, high = min(values), max(values)
    if high == low:
        return SPARKS[len(SPARKS) // 2] * len(values)
    scale = (len(SPARKS) - 1) / (high - low)
    return "".join(SPARKS[int(round((v - low) * scale))] for v in values)


def format_number(value: float) -> str:
    """Return a metric value in a short form."""
    return f"{value:.4g}"


def latest_metrics(platform, job_id: str) -> dict[str, tuple[float, float]]:
    """Return each series' last point (x, value) of a job, straight from the metrics table."""
    from sqlalchemy import and_, func, select

    from .catalog.jobs import Metric

    with platform.session() as session:
        last = (
            select(Metric.figure, Metric.series, func.max(Metric.step).label("step"))
            .where(Metric.job_id == job_id)
            .group_by(Metric.figure, Metric.series)
            .subquery()
        )
        rows = session.execute(
            select(Metric.figure, Metric.series, Metric.x, Metric.value).join(
                last,
                and_(
                    Metric.job_id == job_id,
                    Metric.figure == last.c.figure,
                    Metric.series == last.c.series,
                    Metric.step == last.c.step,
                ),
            )
        ).all()
    names = [series for _, series, _, _ in rows]
    return {
        (series if names.count(series) == 1 else f"{figure}/{series}"): (x, value)
        for figure, series, x, value in sorted(rows)
    }


def figure_summaries(platform, job, width: int = 30) -> list[dict]:
    """Return each metric series of a job: figure, series, points, last, min, max and a sparkline.

    Read from the envelopes kept on the job (never the raw figures, never every point).
    """
    from .engine import envelope

    latest = latest_metrics(platform, job.id)
    curves = [
        (title, series, curve)
        for title, fields in sorted((job.figures or {}).items())
        for series, curve in sorted((fields.get("envelopes") or {}).items())
    ]
    names = [series for _, series, _ in curves]
    summaries = []
    for title, series, curve in curves:
        key = series if names.count(series) == 1 else f"{title}/{series}"
        buckets = curve.get("buckets") or []
        last = latest.get(key)
        summaries.append(
            {
                "figure": title,
                "series": series,
                "key": key,
                "points": curve.get("count", 0),
                "last": last[1] if last else None,
                "min": min((b[1] for b in buckets), default=None),
                "max": max((b[3] for b in buckets), default=None),
                "curve": sparkline([y for _, y in envelope.points(curve, 2 * width)], width),
            }
        )
    return summaries


def usage_text(usage: dict) -> str:
    """Return a job's latest resource use in one line (empty before the first sample)."""
    latest = usage.get("latest")
    if not latest:
        return ""
    parts = []
    if latest.get("cpu_percent") is not None:
        parts.append(f"cpu {latest['cpu_percent']:.0f}%")
    parts.append(f"memory {latest.get('memory_mb', 0):.0f} MB (peak {usage.get('peak_memory_mb', 0):.0f} MB)")
    for gpu in latest.get("gpus", []):
        parts.append(f"gpu{gpu['index']} {gpu['utilization_percent']}% {gpu['memory_mb']:.0f} MB")
    memory = [sample.get("memory_mb", 0) for sample in usage.get("history", [])]
    if len(memory) > 1:
        parts.append(f"memory over time {sparkline(memory)}")
    return ", ".join(parts)


def job_json(platform, job) -> dict:
    """Return the job as the REST API answers it, with its latest metric values and use."""
    fraction, eta = platform.jobs.progress(job.project.name, job.id)
    return serialize.job_json(job, fraction, eta) | {
        "metrics": {name: value for name, (_, value) in latest_metrics(platform, job.id).items()},
        "metric_summaries": [
            {k: v for k, v in summary.items() if k not in ("curve", "key")}
            for summary in figure_summaries(platform, job)
        ],
        "usage": {k: v for k, v in (job.usage or {}).items() if k != "history"},
    }


def _duration(job) -> float | None:
    if job.started is None:
        return None
    end = job.finished or datetime.now(timezone.utc)
    start, end = (t if t.tzinfo else t.replace(tzinfo=timezone.utc) for t in (job.started, end))
    return (end - start).total_seconds()


def _resources_text(limits: dict) -> str:
    parts = [f"cpu {limits.get('cpu', '-'):g}" if limits.get("cpu") else "cpu -"]
    parts.append(f"memory {limits.get('memory', '-')} MB")
    if limits.get("shm") is not None:
        parts.append(f"shm {limits['shm']} MB")
    parts += [f"{kind} {count}" for kind, count in sorted((limits.get("devices") or {}).items())]
    return ", ".join(parts)


def status_line(job, fraction: float, eta: float | None, metrics: dict[str, tuple[float, float]]) -> str:
    """Return the one-line live status of a followed job."""
    line = f"{job.id} {job.state:<9} {progress_bar(fraction)}"
    if job.state == "running" and eta is not None:
        line += f"  {human_duration(eta)} left"
    values = "  ".join(f"{name}={format_number(value)}" for name, (_, value) in metrics.items())
    return f"{line}  {values}" if values else line


def _parameters(base: dict, texts: Sequence[str]) -> dict:
    """Type `NAME=VALUE` overrides against `base` (YAML values; text where the default is text)."""
    from .algorithms.errors import ParameterError
    from .algorithms.parameters import apply_overrides

    if not texts:
        return {}
    try:
        return apply_overrides(base, list(texts))
    except ParameterError as exc:
        raise parameter_error(exc) from exc


def _inputs(texts: Sequence[str]) -> dict[str, str]:
    inputs = {}
    for text in texts:
        key, sep, ref = text.partition("=")
        if not sep or not key or not ref:
            raise BadRequest(f"--input {text!r}: expected KEY=REF (e.g. data=dataset:digits)", field="inputs")
        inputs[key] = ref
    return inputs


def _resources(args) -> dict:
    return {
        name: getattr(args, name)
        for name in ("cpu", "memory", "shm", "gpu", "npu")
        if getattr(args, name, None) is not None
    }


def cmd_job_submit(args, platform) -> int:
    from pydantic import ValidationError

    from .api.jobs import JobRequest

    version = platform.catalog.get_algorithm(args.project, args.algorithm)
    resources = _resources(args)
    try:
        request = JobRequest(
            project=args.project,
            algorithm=version.ref,
            function=args.function,
            inputs=_inputs(args.input),
            parameters=_parameters(version.parameters or {}, args.param),
            resources=resources or None,
        )
    except ValidationError as exc:
        raise validation_error(exc) from None
    job = platform.jobs.submit(request)
    return _started(args, platform, job, f"submitted job {job.id} ({job.algorithm_ref} {job.function})")


def cmd_job_rerun(args, platform) -> int:
    job = platform.jobs.rerun(args.project, args.job_id)
    return _started(args, platform, job, f"job {job.id} re-runs job {args.job_id}")


def cmd_job_copy(args, platform) -> int:
    source = platform.jobs.get(args.project, args.job_id)
    job = platform.jobs.copy(
        args.project,
        args.job_id,
        parameters=_parameters(source.parameters or {}, args.param) or None,
        resources=_resources(args) or None,
    )
    return _started(args, platform, job, f"job {job.id} copies job {args.job_id}")


def cmd_job_resume(args, platform) -> int:
    source = platform.jobs.get(args.project, args.job_id)
    parameters = _parameters(source.parameters or {}, args.param) or None
    job = platform.jobs.resume(args.project, args.job_id, parameters=parameters)
    return _started(args, platform, job, f"job {job.id} resumes job {args.job_id}")


def _started(args, platform, job, message: str) -> int:
    if args.json and not args.follow:
        emit_json(job_json(platform, job))
        return 0
    print(f"{message}: {job.state}" + (f" ({job.reason})" if job.reason else ""))
    if args.follow:
        return follow_job(platform, args.project, job.id)
    return 0


def follow_job(platform, project: str, job_id: str, out=None) -> int:
    """Show a live status line until the job ends; exit status 0 when it succeeded, else 1."""
    try:
        return _follow(platform, project, job_id, out or sys.stdout)
    except KeyboardInterrupt:
        print(f"\nstopped following; job {job_id} goes on (kpl-lab job show {job_id})", file=sys.stderr)
        return 130


def _follow(platform, project: str, job_id: str, out) -> int:
    live = out.isatty()
    shown, width = None, 0
    while True:
        job = platform.jobs.get(project, job_id)
        fraction, eta = platform.jobs.progress(project, job_id)
        metrics = latest_metrics(platform, job_id)
        line = status_line(job, fraction, eta, metrics)
        if live:
            out.write("\r" + line + " " * max(0, width - display_width(line)))
            width = display_width(line)
        else:  # a log file: a line when state, percentage or metrics change
            key = (job.state, int(fraction * 100), tuple(metrics.items()))
            if key != shown:
                out.write(line + "\n")
                shown = key
        out.flush()
        if job.is_final:
            break
        time.sleep(FOLLOW_INTERVAL)
    if live:
        out.write("\n")
    summary = f"job {job.id} {job.state} after {human_duration(_duration(job))}"
    if job.reason:
        summary += f": {job.reason}"
    out.write(summary + "\n")
    for key, spec in (job.outputs or {}).items():
        if spec.get("registered"):
            out.write(f"output {key}: {spec['registered']}\n")
    if job.state != "succeeded" and job.last_log_lines:
        out.write("last log lines:\n" + job.last_log_lines.rstrip("\n") + "\n")
    out.flush()
    return 0 if job.state == "succeeded" else 1


def cmd_job_list(args, platform) -> int:
    jobs = platform.jobs.list(args.project, state=args.state)
    if args.json:
        emit_json([job_json(platform, job) for job in jobs])
        return 0
    if not jobs:
        print(f"no jobs in project {args.project}" + (f" in state {args.state}" if args.state else ""))
        return 0
    rows = [
        [
            job.id,
            job.state,
            job.algorithm_ref,
            job.function,
            f"{job.progress * 100:.0f}%",
            human_time(job.created),
            human_duration(_duration(job)),
            _short(job.reason),
        ]
        for job in jobs
    ]
    headers = ["ID", "STATE", "ALGORITHM", "FUNCTION", "PROGRESS", "CREATED", "DURATION", "REASON"]
    print(render_table(headers, rows))
    return 0


def cmd_job_show(args, platform) -> int:
    job = platform.jobs.get(args.project, args.job_id)
    if args.json:
        emit_json(job_json(platform, job))
        return 0
    fraction, eta = platform.jobs.progress(args.project, args.job_id)
    progress = progress_bar(fraction)
    if job.state == "running":
        progress += f"  {human_duration(eta)} left" if eta is not None else "  time left unknown"
    inputs = ", ".join(f"{key}={spec.get('kind')}:{spec.get('version')}" for key, spec in job.inputs.items())
    outputs = ", ".join(
        f"{key}={spec.get('registered') or '(not registered)'}" for key, spec in (job.outputs or {}).items()
    )
    devices = ", ".join(
        f"{kind} {indexes}" for kind, indexes in (job.assigned_devices or {}).items() if indexes
    )
    pairs = [
        ("job", job.id),
        ("state", job.state),
        ("algorithm", f"{job.algorithm_ref} ({job.function})"),
        ("inputs", inputs),
        ("parameters", job.parameters),
        ("progress", progress),
        ("resources", _resources_text(job.limits or {})),
        ("devices", devices),
        ("enforcement", job.enforcement),
        ("usage", usage_text(job.usage or {})),
        ("created", human_time(job.created)),
        ("started", human_time(job.started)),
        ("finished", human_time(job.finished)),
        ("duration", human_duration(_duration(job))),
        ("exit code", job.exit_code),
        ("reason", job.reason),
        ("outputs", outputs),
    ]
    if job.copied_from:
        pairs.append(("copied from", job.copied_from))
    if job.resumed_from:
        pairs.append(("resumed from", job.resumed_from))
    print(render_fields(pairs))
    summaries = figure_summaries(platform, job)
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
    if job.is_final and job.state != "succeeded" and job.last_log_lines:
        print("last log lines:")
        print(job.last_log_lines.rstrip("\n"))
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
    for line in platform.jobs.follow_logs(args.project, args.job_id, follow=args.follow):
        print(line, flush=args.follow)
    return 0


def cmd_job_stop(args, platform) -> int:
    job = platform.jobs.stop(args.project, args.job_id)
    # the job's supervisor records the end; wait for it (SIGKILL comes after the grace period)
    deadline = time.monotonic() + platform.jobs.grace_seconds + 10
    while not job.is_final and time.monotonic() < deadline:
        time.sleep(FOLLOW_INTERVAL / 2)
        job = platform.jobs.get(args.project, args.job_id)
    print(f"job {job.id} {job.state}" + (f": {job.reason}" if job.reason else ""))
    return 0


def cmd_job_metrics(args, platform) -> int:
    job = platform.jobs.get(args.project, args.job_id)
    figures = platform.jobs.metrics(args.project, job.id, max_points=args.max_points)
    if args.plot:
        if not figures:
            raise BadRequest(f"job {job.id} has no metrics to plot yet", field="plot")
        plot_metrics(figures, args.plot, title=f"job {job.id} ({job.algorithm_ref} {job.function})")
        print(f"wrote {args.plot}")
        return 0
    if args.json:
        emit_json(serialize.metrics_json(job, figures, args.max_points))
        return 0
    if not figures:
        print(f"job {job.id} has no metrics yet")
        return 0
    print(_metrics_table(figures, figure_summaries(platform, job)))
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


# ----------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `kpl-lab`."""
    parser = argparse.ArgumentParser(prog="kpl-lab", description="KPL Lab from the command line.")
    parser.add_argument("--home", help="platform home folder (default $KPL_LAB_HOME or ~/.kpl-lab)")
    parser.add_argument("--project", help="project to work in (default: the platform's default project)")
    groups = parser.add_subparsers(dest="group", metavar="{algorithm,dataset,model,job}", required=True)

    for kind, add_args in (
        ("algorithm", _algorithm_add_args),
        ("dataset", _named_add_args),
        ("model", _named_add_args),
    ):
        group = groups.add_parser(kind, help=f"manage {kind}s").add_subparsers(dest="command", required=True)
        add = group.add_parser("add", help=f"add a {kind} version")
        add_args(add, kind)
        add.add_argument("--description", default="", help="a description")
        add.add_argument("--json", action="store_true", help="print JSON")
        add.set_defaults(func=cmd_add, kind=kind)
        listing = group.add_parser("list", help=f"list the project's {kind}s")
        listing.add_argument("--json", action="store_true", help="print JSON")
        listing.set_defaults(func=cmd_list, kind=kind)
        show = group.add_parser("show", help=f"show one {kind} version")
        show.add_argument("ref", metavar="REF", help="NAME (latest version) or NAME:VERSION")
        show.add_argument("--json", action="store_true", help="print JSON")
        show.set_defaults(func=cmd_show, kind=kind)
        delete = group.add_parser("delete", help=f"delete a {kind} version, or every version")
        delete.add_argument("ref", metavar="REF", help="NAME:VERSION (one version) or NAME (all versions)")
        delete.set_defaults(func=cmd_delete, kind=kind)

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
    return parser


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
    parser.add_argument("--follow", action="store_true", help="show live progress until the job ends")
    parser.add_argument("--json", action="store_true", help="print the job as JSON")


def _algorithm_add_args(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("path", metavar="PATH", help="algorithm folder or archive (zip, tar, tar.gz)")
    parser.add_argument("--name", help="algorithm name (default: the folder or archive name)")


def _named_add_args(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("name", metavar="NAME", help=f"{kind} name")
    what = "kpl-dataset folder" if kind == "dataset" else "model file or folder"
    parser.add_argument("path", metavar="PATH", help=what)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `kpl-lab`; a person's mistake is one message and exit status 2, a bug a traceback."""
    from .platform import Platform

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["up"]:  # the multi-user hub: its own options, and no platform opened here
        from .hub.up import main as up

        return up(argv[1:])
    args = build_parser().parse_args(argv)
    platform = Platform(home=args.home) if args.home else Platform()
    args.project = args.project or platform.default_project
    try:
        _reconcile(platform)
        return args.func(args, platform)
    except KPLError as exc:
        print(f"kpl-lab: error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kpl-lab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    finally:
        platform.close()


def _reconcile(platform) -> None:
    """Finish jobs that ended while nothing watched them and start queued ones (cheap when idle)."""
    try:
        platform.jobs.reconcile()
    except KPLError as exc:  # a job the platform cannot check must not lock the CLI out
        print(f"kpl-lab: warning: could not check running jobs: {exc.message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
