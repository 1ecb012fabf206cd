"""How far along a long run is (a bench, the soak): time so far, what is
running, and about how long is left.

A run states its planned work in seconds up front, then says what it begins,
each piece with its share of that plan:

    with progress.Progress("bench-health", planned_s) as p:
        p.begin("size 32, repeat 2/3: pull", settle_s + window_s)
        ...

The time left is the planned seconds not done yet times the pace so far: the
wall time since the first planned piece began over the planned seconds done by
now (an ended piece counts its whole plan, a running one the time it has run,
up to its plan). The plan holds what a run waits through on purpose (windows,
settling, the soak's minutes) or, where nothing fixes a step's length, a guess
per step; what it leaves out (cluster starts, deploys) and any guess that is
off show up in the pace, so the estimate corrects itself as the run goes.
Pieces run side by side (the soak's --parallel) count together, so two at once
halve the time left. A piece begun with no planned seconds only says what is
running.

The lines go through harness.core.log, so -q silences them and pytest sees
them: a line whenever a piece begins; when stderr is a terminal, a live line
under the others (in the with), redrawn every second and under each log line
as it is written; when it is not (CI's log), the same line again once
`every_s` has passed with nothing printed, so the log shows the run is alive
without a line a second; and a last line when the run ends, with how long it
took or where it stopped.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.core import log

_log = log.get(__name__)

EVERY_S = 30.0  # not a terminal: at most one line per this many seconds, phase lines aside
REDRAW_S = 1.0  # how often the live line (or the check for a due line) runs
_CLEAR = "\r\x1b[K"  # to the start of the line and erase it


def duration(seconds: float) -> str:
    """42s, 12m04s, 1h02m: to the second under an hour, to the minute above."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class _Piece:
    text: str
    planned_s: float
    began: float


class Progress:
    """The progress of one run; see the module's docstring. Thread-safe: the
    soak's runs report from threads of their own, one `key` each."""

    def __init__(
        self,
        title: str,
        planned_s: float,
        *,
        every_s: float = EVERY_S,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.title = title
        self.planned_s = planned_s
        self.every_s = every_s
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._clock = clock
        self._started = clock()
        self._first: float | None = None  # when the first planned piece began
        self._ended_s = 0.0  # planned seconds of the pieces that ended
        self._running: dict[str, _Piece] = {}
        self._last_text = "starting"
        self._printed = self._started  # when a line was last printed
        self._live = False  # the live line is on the terminal now
        self._closed = False
        # Re-entrant: a line printed under the lock passes through _handle.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        # The harness's handlers whose handle() is _handle while in the with,
        # each with its own handle() (if it had one) to put back.
        self._hooked: list[tuple[logging.Handler, Callable | None]] = []

    # What the run says.

    def begin(self, text: str, planned_s: float = 0.0, key: str = "") -> None:
        """`text` is running now, planned to take `planned_s` of the plan; it
        ends the piece `key` had. `key` tells apart pieces that run at once."""
        with self._lock:
            if self._closed:
                return  # a run thread still winding down after Ctrl-C: the last line is out
            now = self._clock()
            ended = self._running.get(key)
            if ended is not None:
                self._ended_s += ended.planned_s
            if planned_s > 0 and self._first is None:
                self._first = now
            # In place, so that a key keeps its place in the line.
            self._running[key] = _Piece(text, planned_s, now)
            self._last_text = text
            self._print(self.line(text))

    def end(self, key: str = "") -> None:
        """The piece `key` is done (it counts its whole plan)."""
        with self._lock:
            self._end(key)

    def tick(self) -> None:
        """Redraw the live line, or print the line again if it is due."""
        with self._lock:
            if self._closed:
                return
            if self.tty:
                if self._hooked:  # the live line is kept only in the with
                    self._draw()
            elif self._clock() - self._printed >= self.every_s:
                self._print(self.line())

    def close(self, error: BaseException | None = None) -> None:
        """The last line: how long the run took, or where it stopped."""
        with self._lock:
            if self._closed:
                return
            now = self._clock()
            elapsed, what = duration(now - self._started), self._what(now)
            for key in list(self._running):
                self._end(key)
            self._closed = True  # before the line: no live line drawn under it
            if error is None:
                self._print(f"{self.title}: done in {elapsed}")
            else:
                reason = type(error).__name__
                self._print(f"{self.title}: stopped after {elapsed} ({reason}), during {what}")

    # Reading it.

    def done_s(self) -> float:
        """Planned seconds done by now."""
        with self._lock:
            return self._done_s(self._clock())

    def left_s(self) -> float:
        """The estimate of the time left (the module's docstring says how)."""
        with self._lock:
            return self._left_s(self._clock())

    def line(self, what: str | None = None) -> str:
        """`title [elapsed, share of the plan done, time left] what`; `what`
        defaults to every piece running. The figures come first: a live line
        too wide for the terminal loses the end of `what`, not them."""
        with self._lock:
            now = self._clock()
            done = self._done_s(now)
            share = min(1.0, done / self.planned_s) if self.planned_s > 0 else 1.0
            left = self._left_s(now)
            # The plan is spent and something still runs: no figure to give.
            estimate = f"about {duration(left)} left" if left > 0 else "finishing"
            return (
                f"{self.title} [{duration(now - self._started)} elapsed, {share:.0%} of plan, "
                f"{estimate}] {what or self._what(now)}"
            )

    # With: the live line (or the due lines) kept up by a thread of its own,
    # since the run blocks for minutes at a time (a window, a deploy).

    def __enter__(self) -> Progress:
        if self.tty:
            for handler in logging.getLogger(log.ROOT_LOGGER).handlers:
                # On the instance, over its class's handle(), until __exit__.
                self._hooked.append((handler, vars(handler).get("handle")))
                handler.handle = functools.partial(self._handle, handler.handle)  # type: ignore[method-assign]
        self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        try:
            self._stop.set()
            if self._ticker is not None:
                self._ticker.join()  # a second Ctrl-C may land here ...
        finally:
            try:
                self.close(error)  # ... and the last line is printed all the same
            finally:
                # Even if close() raised: the handlers are the harness's, not the run's.
                for handler, own in self._hooked:
                    if own is None:
                        del handler.handle
                    else:
                        handler.handle = own  # type: ignore[method-assign]
                self._hooked.clear()

    # Inside.

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_S):
            self.tick()

    def _done_s(self, now: float) -> float:
        running = sum(min(now - p.began, p.planned_s) for p in self._running.values())
        return self._ended_s + running

    def _left_s(self, now: float) -> float:
        done = self._done_s(now)
        todo = max(0.0, self.planned_s - done)
        if self._first is None or done <= 0:
            return todo  # nothing done yet to take a pace from: the plan itself
        return todo * (now - self._first) / done

    def _end(self, key: str) -> None:
        piece = self._running.pop(key, None)
        if piece is not None:
            self._ended_s += piece.planned_s

    def _what(self, now: float) -> str:
        """Every piece running, each with how long it has run (of its plan)."""
        texts = []
        for piece in self._running.values():
            ran = duration(now - piece.began)
            of = f" of {duration(piece.planned_s)}" if piece.planned_s > 0 else ""
            texts.append(f"{piece.text} ({ran}{of})")
        return "; ".join(texts) or self._last_text

    def _print(self, text: str) -> None:
        # Through the harness's logger: on a terminal, through _handle.
        _log.info("%s", text)
        self._printed = self._clock()

    def _handle(
        self, handle: Callable[[logging.LogRecord], bool], record: logging.LogRecord
    ) -> bool:
        """A log line (any logger under `harness`, this one's too) while the
        live line is up: cleared, written and the live line drawn again under
        it, in one step under the lock, so the ticker cannot redraw in between
        and leave the log line at the end of the live line."""
        with self._lock:
            if self._live:
                sys.stderr.write(_CLEAR)
                self._live = False
            try:
                return handle(record)
            finally:
                if not self._closed:
                    self._draw()

    def _draw(self) -> None:
        if not _log.isEnabledFor(logging.INFO):
            return  # -q: no progress, live or not
        # One character short of the width: a line that wraps cannot be redrawn.
        sys.stderr.write(_CLEAR + self.line()[: _columns() - 1])
        sys.stderr.flush()
        self._live = True


def _columns() -> int:
    """The terminal's width (80 when stderr has none to tell)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return 80
