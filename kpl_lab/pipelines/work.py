"""What a sandboxed worker runs for a pipeline: one unit's query or one processor, into a staged folder.

The runner (in the platform) sends the checked pipeline and the unit or node; these run it
where the project's sandbox account reads the inputs and writes `staged/PORT`, and answer the
rows and content hash of each output in JSON: the platform then takes the folder back
(`Sandbox.adopt`) and publishes it in the cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from pathlib import Path
from typing import Any

from . import cache, fuse, processors
from .processors import Settings, Source


def _prepared(settings: Settings, staged: str) -> Settings:
    """Return settings for this worker: pyarrow's memory pool set, a spill folder it may write.

    The configured spill folder when this account can make and write it, else the staged folder
    itself (each query spills into a folder of its own there, removed after).
    """
    global _allocator
    if settings.arrow_allocator and _allocator != settings.arrow_allocator:
        import pyarrow as pa

        pa.set_memory_pool(getattr(pa, f"{settings.arrow_allocator}_memory_pool")())
        _allocator = settings.arrow_allocator
    spill = settings.temp_directory
    if spill:
        with contextlib.suppress(OSError):
            os.makedirs(spill, exist_ok=True)
            if os.access(spill, os.W_OK):
                return settings
    return dataclasses.replace(settings, temp_directory=staged)


_allocator = ""


def unit(
    checked: Any, unit: fuse.Unit, staged: str, settings: Settings, stop: threading.Event, log: Any
) -> list:
    """Run a fused unit into staged/PORT; return [{port: [rows, content hash]}, each member's rows]."""
    rows, counts = fuse.run(checked, unit, Path(staged), stop, log, _prepared(settings, staged))
    return [{port: [n, cache.content(Path(staged) / port)] for port, n in rows.items()}, counts]


def processor(
    node_type: Any,
    params: Any,
    inputs: dict[str, Source],
    outputs: dict,
    staged: str,
    settings: Settings,
    stop: threading.Event,
    log: Any,
) -> dict[str, list]:
    """Run one processor node (its node type: the registry's, see NodeType.__reduce__) into staged/PORT;
    return {port: [rows, content hash]}."""
    rows = processors.run(
        node_type, params, inputs, outputs, Path(staged), stop, log, _prepared(settings, staged)
    )
    return {port: [count, cache.content(Path(staged) / port)] for port, count in rows.items()}
