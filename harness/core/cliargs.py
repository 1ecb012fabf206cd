"""Argument types the harness's command lines share."""

from __future__ import annotations

import argparse


def at_least_one(text: str) -> int:
    """An argparse type for a count of runs (at once, or in all): a whole
    number, 1 or more; anything else is argparse's usage error (exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of runs, 1 or more, not {text!r}")
    return value
