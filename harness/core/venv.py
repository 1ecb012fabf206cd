"""The layout of a virtualenv as `python -m venv` makes it: where its packages
and its interpreter are, found from either end.

    <venv>/bin/python
    <venv>/lib/python3.X/site-packages
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.core import proc
from harness.core.errors import HarnessError
from harness.core.paths import VENV_DIR
from harness.core.proc import output_tail

_COMPLETE = ".complete"


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


def ensure_offline_venv(
    venv: Path,
    requirements: Sequence[str],
    wheelhouses: Sequence[Path],
    stamp: dict,
    verify: Callable[[Path], object] | None = None,
) -> Path:
    """`venv` with `requirements` installed offline from `wheelhouses`, built
    once and reused for as long as it was built for the same `stamp` (what it
    holds: versions, hashes). `verify(venv)` may refuse the result before it
    is kept.

    Built beside the final folder and renamed in, so a half-built venv is
    never mistaken for one; only `bin/python -m ...` is run from it, which
    does not care that the folder was renamed."""
    marker = venv / _COMPLETE
    if marker.is_file() and json.loads(marker.read_text()) == stamp:
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{venv.name}.partial-", dir=venv.parent))
    try:
        links = [arg for house in wheelhouses for arg in ("--find-links", str(house))]
        steps = [
            [sys.executable, "-m", "venv", "--without-pip", str(partial)],
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(python_in(partial)),
                "install",
                "--quiet",
                "--no-index",
                *links,
                *requirements,
            ],
        ]
        for cmd in steps:
            result = proc.run(cmd)
            if result.returncode != 0:
                raise HarnessError(
                    f"`{' '.join(cmd)}` failed:\n{output_tail(result)}\nNothing was kept. "
                    f"Check the wheelhouses ({', '.join(map(str, wheelhouses))}) and run again."
                )
        if verify:
            verify(partial)
        (partial / _COMPLETE).write_text(json.dumps(stamp) + "\n")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(venv, ignore_errors=True)
    os.replace(partial, venv)
    return venv
