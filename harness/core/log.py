"""The harness's logging: one logger per module under `harness`, one format,
one verbosity switch.

Progress lines of long work (what step, how far, how long so far) are INFO
and so on by default; `-q` keeps warnings and errors only, `-v` adds DEBUG
(every command the harness runs, every poll). A verb's result (a table, a
report's path) is its output, printed to stdout, not logged. Log lines go to
stderr, looked up at each write so that pytest's capture sees them.
"""

from __future__ import annotations

import logging
import sys
import time

ROOT_LOGGER = "harness"
LEVELS = {-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}


class _StderrHandler(logging.Handler):
    """Writes each record to whatever sys.stderr is at the time."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def _install() -> logging.Logger:
    root = logging.getLogger(ROOT_LOGGER)
    if not root.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        # The harness formats its own lines; a host application's root
        # handlers would print each one twice.
        root.propagate = False
    return root


def get(name: str) -> logging.Logger:
    """The logger of module `name` (pass `__name__`)."""
    _install()
    return logging.getLogger(name)


def set_verbosity(verbosity: int) -> None:
    """-1 quiet (warnings and errors), 0 normal (progress), 1 or more verbose."""
    _install().setLevel(LEVELS[max(-1, min(1, verbosity))])


def progress(logger: logging.Logger, message: str, started: float) -> None:
    """One progress line: `message (Ns)`, N the seconds since `started`
    (a time.monotonic() reading)."""
    logger.info("%s (%.0fs)", message, time.monotonic() - started)
