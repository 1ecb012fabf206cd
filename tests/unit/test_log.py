"""The verbosity switch: progress lines by default, none with -q, debug with -v."""

import logging
import signal
import subprocess

import pytest

import harness.cli as cli
from harness.core import log, proc, wheels


@pytest.fixture(autouse=True)
def _restore_level():
    # main() also turns SIGTERM into KeyboardInterrupt; pytest's handler comes back.
    sigterm = signal.getsignal(signal.SIGTERM)
    yield
    log.set_verbosity(0)
    signal.signal(signal.SIGTERM, sigterm)


@pytest.mark.parametrize(
    "verbosity, shown",
    [(0, ["progress", "warning"]), (-1, ["warning"]), (1, ["debug", "progress", "warning"])],
)
def test_verbosity_decides_which_lines_reach_stderr(capsys, verbosity, shown):
    logger = log.get("harness.test")
    log.set_verbosity(verbosity)
    logger.debug("debug")
    log.progress(logger, "progress", 0.0)
    logger.warning("warning")
    lines = [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == shown


def test_progress_says_how_long_so_far(capsys, monkeypatch):
    monkeypatch.setattr(log.time, "monotonic", lambda: 100.0)
    log.progress(log.get("harness.test"), "3 Ray nodes alive", 79.4)
    assert capsys.readouterr().err == "3 Ray nodes alive (21s)\n"


def test_a_host_applications_root_handler_does_not_print_lines_twice():
    assert logging.getLogger(log.ROOT_LOGGER).propagate is False


@pytest.mark.parametrize(
    "flags, logged",
    [
        ([], ["wheelhouse: downloading"]),
        (["-q"], []),
        (["-v"], ["wheelhouse: downloading", "run: "]),
    ],
)
def test_a_verbs_progress_follows_its_flag_and_its_result_stays_on_stdout(
    monkeypatch, capsys, tmp_path, flags, logged
):
    """`python -m harness [-q|-v] wheelhouse` with pip's download faked: the
    progress line is on stderr unless -q, -v adds the command run, and the
    wheelhouse's path, the verb's result, is on stdout every time."""
    monkeypatch.setattr(wheels, "WHEELHOUSE_DIR", tmp_path)
    monkeypatch.setattr(wheels, "verify_ray_wheel", lambda house, release: house / "ray.whl")
    monkeypatch.setattr(
        proc.subprocess, "run", lambda args, **kwargs: subprocess.CompletedProcess(args, 0)
    )
    assert cli.main([*flags, "wheelhouse"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == len(logged), captured.err
    assert all(line.startswith(start) for line, start in zip(lines, logged, strict=True)), lines
    (house,) = captured.out.splitlines()
    assert house.startswith(str(tmp_path))
