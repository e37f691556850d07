"""`kpl-lab deployment create|predict|canary|promote|list|show|logs|key|delete`: models served over HTTP."""

from __future__ import annotations

import argparse
import mimetypes
import sys
from pathlib import Path

from ..errors import BadRequest
from ..text import emit_json, render_fields, render_table, short

WAIT_SECONDS = 600.0


def _print_deployment(shown: dict) -> None:
    canary = shown["canary_model_version"]
    print(
        render_fields(
            [
                ("name", shown["name"]),
                ("state", shown["state"]),
                ("reason", shown["reason"]),
                ("model version", shown["model_version"]),
                ("algorithm", shown["algorithm_version"]),
                ("replicas", shown["replicas"]),
                ("canary", f"{canary} ({shown['canary_weight']} %)" if canary else None),
                ("sticky header", shown["sticky_header"]),
                ("gateway URL", shown.get("gateway_url")),  # for callers with an API key or a hub token
            ]
        )
    )
    print()
    rows = [
        (
            r["id"],
            r["model_version"],
            r["role"],
            r["state"],
            r["restarts"],
            r.get("url") or "-",
            short(r["reason"] or ""),
        )
        for r in shown["replica_states"]
    ]
    print(render_table(("REPLICA", "MODEL VERSION", "ROLE", "STATE", "RESTARTS", "ADDRESS", "REASON"), rows))
    failed = [r for r in shown["replica_states"] if r["last_log_lines"]]
    for replica in failed[:1]:
        print(f"\nlast lines of replica {replica['id']}:\n{replica['last_log_lines']}")
    if shown["metrics"]:
        print()
        rows = [
            (version, m["requests"], m["errors"], _ms(m["p50_ms"]), _ms(m["p99_ms"]))
            for version, m in shown["metrics"].items()
        ]
        print(render_table(("MODEL VERSION", "REQUESTS", "ERRORS", "P50", "P99"), rows))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def cmd_create(args: argparse.Namespace, platform) -> int:
    shown = platform.client.deploy(args.name, args.model, args.replicas, args.algorithm)
    if args.wait:
        shown = platform.wait_deployment(args.name, args.timeout)
    if args.json:
        emit_json(shown)
    else:
        print(
            f"deployment {args.name}: {shown['model_version']} on {args.replicas} replica(s), {shown['state']}"
        )
    return 0


def cmd_predict(args: argparse.Namespace, platform) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise BadRequest(f"{path}: no such file", field="FILE")
    content_type = args.content_type or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    emit_json(platform.client.predict(args.name, path.read_bytes(), content_type))
    return 0


def cmd_canary(args: argparse.Namespace, platform) -> int:
    request = {
        "model": args.model,
        "weight": args.weight,
        "algorithm": args.algorithm,
        "sticky_header": args.sticky_header,
        "replicas": args.replicas,
    }
    shown = platform.client.canary(args.name, **request)
    if args.wait:
        shown = platform.wait_deployment(args.name, args.timeout)
    print(f"deployment {args.name}: canary {shown['canary_model_version']} gets {args.weight} % of requests")
    return 0


def cmd_promote(args: argparse.Namespace, platform) -> int:
    shown = platform.client.promote(args.name, args.timeout)
    print(f"deployment {args.name}: {shown['model_version']} is production")
    return 0


def cmd_list(args: argparse.Namespace, platform) -> int:
    shown = platform.client.deployments()
    if args.json:
        emit_json(shown)
        return 0
    rows = [
        (
            d["name"],
            d["state"],
            d["model_version"],
            f"{d['canary_model_version']} ({d['canary_weight']} %)" if d["canary_model_version"] else "-",
            sum(r["state"] == "ready" for r in d["replica_states"]),
            len(d["replica_states"]),
        )
        for d in shown
    ]
    print(render_table(("NAME", "STATE", "MODEL VERSION", "CANARY", "READY", "REPLICAS"), rows))
    return 0


def cmd_show(args: argparse.Namespace, platform) -> int:
    shown = platform.client.deployment(args.name)
    if args.json:
        emit_json(shown)
    else:
        _print_deployment(shown)
    return 0


def cmd_logs(args: argparse.Namespace, platform) -> int:
    for log in platform.client.deployment_logs(args.name, args.lines):
        print(f"==> replica {log['replica']} ({log['model_version']}) <==")
        if log["text"]:
            print(log["text"])
    return 0


def cmd_delete(args: argparse.Namespace, platform) -> int:
    platform.client.delete_deployment(args.name)
    print(f"deployment {args.name} deleted")
    return 0


def cmd_key_create(args: argparse.Namespace, platform) -> int:
    created = platform.client.create_deployment_key(args.name)
    if args.json:
        emit_json(created)
    else:
        print(created["key"])
        print(
            f"key {created['id']} of deployment {args.name}: shown this once; send it as "
            "`Authorization: Bearer <key>` to its predict (the gateway URL of `deployment show`)",
            file=sys.stderr,
        )
    return 0


def cmd_key_list(args: argparse.Namespace, platform) -> int:
    shown = platform.client.deployment_keys(args.name)
    if args.json:
        emit_json(shown)
    else:
        print(
            render_table(
                ("KEY ID", "STARTS WITH", "USER", "CREATED"),
                [(k["id"], k["prefix"] + "…", k["user"], k["created"]) for k in shown],
            )
        )
    return 0


def cmd_key_revoke(args: argparse.Namespace, platform) -> int:
    platform.client.revoke_deployment_key(args.name, args.key_id)
    print(f"key {args.key_id} of deployment {args.name} revoked")
    return 0


def _reconciled(command):
    """Restart replicas whose supervisors are gone (a reboot) before running a deployment command."""

    def run(args: argparse.Namespace, platform) -> int:
        restarted = platform.reconcile_deployments()
        if restarted:
            print(
                f"kpl-lab: restarted replicas whose supervisor was gone: {', '.join(restarted)}",
                file=sys.stderr,
            )
        return command(args, platform)

    return run


def register(groups) -> None:
    """Add the `deployment` commands."""
    group = groups.add_parser("deployment", help="serve models over HTTP").add_subparsers(
        dest="command", required=True
    )
    create = group.add_parser("create", help="deploy a model version as an HTTP API")
    create.add_argument("name", metavar="NAME", help="deployment name")
    create.add_argument(
        "--model", required=True, metavar="MODEL[:VERSION]", help="model to serve (default: latest)"
    )
    create.add_argument("--replicas", type=int, default=1, metavar="N", help="replicas (default 1)")
    create.add_argument(
        "--algorithm",
        metavar="A",
        help="algorithm whose deploy serves it (default: the one that made the model)",
    )
    create.add_argument("--wait", action="store_true", help="wait until every replica is ready")
    create.add_argument("--timeout", type=float, default=WAIT_SECONDS, help="seconds --wait waits")
    create.add_argument("--json", action="store_true", help="print JSON")
    create.set_defaults(func=_reconciled(cmd_create))

    predict = group.add_parser("predict", help="send a file to a deployment; print the JSON response")
    predict.add_argument("name", metavar="NAME")
    predict.add_argument("file", metavar="FILE", help="e.g. an image")
    predict.add_argument("--content-type", help="default: guessed from the file name")
    predict.set_defaults(func=_reconciled(cmd_predict))

    canary = group.add_parser("canary", help="serve a canary version to a percent of the requests")
    canary.add_argument("name", metavar="NAME")
    canary.add_argument("--model", required=True, metavar="MODEL:VERSION")
    canary.add_argument("--weight", required=True, type=int, metavar="PERCENT", help="0-100")
    canary.add_argument("--algorithm", metavar="A", help="default: the one that made the model")
    canary.add_argument(
        "--sticky-header", metavar="HEADER", help="keep each caller (this header) on one version"
    )
    canary.add_argument("--replicas", type=int, default=1, metavar="N", help="canary replicas (default 1)")
    canary.add_argument("--wait", action="store_true", help="wait until every replica is ready")
    canary.add_argument("--timeout", type=float, default=WAIT_SECONDS, help="seconds --wait waits")
    canary.set_defaults(func=_reconciled(cmd_canary))

    promote = group.add_parser("promote", help="make the canary production (no request dropped)")
    promote.add_argument("name", metavar="NAME")
    promote.add_argument("--timeout", type=float, default=WAIT_SECONDS, help="seconds to wait for the canary")
    promote.set_defaults(func=_reconciled(cmd_promote))

    listing = group.add_parser("list", help="list the project's deployments")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=_reconciled(cmd_list))

    show = group.add_parser("show", help="show a deployment: replicas and requests per version")
    show.add_argument("name", metavar="NAME")
    show.add_argument(
        "--json",
        action="store_true",
        help="print JSON (metrics: the live replicas' counts per version; totals: the gateway's, 7 days)",
    )
    show.set_defaults(func=_reconciled(cmd_show))

    logs = group.add_parser("logs", help="print the last lines of each replica's output")
    logs.add_argument("name", metavar="NAME")
    logs.add_argument("--lines", type=int, default=100, metavar="N")
    logs.set_defaults(func=_reconciled(cmd_logs))

    key = group.add_parser("key", help="API keys for callers outside JupyterLab").add_subparsers(
        dest="key_command", required=True
    )
    key_create = key.add_parser("create", help="make an API key for one deployment's predict; print it once")
    key_create.add_argument("name", metavar="NAME")
    key_create.add_argument("--json", action="store_true", help="print JSON (id, prefix, key)")
    key_create.set_defaults(func=cmd_key_create)
    key_list = key.add_parser("list", help="list a deployment's keys (ids and first characters)")
    key_list.add_argument("name", metavar="NAME")
    key_list.add_argument("--json", action="store_true", help="print JSON")
    key_list.set_defaults(func=cmd_key_list)
    key_revoke = key.add_parser("revoke", help="revoke a key: its callers get 403")
    key_revoke.add_argument("name", metavar="NAME")
    key_revoke.add_argument("key_id", metavar="KEY_ID", help="as `key list` shows it")
    key_revoke.set_defaults(func=cmd_key_revoke)

    delete = group.add_parser("delete", help="stop a deployment and free its resources")
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(func=_reconciled(cmd_delete))
