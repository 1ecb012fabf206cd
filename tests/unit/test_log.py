"""The verbosity switch: progress lines by default, none with -q, debug with -v."""

import logging

import pytest

from harness.core import log


@pytest.fixture(autouse=True)
def _restore_level():
    yield
    log.set_verbosity(0)


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
