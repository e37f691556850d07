"""`kpl-lab algorithm add|list|show|delete`."""

from __future__ import annotations

import argparse

from .catalog import add_commands


def _add_args(parser: argparse.ArgumentParser, kind: str) -> None:
    parser.add_argument("path", metavar="PATH", help="algorithm folder or archive (zip, tar, tar.gz)")
    parser.add_argument("--name", help="algorithm name (default: the folder or archive name)")


def register(groups) -> None:
    """Add the `algorithm` commands."""
    add_commands(groups, "algorithm", _add_args)
