"""Argument types the harness's command lines share."""

from __future__ import annotations

import argparse


def _whole_number(text: str, minimum: int, of: str) -> int:
    """`text` as a whole number of `of`, at least `minimum`; anything else is
    argparse's usage error (exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of {of}, {minimum} or more, not {text!r}"
        )
    return value


def at_least_one(text: str) -> int:
    """An argparse type for a count of runs (at once, or in all)."""
    return _whole_number(text, 1, "runs")


def worker_count(text: str) -> int:
    """An argparse type for the worker nodes beside a cluster's head: 0 or more."""
    return _whole_number(text, 0, "worker nodes")
