"""Build the benchmark records: the same bytes for every tool, rebuilt from the index alone."""

from __future__ import annotations

import random

CONTENT_TYPE = "application/octet-stream"
RING = 257  # distinct random payloads; the path and label keep every record unique


class Payload:
    """Records i = (data, path, contentType, label) for a given size and seed, stdlib only."""

    def __init__(self, size: int, seed: int = 20261124):
        rng = random.Random(seed)
        self.size = size
        # Made once, so producing a record costs nothing that could favour one tool.
        self._ring = [rng.randbytes(size) for _ in range(RING)]

    def record(self, i: int) -> tuple[bytes, str, str, int]:
        """Return record i as (data, path, contentType, label)."""
        return self._ring[i % RING], f"images/{i:08d}.bin", CONTENT_TYPE, i % 1000
