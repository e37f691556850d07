"""`kpl-lab dataset add|list|show|delete`."""

from __future__ import annotations

import argparse

from .catalog import add_commands


def _add_args(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("name", metavar="NAME", help=f"{kind} name")
    what = "kpl-dataset folder" if kind == "dataset" else "model file or folder"
    parser.add_argument("path", metavar="PATH", help=what)


def register(groups) -> None:
    """Add the `dataset` commands."""
    add_commands(groups, "dataset", _add_args)
