"""Named locks shared by the processes of one checkout: CI's image build and
the tests beside it, `make setup` and that image build, two runs at once.

Each name is a file in build/locks/ held with flock, so the lock goes with
its holder however that process ends, and the second process waits, then
finds the work done instead of doing it again into the same scratch folders.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator

from harness.core import log
from harness.core.paths import BUILD_DIR

_log = log.get(__name__)

LOCK_DIR = BUILD_DIR / "locks"


@contextlib.contextmanager
def one_at_a_time(what: str) -> Iterator[None]:
    """Held while `what` (`base`, `ray 2.60.0`, `wheelhouse 2.60.0`) is looked
    for and made. One lock per name, so a process that needs only what is made
    already does not wait for something else; a caller holding several takes
    them in one fixed order (images.py: image, then ray, then base)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / f"{what.replace(' ', '-')}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            started = time.monotonic()
            _log.info("%s: another process of this checkout is making it; waiting", what)
            fcntl.flock(lock, fcntl.LOCK_EX)
            log.progress(_log, f"{what}: the other process is done", started)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
