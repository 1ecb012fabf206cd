"""Running other programs on the host: the one place the harness starts a
process (git, pip, pytest, debootstrap, tar). Docker is not one of them; the
engine is reached through docker-py (`harness.cluster.engine`).

Every caller gets the same behaviour: output captured as UTF-8 text unless it
asks to let it through, a timeout that kills the child, and a `HarnessError`
naming the program when it cannot be started, instead of a traceback.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from harness.core import log
from harness.core.errors import HarnessError

_log = log.get(__name__)

# Named here so callers can type a result and catch a timeout without
# importing subprocess themselves.
CompletedProcess = subprocess.CompletedProcess
Popen = subprocess.Popen


class TimeoutExpired(subprocess.TimeoutExpired):
    """A child `run` killed past its timeout. What it had printed so far is in
    `output` (which `stdout` reads) and `stderr` as text: subprocess keeps
    bytes there even in text mode, and its stubs say so."""

    output: str | None


Command = Sequence[str | os.PathLike[str]]


def run(
    cmd: Command,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    stdin: IO[bytes] | None = None,
    timeout: float | None = None,
    capture: bool = True,
) -> CompletedProcess[str]:
    """Run `cmd` to the end and return its result; its exit code is the
    caller's to judge. With `capture=False` its output goes to the terminal
    (pip during `make setup`, which the user should see).

    Past `timeout` seconds the child is killed and `TimeoutExpired` raised,
    with what it had printed so far as text."""
    args = [str(arg) for arg in cmd]
    _log.debug("run: %s%s", shlex.join(args), f"  (in {cwd})" if cwd else "")
    try:
        return subprocess.run(
            args,
            cwd=cwd,
            env=env,
            input=input,
            stdin=stdin,
            timeout=timeout,
            capture_output=capture,
            encoding="utf-8",
            errors="replace",
        )
    except FileNotFoundError as exc:
        raise _not_started(args, cwd) from exc
    except subprocess.TimeoutExpired as exc:
        # subprocess keeps the partial output of a killed child as bytes even
        # in text mode; every message that quotes it wants text.
        raise TimeoutExpired(
            exc.cmd, exc.timeout, output=_text(exc.output), stderr=_text(exc.stderr)
        ) from None


def start(cmd: Command, *, merge_stderr: bool = False, text: bool = False) -> Popen:
    """Start `cmd` with its stdout piped to the caller, for output that is
    read while it runs (debootstrap's progress) or streamed on (a tar of a
    root file system). `merge_stderr` sends stderr down the same pipe."""
    args = [str(arg) for arg in cmd]
    _log.debug("start: %s", shlex.join(args))
    try:
        return subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else None,
            text=text,
        )
    except FileNotFoundError as exc:
        raise _not_started(args, None) from exc


def output_tail(result: CompletedProcess[str], limit: int = 2000) -> str:
    """The end of what a finished command printed, stdout then stderr, for an
    error message: the cause is nearly always in the last lines."""
    text = ((result.stdout or "") + (result.stderr or "")).strip()
    return text[-limit:]


def _text(output: bytes | str | None) -> str | None:
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    return output


def _not_started(args: list[str], cwd: Path | None) -> HarnessError:
    # subprocess raises the same FileNotFoundError for a missing program and a
    # missing working directory; the message must say which.
    if cwd is not None and not Path(cwd).is_dir():
        return HarnessError(f"{cwd} does not exist or is not a folder.")
    program = args[0]
    if os.sep in program:
        return HarnessError(
            f"{program} does not exist, so it could not start and changed nothing. "
            f"Check the path (for a venv's interpreter: `make setup`) and run again."
        )
    return HarnessError(
        f"{program} is not installed or not on PATH, so it could not start and changed "
        f"nothing. Install {program} and run again."
    )
