"""`kpl-lab algorithm|dataset|model add|list|show|delete`: the commands every catalog noun shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..catalog import serialize
from ..text import emit_json, human_size, human_time, render_fields, render_table, short

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
                short(named.description),
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
        pairs.append(("aliases", ", ".join(data["aliases"]) or "-"))
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
