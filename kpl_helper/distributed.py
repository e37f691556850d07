"""Which worker this process is in a job of several workers (torch.distributed's variables).

Only rank 0 sends metrics and progress, so a job's curves are drawn once; a metric pushed
with `all_ranks=True`, or every metric when KPL_ALL_RANKS=1, is sent from the other ranks
too, as its own series named "<series> (rank N)".
"""

from __future__ import annotations

import os

ALL_RANKS_VARIABLE = "KPL_ALL_RANKS"


def _integer(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def get_rank() -> int:
    """Return this worker's rank among all workers (0 in a job of one worker, and outside)."""
    return _integer("RANK", 0)


def get_world_size() -> int:
    """Return how many workers the job has (1 in a job of one worker, and outside)."""
    return _integer("WORLD_SIZE", 1)


def get_local_rank() -> int:
    """Return this worker's rank among the workers on its machine (0 when alone)."""
    return _integer("LOCAL_RANK", 0)


def all_ranks() -> bool:
    """Return whether every rank sends its metrics (KPL_ALL_RANKS=1)."""
    return os.environ.get(ALL_RANKS_VARIABLE, "") not in ("", "0")
