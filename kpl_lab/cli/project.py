"""`kpl-lab project quota [--set KEY=VALUE ...] [--clear KEY ...]`: the project's quota, read or changed."""

from __future__ import annotations

import argparse

from ..errors import BadRequest
from ..text import emit_json, render_fields

LIMITS = ("cpu", "memory", "gpu", "npu", "notebooks")


def _limit(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    if not sep or key not in LIMITS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=NUMBER, KEY one of {', '.join(LIMITS)}")
    try:
        return key, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None


def cmd_quota(args, platform) -> int:
    """Show the project's quota, or change some of its limits (administrators)."""
    quota = platform.client.quota()["quota"]
    if args.set or args.clear:
        changed = {key: value for key, value in quota.items() if value is not None and key not in args.clear}
        changed.update(dict(args.set))
        if any(value < 0 for value in changed.values()):
            raise BadRequest("a limit is a number >= 0", field="quota")
        quota = platform.client.set_quota(changed)["quota"]
    if args.json:
        emit_json({"project": platform.project, "quota": quota})
        return 0
    limits = {key: "not limited" if quota.get(key) is None else f"{quota[key]:g}" for key in LIMITS}
    print(f"project {platform.project}")
    print(render_fields([(key, value) for key, value in limits.items()]))
    return 0


def register(groups) -> None:
    """Add the `project` commands."""
    parser = groups.add_parser("project", help="the project's quota")
    commands = parser.add_subparsers(dest="command", metavar="{quota}", required=True)
    quota = commands.add_parser(
        "quota",
        help="show the project's quota; --set/--clear change it (administrators), in effect at the next "
        "reservation of any job, notebook, trial or replica",
    )
    quota.add_argument("--set", type=_limit, action="append", default=[], metavar="KEY=NUMBER")
    quota.add_argument("--clear", action="append", default=[], choices=LIMITS, metavar="KEY")
    quota.add_argument("--json", action="store_true", help="print JSON")
    quota.set_defaults(func=cmd_quota)
