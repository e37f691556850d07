"""The kpl-dataset command: import, convert, migrate, inspect, export and verify datasets."""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kpl_dataset import BasicType, KPLDatasetError, ReadOnlyDataset, list_parts
from kpl_dataset._progress import Progress
from kpl_dataset.fs import resolve
from kpl_dataset.importers import (
    ImportFailed,
    Limits,
    import_coco,
    import_imagefolder,
    import_labelme,
    import_raw,
    import_voc,
    migrate_legacy,
    parse_split,
)
from kpl_dataset.importers.safety import UnsafeEntry, safe_name

PROG = "kpl-dataset"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Failure(Exception):
    """A check that failed: exit status 1 with the listed problems."""


def parse_size(text: str) -> int:
    """Parse '500M', '16G', '1.5GiB' or a plain byte count."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 1048576, 500M, 16G)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number: {text!r}")
    return value


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(
        max_total_size=args.max_size,
        max_file_size=args.max_file_size,
        max_ratio=args.max_ratio,
        max_entries=args.max_entries,
    )


def _report(counts: dict[str, int], dest: str) -> None:
    for part, count in counts.items():
        print(f"{dest}: part {part!r}: {count} records")


def cmd_import(args: argparse.Namespace) -> None:
    _report(import_raw(args.src, args.dest, args.part, _limits(args), args.quiet), args.dest)


def cmd_voc(args: argparse.Namespace) -> None:
    _report(import_voc(args.src, args.dest, args.part, _limits(args), args.quiet), args.dest)


def cmd_coco(args: argparse.Namespace) -> None:
    _report(import_coco(args.src, args.dest, args.part, _limits(args), args.quiet), args.dest)


def cmd_labelme(args: argparse.Namespace) -> None:
    _report(import_labelme(args.src, args.dest, args.part, _limits(args), args.quiet), args.dest)


def cmd_imagefolder(args: argparse.Namespace) -> None:
    split = parse_split(args.split) if args.split else None
    counts = import_imagefolder(args.src, args.dest, args.part, split, args.seed, _limits(args), args.quiet)
    _report(counts, args.dest)


def cmd_legacy(args: argparse.Namespace) -> None:
    _report(migrate_legacy(args.src, args.dest, args.quiet), args.dest)


def _parts(data_dir: str, part: str | None = None) -> list[str]:
    if "://" not in data_dir and not Path(data_dir).is_dir():
        raise KPLDatasetError(f"{data_dir}: no such folder")
    parts = list_parts(data_dir)
    if part is not None:
        if part not in parts:
            raise KPLDatasetError(f"{data_dir}: no part {part!r}; parts: {parts}")
        return [part]
    if not parts:
        raise KPLDatasetError(f"{data_dir}: no dataset parts found")
    return parts


def _type_text(kind: Any) -> str:
    if isinstance(kind, dict):
        return "{" + ", ".join(f"{k}: {_type_text(v)}" for k, v in kind.items()) + "}"
    if isinstance(kind, list):
        return "[" + _type_text(kind[0]) + "]"
    return str(kind)


def cmd_info(args: argparse.Namespace) -> None:
    summary = []
    for part in _parts(args.dir):
        with ReadOnlyDataset(args.dir, part) as reader:
            manifest = reader.manifest
            size = sum(s.bytes for s in manifest.shards) + sum(int(f.get("size", 0)) for f in manifest.files)
            summary.append(
                {"part": part, "records": len(reader), "bytes": size, "record_type": reader.schema}
            )
    if args.json:
        print(json.dumps({"dataset": args.dir, "parts": summary}, ensure_ascii=False, indent=1))
        return
    total = sum(p["bytes"] for p in summary)
    print(f"dataset {args.dir}: {len(summary)} part(s), {_human(total)}")
    for p in summary:
        print(f"part {p['part']}: {p['records']} records, {_human(p['bytes'])}")
        for key, kind in p["record_type"].items():
            print(f"  {key}: {_type_text(kind)}")


def _shown(value: Any) -> Any:
    """Replace bytes by '<N bytes>' for display."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def cmd_head(args: argparse.Namespace) -> None:
    for part in _parts(args.dir, args.part):
        with ReadOnlyDataset(args.dir, part) as reader:
            print(f"# part {part}: {len(reader)} records")
            for i in range(min(args.n, len(reader))):
                print(json.dumps(_shown(reader[i]), ensure_ascii=False))


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _write_atomic(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".export-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fp:
            fp.write(data)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _export_files(reader: ReadOnlyDataset, out: Path, part: str, progress: Progress) -> None:
    seen: set[str] = set()
    for i, record in enumerate(reader):
        try:
            rel = safe_name(record["path"])
        except UnsafeEntry as exc:
            raise KPLDatasetError(f"part {part!r}, record {i}: path {exc}") from None
        if rel in seen:
            raise KPLDatasetError(f"part {part!r}, record {i}: path {rel!r} appears twice")
        seen.add(rel)
        _write_atomic(out / rel, record["content"])
        progress.update()


def _export_jsonl(reader: ReadOnlyDataset, target: Path, progress: Progress) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".export-", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fp:
            for record in reader:
                fp.write(json.dumps(_jsonable(record), ensure_ascii=False) + "\n")
                progress.update()
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _is_raw(schema: dict) -> bool:
    return schema.get("path") == BasicType.String and schema.get("content") == BasicType.ByteArray


def cmd_export(args: argparse.Namespace) -> None:
    parts = _parts(args.dir, args.part)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise KPLDatasetError(f"{out}: already exists and is not an empty folder")
    out.mkdir(parents=True, exist_ok=True)
    for part in parts:
        with ReadOnlyDataset(args.dir, part) as reader:
            fmt = args.format
            if fmt == "auto":
                fmt = "files" if set(reader.schema) == {"path", "contentType", "content"} else "jsonl"
            if fmt == "files" and not _is_raw(reader.schema):
                raise KPLDatasetError(f"part {part!r} has no path (String) and content (ByteArray) fields")
            with Progress(f"export {part}", len(reader), quiet=args.quiet) as progress:
                if fmt == "files":
                    _export_files(reader, out / part if len(parts) > 1 else out, part, progress)
                else:
                    _export_jsonl(reader, out / f"{part}.jsonl", progress)
            print(f"{out}: part {part!r}: {len(reader)} records as {fmt}")


def cmd_verify(args: argparse.Namespace) -> None:
    problems = []
    try:
        parts = _parts(args.dir)
    except KPLDatasetError as exc:
        raise Failure(str(exc)) from None
    loc = resolve(args.dir)
    for part in parts:
        found = len(problems)
        try:
            with ReadOnlyDataset(args.dir, part) as reader:
                reader.verify()
                count = sum(1 for _ in reader)
                expected = reader.manifest.num_rows
                if count != len(reader) or count != expected:
                    problems.append(f"part {part!r}: read {count} records, manifest says {expected}")
                for f in reader.manifest.files:
                    if not loc.exists(f["path"]):
                        problems.append(f"part {part!r}: large file {f['path']} is missing")
                if len(problems) == found:
                    print(f"part {part}: {count} records ok")
        except KPLDatasetError as exc:
            problems.append(f"part {part!r}: {exc}")
    if problems:
        raise Failure("\n".join(problems))
    print(f"{args.dir}: {len(parts)} part(s) verified")


def _add_limits(p: argparse.ArgumentParser) -> None:
    d = Limits()
    g = p.add_argument_group("upload limits (zip bombs)")
    g.add_argument(
        "--max-size", type=parse_size, default=d.max_total_size, help="total uncompressed size (16G)"
    )
    g.add_argument("--max-file-size", type=parse_size, default=d.max_file_size, help="size of one file (4G)")
    g.add_argument("--max-ratio", type=_positive_float, default=d.max_ratio, help="compression ratio (200)")
    g.add_argument("--max-entries", type=int, default=d.max_entries, help="number of files (1000000)")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Import, convert, inspect and export kpl-datasets."
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[[argparse.Namespace], None], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bar"
        )
        p.set_defaults(func=func)
        return p

    converters = [
        (
            "import",
            cmd_import,
            "import the files of a folder, zip or tar as path/contentType/content records",
        ),
        ("voc", cmd_voc, "convert Pascal VOC (JPEGImages + Annotations) into detection records"),
        ("coco", cmd_coco, "convert COCO instances JSON and images into detection records"),
        ("labelme", cmd_labelme, "convert labelme JSON into detection records with polygons"),
        ("imagefolder", cmd_imagefolder, "convert one-folder-per-class images into classification records"),
    ]
    for name, func, help_text in converters:
        p = add(name, func, help_text)
        p.add_argument("src", help="folder, .zip, .tar, .tar.gz or .tgz")
        p.add_argument("dest", help="dataset folder to create or add parts to")
        p.add_argument("--part", help="part name (default: root)")
        if name == "imagefolder":
            p.add_argument("--split", help="e.g. test=0.2 or val=0.1,test=0.1 (rest goes to 'train')")
            p.add_argument("--seed", type=int, default=0, help="seed of the split (default 0)")
        _add_limits(p)

    p = add("legacy", cmd_legacy, "migrate a dataset written by kpl-dataset 0.0.9 (every part)")
    p.add_argument("src", help="folder with <part>.data/.index/.meta files")
    p.add_argument("dest", help="dataset folder to create")

    p = add("info", cmd_info, "show parts, record counts, schema and size")
    p.add_argument("dir")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("head", cmd_head, "print the first records (bytes shown as <N bytes>)")
    p.add_argument("dir")
    p.add_argument("-n", type=int, default=5, help="records per part (default 5)")
    p.add_argument("--part")

    p = add("export", cmd_export, "write raw files back out, or JSON lines for other datasets")
    p.add_argument("dir")
    p.add_argument("out", help="folder to create")
    p.add_argument("--part")
    p.add_argument("--format", choices=["auto", "files", "jsonl"], default="auto")

    p = add("verify", cmd_verify, "read every shard and check counts; exit 1 when damaged")
    p.add_argument("dir")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; 0 ok, 1 verification failed, 2 bad input."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except Failure as exc:
        print(f"{PROG}: verify failed:\n{exc}", file=sys.stderr)
        return 1
    except (KPLDatasetError, ImportFailed) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{PROG}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing was committed", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
