"""The layout of a virtualenv as `python -m venv` makes it: where its packages
and its interpreter are, found from either end.

    <venv>/bin/python
    <venv>/lib/python3.X/site-packages
"""

from __future__ import annotations

from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.paths import VENV_DIR


def site_packages(venv: Path = VENV_DIR, fix: str = "run `make setup` first") -> Path:
    """The site-packages of `venv`; `fix` ends the refusal when there is none."""
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise HarnessError(f"no virtualenv at {venv}; {fix}.")
    return found[0]


def python_in(venv: Path) -> Path:
    """The interpreter of `venv` (it may not exist yet: `make setup` makes it)."""
    return venv / "bin" / "python"


def python_of(site: Path, fix: str) -> Path:
    """The interpreter of the venv that owns the site-packages `site`; `fix`
    ends the refusal when `site` is not inside one."""
    # A path too short to be <venv>/lib/pythonX/site-packages owns no interpreter.
    python = python_in(site.parents[2]) if len(site.parents) > 2 else site / "bin" / "python"
    if not python.exists():
        raise HarnessError(f"{site} is not inside a virtualenv (no {python}). {fix}")
    return python
