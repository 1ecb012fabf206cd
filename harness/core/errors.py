"""The exceptions the harness raises for what it can explain, each with the exit
code `python -m harness` gives it (the convention is in `python -m harness --help`),
and `listing`, which keeps a long list in a message short.

Their message says what happened, what was left untouched and what to do next;
`python -m harness` prints it without a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence

# A message names this many files or commits at most, then says how many more.
_MAX_LISTED = 20


def listing(items: Sequence[str]) -> str:
    """`items` for a message, comma-separated: all of them, or the first 20
    and "and N more"."""
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


class HarnessError(Exception):
    """A user's mistake or an environment the harness cannot work in (bad usage,
    a bad input file, no Docker daemon): nothing was judged, exit 2."""

    exit_code = 2
    label = "error"


class VerdictFailed(HarnessError):
    """The command ran to the end and its verdict is "fail" (a scenario's checks, the
    soak's threshold, a ladder ordering, a patch that does not apply or whose tests
    fail): exit 1. A subclass so every caller that stops on a HarnessError stops here
    too, but a script can tell "it is broken" from "you called it wrong"."""

    exit_code = 1
    label = "failed"


class VerdictUnknown(HarnessError):
    """The command ran but cannot say pass or fail (a ladder ordering that needs a
    value the description does not give): exit 3."""

    exit_code = 3
    label = "unknown"
