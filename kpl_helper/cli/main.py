"""The khelper command: kill, save dataset|model|algorithm, write <yml>."""

from __future__ import annotations

import argparse
import sys

from kpl_helper.parameter import write_parameter_file
from kpl_helper.save import save
from kpl_helper.stop import kill


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="khelper")
    parser.set_defaults(func=lambda args: parser.print_help())
    sub = parser.add_subparsers(title="khelper sub command")

    sub.add_parser("kill", help="ask the platform to stop this job").set_defaults(func=lambda args: kill())

    write = sub.add_parser("write", help="write the job's parameters to a YAML file")
    write.add_argument("yml", help="path of the YAML file to write")
    write.set_defaults(func=lambda args: write_parameter_file(args.yml))

    saver = sub.add_parser("save", help="save a dataset, model or algorithm")
    saver.set_defaults(func=lambda args: saver.print_help())
    content = saver.add_subparsers(title="Content")
    for kind, what in (("dataset", "dataset"), ("model", "model"), ("algorithm", "algorithm code direction")):
        p = content.add_parser(kind)
        p.add_argument("--name", "-n", help=f"{kind.capitalize()} name", required=True)
        p.add_argument("--desc", "-d", help=f"Description for the {kind}", required=False)
        p.add_argument("--path", "-p", help=f"Path to {what}", required=True)
        if kind == "dataset":
            p.add_argument(
                "--as_serialized", "-s", action="store_true", help="upload as kpl-dataset format dataset"
            )
        p.set_defaults(func=_saver(kind))
    return parser


def _saver(kind: str):
    def run(args: argparse.Namespace) -> None:
        save(kind, args.path, args.name, args.desc, getattr(args, "as_serialized", False))

    return run


def main(argv: list[str] | None = None) -> int:
    """Run khelper; print the error and return 1 when the command fails."""
    args = _parser().parse_args(argv)
    try:
        args.func(args)
    except (OSError, ValueError, LookupError) as error:
        print(f"khelper: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
