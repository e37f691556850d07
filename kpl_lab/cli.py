"""The `kpl-lab` command: algorithms, datasets, models and jobs from a terminal."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import unicodedata
from collections.abc import Sequence
from datetime import datetime, timezone

from .errors import KPLError

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


def iso_time(moment: datetime | None) -> str | None:
    """Return a stored (UTC) time as ISO 8601 with its offset."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.isoformat()


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
    """Return one dataset, model or algorithm version as plain data."""
    data = {
        "kind": kind,
        "name": getattr(row, kind).name,
        "version": row.version,
        "ref": row.ref,
        "path": str(catalog.path(row)),
        "description": row.description,
        "size_bytes": row.size_bytes,
        "lineage": row.lineage,
        "created": iso_time(row.created),
    }
    if kind == "dataset":
        data |= {"record_count": row.record_count, "parts": row.parts}
    elif kind == "model":
        data |= {"files": row.files}
    else:
        data |= {"functions": row.functions, "parameters": row.parameters}
    return data


def named_json(kind: str, named, catalog) -> dict:
    """Return a dataset, model or algorithm with all its versions as plain data."""
    return {
        "name": named.name,
        "description": named.description,
        "created": iso_time(named.created),
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
    return parser


def _algorithm_add_args(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("path", metavar="PATH", help="algorithm folder or archive (zip, tar, tar.gz)")
    parser.add_argument("--name", help="algorithm name (default: the folder or archive name)")


def _named_add_args(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("name", metavar="NAME", help=f"{kind} name")
    what = "kpl-dataset folder" if kind == "dataset" else "model file or folder"
    parser.add_argument("path", metavar="PATH", help=what)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `kpl-lab`; errors are one message and exit status 2, never a traceback."""
    from .platform import Platform

    args = build_parser().parse_args(argv)
    platform = Platform(home=args.home) if args.home else Platform()
    args.project = args.project or platform.default_project
    try:
        return args.func(args, platform)
    except KPLError as exc:
        print(f"kpl-lab: error: {exc.message}", file=sys.stderr)
        return 2
    except ValueError as exc:  # invalid algorithm, parameters, dataset records
        print(f"kpl-lab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kpl-lab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if os.environ.get("KPL_LAB_DEBUG"):
            traceback.print_exc()
        else:
            print(
                f"kpl-lab: internal error: {type(exc).__name__}: {exc} (set KPL_LAB_DEBUG=1 for details)",
                file=sys.stderr,
            )
        return 2
    finally:
        platform.close()


if __name__ == "__main__":
    sys.exit(main())
