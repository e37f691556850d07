"""A small progress bar on stderr: count/total, rate and time left."""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 24
_MIN_INTERVAL = 0.1


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class Progress:
    """Count finished items and redraw one status line, only on a terminal."""

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        unit: str = "records",
    ) -> None:
        self.desc = desc
        self.total = total
        self.unit = unit
        self.count = 0
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and bool(getattr(self._stream, "isatty", lambda: False)())
        self._start = time.monotonic()
        self._last_draw = 0.0

    def update(self, n: int = 1) -> None:
        """Add N finished items and redraw if enough time has passed."""
        self.count += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last_draw >= _MIN_INTERVAL:
            self._last_draw = now
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        """Return the status line for the current count."""
        now = time.monotonic() if now is None else now
        elapsed = max(now - self._start, 1e-9)
        rate = self.count / elapsed
        if self.total:
            frac = min(self.count / self.total, 1.0)
            filled = int(frac * _WIDTH)
            bar = "#" * filled + "-" * (_WIDTH - filled)
            left = (self.total - self.count) / rate if rate > 0 else 0.0
            return (
                f"{self.desc} [{bar}] {self.count}/{self.total} {self.unit} {rate:.1f}/s ETA {_clock(left)}"
            )
        return f"{self.desc} {self.count} {self.unit} {rate:.1f}/s {_clock(elapsed)}"

    def _draw(self, now: float) -> None:
        self._stream.write("\r" + self.line(now) + "\x1b[K")
        self._stream.flush()

    def close(self) -> None:
        """Draw the final line and end it."""
        if self.enabled:
            self._draw(time.monotonic())
            self._stream.write("\n")
            self._stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
