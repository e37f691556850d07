"""A bounded memory of recent results: a dict that forgets everything once it is full.

The gateway's hot path remembers what it worked out for a request (a parsed head, a head
to send, credentials let in) because the next request of a kept-alive caller is the same.
Reads are plain `dict.get`; a caller sending ever new keys only makes it start over.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(dict[K, V]):
    """A dict of at most `limit` entries; `remember` empties it when it is full."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: K, value: V) -> V:
        """Keep `value` under `key` (forgetting the rest when full); return it."""
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value
