"""`kpl-lab pipeline validate|run|runs|show|stop|new`: pipeline files from a terminal."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from pathlib import Path

from ..errors import BadRequest
from ..text import emit_json, human_time, render_fields, render_table, short


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise BadRequest(f"{path}: {err.strerror or err}", field="file") from None


def cmd_validate(args, platform) -> int:
    result = platform.client.validate_pipeline(_read(args.file))
    if args.json:
        emit_json(result)
        return 0 if result["ok"] else 1
    for node in result["nodes"]:
        for port, out in node["outputs"].items():
            fields = ", ".join(
                f"{f['name']}: {f['type']}{'?' if f['nullable'] else ''}" for f in out["fields"] or []
            )
            print(f"{node['id']}.{port} ({node['type']}): {fields or out['kind']}")
    for problem in result["problems"]:
        where = ".".join(p for p in (problem["node"], problem["parameter"]) if p)
        line = f"{args.file}:{problem['line']}: " if problem["line"] else f"{args.file}: "
        print(f"{line}{where + ': ' if where else ''}{problem['message']}", file=sys.stderr)
    if result["ok"]:
        print(f"{args.file}: valid ({len(result['nodes'])} nodes)")
        return 0
    print(f"{args.file}: {len(result['problems'])} problem(s)", file=sys.stderr)
    return 1


def _progress(node: str, state: str, message: str) -> None:
    print(f"{node}: {state}{' - ' + message if message else ''}", flush=True)


def _backend(args) -> str | None:
    """Return the backend --backend names (None: the configured one); refuse an unknown name."""
    from ..pipelines.runner import BACKENDS

    if args.backend is not None and args.backend not in BACKENDS:
        raise BadRequest(
            f"--backend: {args.backend!r} is not a pipeline backend (one of {', '.join(BACKENDS)})",
            field="backend",
        )
    return args.backend


def cmd_run(args, platform) -> int:
    backend = _backend(args)
    run = platform.start_pipeline(
        _read(args.file),
        os.path.abspath(args.file),
        args.from_node,
        args.fresh,
        here=args.wait,
        backend=backend,
    )
    print(f"pipeline run {run['id']}", flush=True)
    if not args.wait:
        print(f"running in the background: kpl-lab pipeline show {run['id']}")
        return 0
    run = platform.follow_pipeline(run["id"], _progress, backend=backend)
    print(f"pipeline run {run['id']} {run['state']}{': ' + run['reason'] if run['reason'] else ''}")
    return 0 if run["state"] == "succeeded" else 1


def cmd_execute(args, platform) -> int:
    run = platform.follow_pipeline(args.run_id, _progress, backend=_backend(args))
    return 0 if run["state"] == "succeeded" else 1


def cmd_runs(args, platform) -> int:
    runs = platform.client.pipeline_runs(args.limit)
    if args.json:
        emit_json({"runs": runs})
        return 0
    rows = [
        (
            r["id"],
            r["name"],
            r["state"],
            sum(n["state"] == "cached" for n in r["nodes"]),
            len(r["nodes"]),
            human_time(r["created"]),
        )
        for r in runs
    ]
    print(render_table(("RUN", "PIPELINE", "STATE", "CACHED", "NODES", "STARTED"), rows))
    return 0


def _seconds(node: dict) -> float | None:
    if not (node["started"] and node["finished"]):
        return None
    started, finished = (
        datetime.fromisoformat(node[k].replace("Z", "+00:00")) for k in ("started", "finished")
    )
    return (finished - started).total_seconds()


def cmd_show(args, platform) -> int:
    run = platform.client.pipeline_run(args.run_id)
    if args.json:
        emit_json(run)
        return 0
    print(
        render_fields(
            [
                ("run", run["id"]),
                ("pipeline", run["name"]),
                ("file", run["path"] or "-"),
                ("state", run["state"]),
                ("reason", run["reason"] or "-"),
                ("started", human_time(run["created"])),
                ("finished", human_time(run["finished"])),
            ]
        )
    )
    rows = []
    for n in run["nodes"]:
        output = ", ".join(o.get("ref") or o.get("path") or "" for o in n["outputs"].values())
        seconds = _seconds(n)
        last = (n["log"] or "").strip().splitlines()
        rows.append(
            (
                n["node"],
                n["type"],
                n["state"],
                n["rows_in"],
                n["rows_out"],
                f"{seconds:.1f}s" if seconds is not None else "-",
                short(output, 50),
                short(last[-1] if last else "", 50),
            )
        )
    print()
    print(render_table(("NODE", "TYPE", "STATE", "IN", "OUT", "TIME", "OUTPUT", "LOG"), rows))
    return 0


def cmd_stop(args, platform) -> int:
    run = platform.client.stop_pipeline_run(args.run_id)
    print(f"pipeline run {run['id']}: stop requested")
    return 0


def cmd_new(args, platform) -> int:
    from ..pipelines.templates import NAMES, template_text

    if args.template not in NAMES:
        raise BadRequest(f"template: {args.template!r} is not one of {', '.join(NAMES)}", field="template")
    target = Path(args.file)
    if target.exists() and not args.force:
        raise BadRequest(f"{target}: already exists (--force replaces it)", field="file")
    target.write_text(template_text(args.template), encoding="utf-8")
    print(f"{target}: new pipeline from template {args.template}")
    return 0


def register(groups) -> None:
    """Add the `pipeline` commands."""
    pipelines = groups.add_parser("pipeline", help="validate and run pipeline files").add_subparsers(
        dest="command", required=True
    )
    validate = pipelines.add_parser(
        "validate", help="check a pipeline file: schemas per node and every problem"
    )
    validate.add_argument("file", metavar="FILE")
    validate.add_argument("--json", action="store_true", help="print JSON")
    validate.set_defaults(func=cmd_validate)
    run = pipelines.add_parser(
        "run", help="run a pipeline file (exit status 0 only when it succeeds with --wait)"
    )
    run.add_argument("file", metavar="FILE")
    run.add_argument("--wait", action="store_true", help="print each node's progress and wait for the end")
    run.add_argument("--from", dest="from_node", metavar="NODE", help="run NODE and what follows it again")
    run.add_argument("--fresh", action="store_true", help="run every node again (no cache)")
    run.add_argument(
        "--backend",
        metavar="NAME",
        help="where processors run: local or ray (Ray Data; RAY_ADDRESS names a cluster); "
        "default: c.PipelineRunner.backend",
    )
    run.set_defaults(func=cmd_run)
    execute = pipelines.add_parser("execute", help=argparse.SUPPRESS)
    execute.add_argument("--backend", metavar="NAME")
    execute.add_argument("run_id")
    execute.set_defaults(func=cmd_execute)
    runs = pipelines.add_parser("runs", help="list pipeline runs, newest first")
    runs.add_argument("--limit", type=int, default=50)
    runs.add_argument("--json", action="store_true", help="print JSON")
    runs.set_defaults(func=cmd_runs)
    show = pipelines.add_parser("show", help="a run: per node state, times, rows, output and log")
    show.add_argument("run_id", metavar="RUN")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=cmd_show)
    stop = pipelines.add_parser("stop", help="stop a running pipeline")
    stop.add_argument("run_id", metavar="RUN")
    stop.set_defaults(func=cmd_stop)
    new = pipelines.add_parser("new", help="write a new pipeline file from a template")
    new.add_argument("--template", required=True, help="segmentation, classification or detection")
    new.add_argument("file", metavar="FILE")
    new.add_argument("--force", action="store_true", help="replace an existing file")
    new.set_defaults(func=cmd_new)
