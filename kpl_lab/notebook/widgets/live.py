"""A background thread that refreshes a widget until its job ends, without blocking the kernel."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Poller:
    """Call `refresh` every `interval` seconds on a daemon thread until it answers True (done)."""

    def __init__(self, refresh: Callable[[], bool], interval: float) -> None:
        self.refresh = refresh
        self.interval = interval
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Return whether the thread is still refreshing."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start refreshing (again) in the background."""
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kpl-widget-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.refresh():
                    return
            except Exception as error:  # shown by the widget; a dead server must not kill the kernel
                self.error = error
                return
            self._stop.wait(self.interval)

    def stop(self) -> None:
        """Stop refreshing and wait for the thread to end."""
        self._stop.set()
        self.join()

    def join(self, timeout: float | None = None) -> None:
        """Wait until refreshing has ended (the job ended, or `stop` was called)."""
        if self._thread is not None:
            self._thread.join(timeout)
