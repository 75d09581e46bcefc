"""Progress of long work on a terminal: one counter line on stderr, rewritten in place.

Only when the stream is a terminal (a pipe, a file or a test's capture gets nothing), at
most every ``interval`` seconds; stdout stays the command's data. The library reports
through a plain callback (``progress(runs, events)``); :class:`Progress` is one.
:class:`Ticker` shows the elapsed time of one call that reports nothing (a sweep)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Self

__all__ = ["Progress", "Ticker", "read_counts", "runs_events"]


def runs_events(runs: int, events: int) -> str:
    return f"{runs:,} runs, {events:,} events"


def read_counts(path: str) -> Callable[[int, int], str]:
    """The text of ``(lines, bytes)`` read of file ``path`` (``-``: stdin), with the share
    of the file when its size is known."""
    try:
        total = os.stat(path).st_size if path != "-" else 0
    except OSError:
        total = 0

    def fmt(lines: int, size: int) -> str:
        share = f" ({min(size * 100 // total, 100)}%)" if total else ""
        return f"{lines:,} lines, {size / 1e6:,.1f} MB{share}"

    return fmt


class Progress:
    """``progress(a, b)`` shows ``"<label>: " + fmt(a, b)`` on ``stream`` (default:
    stderr) when it is a terminal, at most every ``interval`` seconds; :meth:`close`
    (or the end of a ``with``) erases the line. Cheap to call often: the clock is read,
    the text made only when it is shown."""

    def __init__(self, label: str, fmt: Callable[[int, int], str] = runs_events, *,
                 stream: IO[str] | None = None, interval: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.fmt = fmt
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.clock = clock
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self._next = clock() + interval  # nothing for work shorter than one interval
        self._width = 0
        self._lock = threading.Lock()

    def __call__(self, a: int, b: int) -> None:
        if not self.enabled or self.clock() < self._next:
            return
        self.show(f"{self.label}: {self.fmt(a, b)}")

    def show(self, text: str) -> None:
        """Write ``text`` over the line now (when enabled)."""
        if not self.enabled:
            return
        with self._lock:
            pad = max(self._width - len(text), 0)
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
            self._width = len(text)
            self._next = self.clock() + self.interval

    def close(self) -> None:
        """Erase the line (when one was written): what follows starts a clean line."""
        with self._lock:
            if self.enabled and self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
            self._width = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class Ticker(Progress):
    """``"<label>: 3.5 s"`` rewritten every ``interval`` by a thread while the ``with``
    block runs (when the stream is a terminal): for a call that reports no counts."""

    def __init__(self, label: str, *, stream: IO[str] | None = None, interval: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(label, stream=stream, interval=interval, clock=clock)
        self._start = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        """Show the elapsed time now."""
        self.show(f"{self.label}: {self.clock() - self._start:.1f} s")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def __enter__(self) -> Self:
        if self.enabled:
            self._start = self.clock()
            self._thread = threading.Thread(target=self._run, name="hypha-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        super().close()
