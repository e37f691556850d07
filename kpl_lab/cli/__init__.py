"""The `kpl-lab` command: algorithms, datasets, models and jobs from a terminal.

One module per noun (`algorithm`, `dataset`, `model`, `job`, `pipeline`, `deployment`, `experiment`,
`annotation`);
text formatting lives in `kpl_lab.text`. Commands get a platform from `kpl_lab.cli.platforms`:
this machine's, or in a notebook under the hub the shared service as the user; every command
works the same on both.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import KPLError
from . import algorithm, annotation, dataset, deployment, experiment, job, model, pipeline, project


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of `kpl-lab`."""
    parser = argparse.ArgumentParser(prog="kpl-lab", description="KPL Lab from the command line.")
    parser.add_argument("--home", help="platform home folder (default $KPL_LAB_HOME or ~/.kpl-lab)")
    parser.add_argument(
        "--database-url",
        help="catalog database (default: SQLite in the home; e.g. postgresql://user@host/kpl)",
    )
    parser.add_argument(
        "--project",
        help="project to work in (default: the platform's default project; in a hub notebook $KPL_PROJECT)",
    )
    groups = parser.add_subparsers(
        dest="group",
        metavar="{algorithm,dataset,model,job,pipeline,deployment,experiment,annotation,project}",
        required=True,
    )
    for noun in (algorithm, dataset, model, job, pipeline, deployment, experiment, annotation, project):
        noun.register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `kpl-lab`; a person's mistake is one message and exit status 2, a bug a traceback."""
    from .platforms import open_platform

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["up"]:  # the multi-user hub: its own options, and no platform opened here
        from ..hub.up import main as up

        return up(argv[1:])
    if argv[:1] == ["example"]:  # writes files only: no platform opened
        from ..example import main as example

        return example(argv[1:])
    args = build_parser().parse_args(argv)
    owner = _separated_home_owner(args.home)
    if owner is not None:
        return _run_as(owner, args.home, argv)
    try:
        platform = open_platform(args)
    except KPLError as exc:
        print(f"kpl-lab: error: {exc.message}", file=sys.stderr)
        return 2
    try:
        _reconcile(platform)
        return args.func(args, platform)
    except KPLError as exc:
        print(f"kpl-lab: error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kpl-lab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    finally:
        platform.close()


def _separated_home_owner(home: str | None):
    """Return the account that owns the home when this is root and the home is another account's, else None.

    Under `kpl-lab up` as root the catalog and the storage are the platform's system account's:
    files root made there would lock the platform out of them.
    """
    import os
    import pwd
    from pathlib import Path

    from ..platform import default_home

    if os.geteuid() != 0:
        return None
    try:
        uid = Path(home or os.environ.get("KPL_LAB_HOME") or default_home()).stat().st_uid
    except FileNotFoundError:
        return None
    return None if uid == 0 else pwd.getpwuid(uid)


def _run_as(owner, home: str | None, argv: list[str]) -> int:
    """Run this command again as the home's owner, on a Python that account runs; return its exit status."""
    import os
    import subprocess
    from pathlib import Path

    from ..hub.userenv import python_of, reachable_by_others
    from ..platform import default_home

    python = python_of(Path(home or os.environ.get("KPL_LAB_HOME") or default_home()) / "user-env")
    if not python.exists():
        python = Path(sys.executable)
    if not reachable_by_others(python):
        print(
            f"kpl-lab: error: run kpl-lab as {owner.pw_name}, the account that owns this home",
            file=sys.stderr,
        )
        return 2
    return subprocess.run(
        [str(python), "-m", "kpl_lab.cli", *argv],
        user=owner.pw_uid,
        group=owner.pw_gid,
        extra_groups=os.getgrouplist(owner.pw_name, owner.pw_gid),
        umask=0o027,
        check=False,
    ).returncode


def _reconcile(platform) -> None:
    """Finish jobs that ended while nothing watched them and start queued ones (cheap when idle)."""
    try:
        platform.reconcile()
    except KPLError as exc:  # a job the platform cannot check must not lock the CLI out
        print(f"kpl-lab: warning: could not check running jobs: {exc.message}", file=sys.stderr)
