"""`kpl-lab algorithm|dataset|model add|list|show|delete`: the commands every catalog noun shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..text import emit_json, human_size, human_time, render_fields, render_table, short

# ----------------------------------------------------------------- commands


def cmd_add(args, platform) -> int:
    version = platform.catalog_add(args.kind, args.path, args.name, args.description)
    if args.json:
        emit_json(version)
    else:
        print(
            f"added {args.kind} {version['ref']} ({human_size(version['size_bytes'])}) in project {platform.project}"
        )
    return 0


def cmd_list(args, platform) -> int:
    listing = platform.catalog_list(args.kind)
    if args.json:
        emit_json(listing)
        return 0
    if not listing:
        print(f"no {args.kind}s in project {platform.project}")
        return 0
    headers = ["NAME", "VERSIONS", "LATEST"]
    headers += {"dataset": ["RECORDS"], "model": ["FILES"], "algorithm": ["FUNCTIONS"]}[args.kind]
    headers += ["SIZE", "CREATED", "DESCRIPTION"]
    rows = []
    for named in listing:
        latest = named["versions"][-1] if named["versions"] else None
        if latest is None:
            extra = "-"
        elif args.kind == "dataset":
            extra = latest["record_count"]
        elif args.kind == "model":
            extra = len(latest["files"])
        else:
            extra = ",".join(latest["functions"])
        rows.append(
            [
                named["name"],
                len(named["versions"]),
                latest["version"] if latest else "-",
                extra,
                human_size(latest["size_bytes"] if latest else None),
                human_time(latest["created"] if latest else named["created"]),
                short(named["description"]),
            ]
        )
    print(render_table(headers, rows))
    return 0


def cmd_show(args, platform) -> int:
    data, versions = platform.catalog_show(args.kind, args.ref)
    if args.json:
        emit_json(data | {"all_versions": versions})
        return 0
    pairs = [(args.kind, data["ref"])]
    if "path" in data:  # the service's folders are not this machine's
        pairs.append(("path", data["path"]))
    pairs += [("description", data["description"]), ("size", human_size(data["size_bytes"]))]
    if args.kind == "dataset":
        parts = ", ".join(f"{part} ({count})" for part, count in data["parts"].items())
        pairs += [("records", data["record_count"]), ("parts", parts)]
    elif args.kind == "model":
        files = data["files"]
        pairs.append(("files", ", ".join(files[:20]) + (" ..." if len(files) > 20 else "")))
        pairs.append(("aliases", ", ".join(data["aliases"]) or "-"))
    else:
        pairs += [("functions", ", ".join(data["functions"])), ("parameters", data["parameters"])]
    pairs += [("created", human_time(data["created"])), ("lineage", data["lineage"])]
    pairs.append(("versions", ", ".join(v + (" *" if v == data["version"] else "") for v in versions)))
    print(render_fields(pairs))
    return 0


def cmd_delete(args, platform) -> int:
    for ref in platform.catalog_delete(args.kind, args.ref):
        print(f"deleted {args.kind} {ref}")
    return 0


def add_commands(groups, kind: str, add_args: Callable[[argparse.ArgumentParser, str], None]):
    """Add the `add`, `list`, `show` and `delete` commands of one catalog noun; return its subparsers."""
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
    return group
