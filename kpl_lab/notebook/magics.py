"""IPython magics: `%load_ext kpl_lab`, then `%kpl_datasets`, `%kpl_train ALGO --input ...` and friends.

`%kpl_compare A B` shows jobs side by side; `%kpl_tune` runs a hyperparameter search.
Every magic talks to the REST API through `kpl_lab.client.Client`. Tables render as HTML
in notebooks and as text in terminals; a submitted job shows a live progress bar and
metric curves in a notebook (widgets) and status lines in a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, kwds, magic_arguments
from IPython.display import display

from ..api.jobs import FINAL_STATES, JOB_STATES
from ..arguments import parse_inputs, parse_space
from ..errors import BadRequest, KPLError
from ..fit import fit_now
from ..text import (
    comparison_rows,
    format_number,
    human_duration,
    human_size,
    progress_bar,
    render_table,
    sparkline,
)
from .client import Client

WAIT_INTERVAL = 1.0


class Table:
    """Rows shown as an HTML table in notebooks and as aligned text in terminals."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[Any]], empty: str = "none") -> None:
        self.headers = list(headers)
        self.rows = [["" if cell is None else str(cell) for cell in row] for row in rows]
        self.empty = empty

    def __repr__(self) -> str:
        return render_table(self.headers, self.rows) if self.rows else self.empty

    def _repr_html_(self) -> str:
        if not self.rows:
            return f"<i>{escape(self.empty)}</i>"
        head = "".join(f"<th style='text-align:left'>{escape(h)}</th>" for h in self.headers)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class MetricsView:
    """A job's metric series: a summary table with sparklines (the curves are the MetricPlot widget's)."""

    def __init__(self, job_id: str, figures: dict[str, dict[str, list]], labels: dict[str, dict]) -> None:
        self.job_id, self.figures, self.labels = job_id, figures, labels

    def _table(self) -> Table:
        rows = []
        for figure, series in self.figures.items():
            for name, points in series.items():
                values = [y for _, y in points]
                last_x, last_y = points[-1] if points else (None, None)
                rows.append(
                    [
                        name,
                        figure,
                        len(points),
                        "-" if last_x is None else format_number(last_x),
                        "-" if last_y is None else format_number(last_y),
                        format_number(min(values)) if values else "-",
                        format_number(max(values)) if values else "-",
                        sparkline(values),
                    ]
                )
        return Table(
            ["series", "figure", "points", "last x", "last", "min", "max", "curve"],
            rows,
            f"job {self.job_id}: no metrics",
        )

    def __repr__(self) -> str:
        return repr(self._table())

    def _repr_html_(self) -> str:
        return self._table()._repr_html_()


def _with_help(func):
    """Give a magic `-h` and `usage:` help (IPython's default formats help for docstrings only)."""
    return kwds(add_help=True, formatter_class=argparse.HelpFormatter)(func)


JOB_ARGUMENTS = (
    argument("algorithm", help="NAME or NAME:VERSION"),
    argument(
        "--input",
        action="append",
        default=[],
        metavar="KEY=REF",
        help="input key and dataset/model reference",
    ),
    argument("--param", action="append", default=[], metavar="NAME=VALUE", help="parameter override"),
    argument("--gpu", type=int, help="GPUs"),
    argument("--npu", type=int, help="NPUs"),
    argument("--cpu", type=float, help="CPUs"),
    argument("--memory", type=int, help="memory (MB)"),
    argument("--shm", type=int, help="shared memory (MB)"),
    argument("--workers", type=int, help="distributed training workers, each with the above"),
    argument("--priority", type=int, default=0),
    argument("--wait", action="store_true", help="block until the job ends (Ctrl-C stops waiting)"),
)


def _job_arguments(func):
    """Give a magic the arguments of a job submission (`%kpl_train`, `%kpl_infer`)."""
    for decorator in reversed(JOB_ARGUMENTS):  # IPython builds the parser in source order
        func = decorator(func)
    return func


def typed_parameters(defaults: dict, texts: Sequence[str]) -> dict[str, Any]:
    """Type `NAME=VALUE` overrides like parameter.yml's defaults; return dotted name -> value."""
    from ..algorithms.errors import ParameterError
    from ..algorithms.parameters import apply_overrides, parse_override

    try:
        merged = apply_overrides(defaults, list(texts))
    except ParameterError as error:
        raise UsageError(f"--param: {error}") from None
    typed = {}
    for text in texts:
        name, _ = parse_override(text)
        node: Any = merged
        for part in [name] if name in defaults else name.split("."):
            node = node[part]
        typed[name] = node
    return typed


def usage_inputs(texts: Sequence[str]) -> dict[str, str]:
    """Return the `--input KEY=REF` inputs; a malformed one is a usage error, as a bad option is."""
    try:
        return parse_inputs(texts)
    except BadRequest as error:
        raise UsageError(error.message) from None


def newest(versions: list[dict]) -> dict | None:
    """Return the most recently created version of a list."""
    return max(versions, key=lambda row: row.get("created") or "") if versions else None


@magics_class
class KPLMagics(Magics):
    """The %kpl_* magics."""

    def __init__(self, shell=None, client: Client | None = None, use_widgets: bool | None = None) -> None:
        super().__init__(shell)
        self._client = client
        self.last_charts: list = []
        # widgets need a frontend: a kernel talking to JupyterLab, not a terminal
        self.use_widgets = getattr(shell, "kernel", None) is not None if use_widgets is None else use_widgets

    @property
    def client(self) -> Client:
        """Return the API client, found on first use so that %load_ext never fails."""
        if self._client is None:
            self._client = Client()
        return self._client

    def _run(self, magic: Callable, line: str, action: Callable[[argparse.Namespace], None]) -> None:
        """Parse a magic's line with its `@argument`s, run `action`, and show server errors as one line."""
        parser = magic.parser
        try:
            # shell quoting: IPython's parse_argstring keeps the quotes in `-q "two words"`
            args = parser.parse_args(shlex.split(line))
        except SystemExit:  # -h printed the help
            return
        except (UsageError, ValueError) as error:  # bad arguments, unbalanced quotes
            raise UsageError(f"{parser.prog}: {error}\n{parser.format_usage().rstrip()}") from None
        try:
            action(args)
        except KPLError as error:
            where = f" (field {error.field})" if error.field else ""
            print(f"{parser.prog}: {error.message}{where}", file=sys.stderr)

    # catalog

    @magic_arguments("%kpl_datasets")
    @_with_help
    @argument("-q", "--query", help="search names and descriptions")
    @line_magic
    def kpl_datasets(self, line: str) -> None:
        """List the project's datasets."""
        self._run(self.kpl_datasets, line, self._datasets)

    def _datasets(self, args: argparse.Namespace) -> None:
        rows = []
        for dataset in self.client.datasets(q=args.query):
            latest = newest(dataset.get("versions") or []) or {}
            rows.append(
                [
                    dataset["name"],
                    latest.get("version", "-"),
                    len(dataset.get("versions") or []),
                    latest.get("record_count", "-"),
                    human_size(latest.get("size_bytes")),
                    dataset.get("description", ""),
                ]
            )
        display(Table(["name", "newest", "versions", "records", "size", "description"], rows, "no datasets"))

    @magic_arguments("%kpl_algorithms")
    @_with_help
    @argument("-q", "--query", help="search names and descriptions")
    @line_magic
    def kpl_algorithms(self, line: str) -> None:
        """List the project's algorithms."""
        self._run(self.kpl_algorithms, line, self._algorithms)

    def _algorithms(self, args: argparse.Namespace) -> None:
        rows = []
        for algorithm in self.client.algorithms(q=args.query):
            latest = newest(algorithm.get("versions") or []) or {}
            rows.append(
                [
                    algorithm["name"],
                    latest.get("version", "-"),
                    len(algorithm.get("versions") or []),
                    ", ".join(latest.get("functions") or []),
                    algorithm.get("description", ""),
                ]
            )
        display(Table(["name", "newest", "versions", "functions", "description"], rows, "no algorithms"))

    # jobs

    @magic_arguments("%kpl_train")
    @_with_help
    @_job_arguments
    @line_magic
    def kpl_train(self, line: str) -> None:
        """Submit a train job of an algorithm."""
        self._run(self.kpl_train, line, lambda args: self._submit(args, "train"))

    @magic_arguments("%kpl_infer")
    @_with_help
    @_job_arguments
    @line_magic
    def kpl_infer(self, line: str) -> None:
        """Submit an infer job of an algorithm."""
        self._run(self.kpl_infer, line, lambda args: self._submit(args, "infer"))

    def _submit(self, args: argparse.Namespace, function: str) -> None:
        inputs = usage_inputs(args.input)
        name, _, version = args.algorithm.partition(":")
        detail = self.client.algorithm_version(name, version or None)
        parameters = typed_parameters(detail.get("parameters") or {}, args.param)
        resources = {
            kind: getattr(args, kind)
            for kind in ("cpu", "memory", "shm", "gpu", "npu", "workers")
            if getattr(args, kind) is not None
        }
        resources |= self._fitted(detail, function, resources)
        job = self.client.submit(detail["ref"], function, inputs, parameters, resources, args.priority)
        if self.use_widgets:
            from .widgets import JobMonitor

            monitor = JobMonitor(job, self.client)
            display(monitor)
            if args.wait:
                self._wait(job["id"], monitor.refresh)
            else:
                monitor.start()
            return
        print(f"submitted job {job['id']} ({job['algorithm']} {function}): {job['state']}")
        if args.wait:
            self._wait(job["id"], self._status_printer(job["id"]))
            self._summary(job["id"])
        else:
            print(f"follow it with %kpl_logs {job['id']} -f, %kpl_metrics {job['id']}")

    def _fitted(self, detail: dict, function: str, given: dict) -> dict:
        """Return the function's environment.yml defaults the user did not give, lowered to what is free now; say so."""
        resource = ((detail.get("function_specs") or {}).get(function) or {}).get("resource") or {}
        limits = {**(resource.get("limits") or {}), "workers": given.get("workers", resource.get("workers"))}
        capped, notes = fit_now(limits, self.client.devices(), given=given)
        for note in notes:
            print(f"note: {note}")
        return capped

    def _wait(self, job_id: str, tick: Callable[[], bool]) -> None:
        """Call `tick` until it says the job ended; Ctrl-C stops waiting, never the job."""
        try:
            while not tick():
                time.sleep(WAIT_INTERVAL)
        except KeyboardInterrupt:
            print(f"stopped waiting; job {job_id} goes on (%kpl_stop {job_id} stops it)", file=sys.stderr)

    def _status_printer(self, job_id: str) -> Callable[[], bool]:
        """Return a tick showing the job's status: one line redrawn in a terminal, else a line per change."""
        live = sys.stdout.isatty()
        last: dict[str, Any] = {"key": None, "width": 0}

        def tick() -> bool:
            data = self.client.progress(job_id)
            state, fraction, eta = data["state"], float(data.get("progress") or 0.0), data.get("eta_seconds")
            line = f"{job_id} {state:<9} {progress_bar(fraction)}"
            if state == "running" and eta is not None:
                line += f"  {human_duration(eta)} left"
            waits = (data.get("queue") or {}).get("message", "")
            if waits and waits != last.get("waits"):  # why it waits, on a line of its own when it changes
                print(("\r" + " " * last["width"] + "\r" if live else "") + f"{job_id} {waits}", flush=True)
                last["key"], last["width"] = None, 0
            last["waits"] = waits
            final = state in FINAL_STATES
            if live:
                print("\r" + line.ljust(last["width"]), end="\n" if final else "", flush=True)
                last["width"] = len(line)
            elif last["key"] != (state, int(fraction * 100)):
                print(line, flush=True)
                last["key"] = (state, int(fraction * 100))
            return final

        return tick

    def _summary(self, job_id: str) -> None:
        """Print how a waited-for job ended, its registered outputs and its metrics."""
        job = self.client.job(job_id)
        if job["state"] not in FINAL_STATES:
            return
        print(f"job {job_id} {job['state']}" + (f": {job['reason']}" if job.get("reason") else ""))
        for key, spec in (job.get("outputs") or {}).items():
            if spec.get("registered"):
                print(f"output {key}: {spec['registered']}")
        if job["state"] != "succeeded" and job.get("last_log_lines"):
            print("last log lines:\n" + job["last_log_lines"].rstrip("\n"))
        data = self.client.metrics(job_id)
        if data["figures"]:
            display(MetricsView(job_id, data["figures"], data.get("labels") or {}))

    @magic_arguments("%kpl_jobs")
    @_with_help
    @argument("--state", choices=JOB_STATES)
    @argument("-n", "--limit", type=int, default=20, help="at most this many (0: all)")
    @line_magic
    def kpl_jobs(self, line: str) -> None:
        """List the project's jobs, newest first."""
        self._run(self.kpl_jobs, line, self._jobs)

    def _jobs(self, args: argparse.Namespace) -> None:
        jobs = self.client.jobs(state=args.state)
        if args.limit > 0:
            jobs = jobs[: args.limit]
        rows = [
            [
                job["id"],
                job["algorithm"],
                job["function"],
                job["state"],
                f"{float(job.get('progress') or 0) * 100:.0f}%",
                (job.get("created") or "")[:19].replace("T", " "),
                job.get("reason") or (job.get("queue") or {}).get("message", ""),
            ]
            for job in jobs
        ]
        display(
            Table(
                ["id", "algorithm", "function", "state", "progress", "created (UTC)", "reason"],
                rows,
                "no jobs",
            )
        )

    @magic_arguments("%kpl_logs")
    @_with_help
    @argument("job")
    @argument("-f", "--follow", action="store_true", help="keep showing new output until it ends")
    @line_magic
    def kpl_logs(self, line: str) -> None:
        """Show a job's output (-f follows it live; Ctrl-C stops following)."""
        self._run(self.kpl_logs, line, self._logs)

    def _logs(self, args: argparse.Namespace) -> None:
        if args.follow:
            try:
                for text in self.client.follow_logs(args.job):
                    print(text, end="", flush=True)
            except KeyboardInterrupt:
                print(f"\nstopped following job {args.job}", file=sys.stderr)
            return
        offset = 0
        while True:
            chunk = self.client.logs(args.job, offset)
            print(chunk["text"], end="", flush=True)
            if chunk["next_offset"] <= offset or chunk["next_offset"] >= chunk["size"]:
                return
            offset = chunk["next_offset"]

    @magic_arguments("%kpl_metrics")
    @_with_help
    @argument("job")
    @argument("--max-points", type=int, default=500, help="points per series")
    @line_magic
    def kpl_metrics(self, line: str) -> None:
        """Show a job's metric curves."""
        self._run(self.kpl_metrics, line, self._metrics)

    def _metrics(self, args: argparse.Namespace) -> None:
        data = self.client.metrics(args.job, max_points=args.max_points)
        if self.use_widgets and data["figures"]:
            from .widgets import MetricPlot

            display(MetricPlot(args.job, self.client).show(data["figures"], data.get("labels") or {}))
        display(MetricsView(args.job, data["figures"], data.get("labels") or {}))

    @magic_arguments("%kpl_predict")
    @_with_help
    @argument("deployment", help="deployment name")
    @argument("file", help="file to send, e.g. an image")
    @line_magic
    def kpl_predict(self, line: str) -> dict | None:
        """Send a file to a deployment; return its answer, with the model version that made it."""
        found = {}
        self._run(
            self.kpl_predict, line, lambda args: found.update(self.client.predict(args.deployment, args.file))
        )
        return found or None

    @magic_arguments("%kpl_stop")
    @_with_help
    @argument("job")
    @line_magic
    def kpl_stop(self, line: str) -> None:
        """Stop a job."""
        self._run(self.kpl_stop, line, self._stop)

    def _stop(self, args: argparse.Namespace) -> None:
        job = self.client.stop(args.job)
        print(f"job {job['id']}: {job['state']}" + (f" ({job['reason']})" if job.get("reason") else ""))

    # pipelines

    @magic_arguments("%kpl_pipeline")
    @_with_help
    @argument("action", choices=("validate", "run", "runs"), help="validate or run FILE, or list the runs")
    @argument("file", nargs="?", help="a *.kpl-pipeline.yaml file")
    @argument("--wait", action="store_true", help="run: block until the run ends, printing each node's state")
    @argument("--from", dest="from_node", metavar="NODE", help="run: NODE and what follows it again")
    @argument("--fresh", action="store_true", help="run: every node again (no cache)")
    @line_magic
    def kpl_pipeline(self, line: str) -> None:
        """Validate or run a pipeline file on the server, or list pipeline runs."""
        self._run(self.kpl_pipeline, line, self._pipeline)

    def _pipeline(self, args: argparse.Namespace) -> None:
        if args.action == "runs":
            runs = self.client.pipeline_runs()
            rows = [
                [
                    r["id"],
                    r["name"],
                    r["state"],
                    sum(n["cached"] for n in r["nodes"]),
                    len(r["nodes"]),
                    (r.get("created") or "")[:19].replace("T", " "),
                ]
                for r in runs
            ]
            display(
                Table(
                    ["run", "pipeline", "state", "cached", "nodes", "started (UTC)"], rows, "no pipeline runs"
                )
            )
            return
        if not args.file:
            raise KPLError(f"%kpl_pipeline {args.action} needs a FILE")
        try:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
        except OSError as error:
            raise KPLError(f"{args.file}: {error.strerror or error}") from None
        if args.action == "validate":
            self._validation(args.file, self.client.validate_pipeline(text))
            return
        run = self.client.run_pipeline(text, args.file, from_node=args.from_node, fresh=args.fresh)
        print(f"pipeline run {run['id']} ({run['name']}): {run['state']}")
        if args.wait:
            shown: dict[str, str] = {}
            while True:
                run = self.client.pipeline_run(run["id"])
                for node in run["nodes"]:
                    if shown.get(node["node"]) != node["state"] and node["state"] != "pending":
                        shown[node["node"]] = node["state"]
                        rows = (
                            f" - {node['rows_out']} rows"
                            if node["rows_out"] is not None and node["state"] in ("succeeded", "cached")
                            else ""
                        )
                        print(f"{node['node']}: {node['state']}{rows}", flush=True)
                if run["state"] != "running":
                    break
                time.sleep(0.3)
            print(
                f"pipeline run {run['id']} {run['state']}" + (f": {run['reason']}" if run["reason"] else "")
            )

    def _validation(self, file: str, result: dict) -> None:
        rows = [
            [node["id"], node["type"], port, ", ".join(f["name"] for f in out["fields"] or []) or out["kind"]]
            for node in result["nodes"]
            for port, out in node["outputs"].items()
        ]
        display(Table(["node", "type", "output", "fields"], rows, "no nodes"))
        for problem in result["problems"]:
            where = ".".join(p for p in (problem["node"], problem["parameter"]) if p)
            line = f":{problem['line']}" if problem["line"] else ""
            print(f"{file}{line}: {where + ': ' if where else ''}{problem['message']}", file=sys.stderr)
        print(f"{file}: valid" if result["ok"] else f"{file}: {len(result['problems'])} problem(s)")

    # experiments

    @magic_arguments("%kpl_compare")
    @_with_help
    @argument("jobs", nargs="+", metavar="JOB", help="two or more job ids")
    @argument("--metric", action="append", default=[], metavar="FIGURE/SERIES", help="curves to overlay")
    @line_magic
    def kpl_compare(self, line: str) -> None:
        """Compare jobs: a table with the differences highlighted, and each shared metric's curves overlaid."""
        self._run(self.kpl_compare, line, self._compare)

    def _compare(self, args: argparse.Namespace) -> None:
        from ..api.experiments import Comparison

        comparison = Comparison.model_validate(self.client.compare(args.jobs))
        display(ComparisonView(comparison))
        if not self.use_widgets:
            return
        from .widgets.chart import MetricChart

        metrics = args.metric or comparison.common_metrics
        figures = {job.id: self.client.metrics(job.id)["figures"] for job in comparison.jobs}
        self.last_charts = []  # the overlays just shown, one line per job each
        for metric in metrics:
            figure, _, series = metric.partition("/")
            chart = MetricChart(title=metric)
            chart.update({job_id: data.get(figure, {}).get(series, []) for job_id, data in figures.items()})
            self.last_charts.append(chart)
            display(chart)

    @magic_arguments("%kpl_tune")
    @_with_help
    @argument("name", help="experiment name")
    @argument("algorithm", help="NAME or NAME:VERSION")
    @argument("--function", default="train")
    @argument("--input", action="append", default=[], metavar="KEY=REF", help="an input of every trial")
    @argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a fixed parameter")
    @argument(
        "--space",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="float:LOW:HIGH[:log], int:LOW:HIGH[:log|:STEP] or categorical:A,B,...",
    )
    @argument("--objective", required=True, metavar="FIGURE/SERIES", help="the metric to optimise")
    @argument("--direction", choices=["maximize", "minimize"], default="maximize")
    @argument("--trials", type=int, default=10)
    @argument("--seconds", type=float)
    @argument("--parallelism", type=int, default=1)
    @argument("--sampler", choices=["random", "grid", "tpe", "cmaes"], default="tpe")
    @argument("--seed", type=int)
    @argument("--pruner", choices=["median", "successive_halving", "hyperband"])
    @argument("--wait", action="store_true", help="show the trials live until it ends, then its plots")
    @line_magic
    def kpl_tune(self, line: str) -> None:
        """Search parameters of an algorithm: each trial is a job; the best trial's model is registered."""
        self._run(self.kpl_tune, line, self._tune)

    def _tune(self, args: argparse.Namespace) -> None:
        name, _, version = args.algorithm.partition(":")
        detail = self.client.algorithm_version(name, version or None)
        body = {
            "name": args.name,
            "algorithm": detail["ref"],
            "function": args.function,
            "inputs": usage_inputs(args.input),
            "parameters": typed_parameters(detail.get("parameters") or {}, args.param),
            "space": dict(parse_space(text) for text in args.space),
            "objective": {"metric": args.objective, "direction": args.direction},
            "budget": {"trials": args.trials, "seconds": args.seconds},
            "parallelism": args.parallelism,
            "sampler": {"name": args.sampler, "seed": args.seed},
            "pruner": {"name": args.pruner} if args.pruner else None,
            # each trial is a job: capped at what is free now as %kpl_train is (your notebook holds a core)
            "resources": self._fitted(detail, args.function, {}) or None,
        }
        experiment = self.client.create_experiment(body)
        for warning in experiment["warnings"]:
            print(f"warning: {warning}", file=sys.stderr)
        print(f"experiment {args.name}: {len(experiment['trials'])} trials started")
        if not args.wait:
            print(f"watch it with %kpl_tune ... --wait, or kpl-lab experiment show {args.name}")
            return
        handle = display(trials_table(experiment), display_id=True)
        try:
            while experiment["state"] == "running":
                time.sleep(WAIT_INTERVAL)
                experiment = self.client.experiment(args.name)
                handle.update(trials_table(experiment))
        except KeyboardInterrupt:
            print(f"stopped waiting; experiment {args.name} goes on", file=sys.stderr)
            return
        best = experiment["best_trial"]
        print(
            f"experiment {args.name} {experiment['state']}"
            + (
                f": best trial {best} {experiment['best_value']:.4g} {experiment['best_params']}"
                if best is not None
                else ""
            )
            + (f", model {experiment['best_model']}" if experiment["best_model"] else "")
        )
        if self.use_widgets and best is not None:
            import plotly.io

            for kind in ("history", "parallel", "importance"):
                with contextlib.suppress(KPLError):  # importance needs two complete trials
                    display(plotly.io.from_json(json.dumps(self.client.experiment_plot(args.name, kind))))


def trials_table(experiment: dict) -> Table:
    """Return an experiment's trials as a table."""
    rows = [
        [
            trial["number"],
            trial["state"],
            trial["job_id"],
            "-" if trial["value"] is None else format_number(trial["value"]),
            trial["reported"],
            " ".join(
                f"{k}={format_number(v) if isinstance(v, float) else v}" for k, v in trial["params"].items()
            ),
        ]
        for trial in experiment["trials"]
    ]
    return Table(["trial", "state", "job", "value", "points", "parameters"], rows, "no trials yet")


class ComparisonView:
    """Jobs side by side: rows whose values differ are highlighted (HTML) or starred (text)."""

    def __init__(self, comparison) -> None:
        self.headers, self.rows = comparison_rows(comparison)

    def __repr__(self) -> str:
        rows = [[("* " if differ else "  ") + label, *cells] for label, cells, differ in self.rows]
        return render_table(["", *self.headers], rows)

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{escape(h)}</th>" for h in ["", *self.headers])
        body = "".join(
            ("<tr class='kpl-differs' style='background:#fff3cd'>" if differ else "<tr>")
            + "".join(f"<td style='text-align:left'>{escape(c)}</td>" for c in [label, *cells])
            + "</tr>"
            for label, cells, differ in self.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
