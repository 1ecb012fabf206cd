"""watch_head_haproxy: the head's HAProxy processes as a history records
them, and the mark it leaves when its watch ends before it was stopped, so a
judge can tell "not watched" from "no reload". The watch's command is
faked: a ProcessWatch over lines a test writes."""

import asyncio
import threading
import time

from harness.cluster.boundary import ProcessWatch
from harness.experiment.history import History
from harness.scenarios.base import (
    HEAD_PIDS,
    HEAD_WATCH_ENDED,
    haproxy_starts,
    head_watch_ended,
    watch_head_haproxy,
)


class _Head:
    ip = "127.0.0.1"


class _Cluster:
    """Just what watch_head_haproxy asks of a cluster."""

    head = _Head()

    def __init__(self, lines) -> None:
        self.lines, self.stopped = lines, threading.Event()

    def watch_processes(self, node, name, every_s) -> ProcessWatch:
        return ProcessWatch(self.lines(self.stopped), self.stopped.set)


def _watch(lines, until) -> History:
    """Watch `lines` until `until(history)` holds (5 s at most), then stop."""
    history = History()

    async def main():
        stop = asyncio.Event()
        task = asyncio.create_task(watch_head_haproxy(_Cluster(lines), history, stop))
        deadline = time.monotonic() + 5
        while not until(history) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    return history


def _ended(history: History) -> bool:
    return head_watch_ended(history) is not None


def test_a_watch_that_fails_midway_keeps_its_record_and_marks_the_end():
    def lines(stopped):
        yield "at 1.0 10"
        yield "at 2.0 10 11"
        raise RuntimeError("the job's log stream closed")

    history = _watch(lines, _ended)
    assert [e.detail["value"] for e in history.observed(HEAD_PIDS, "head")] == [[10], [10, 11]]
    assert haproxy_starts(history) == [(2.0, {11})]
    assert head_watch_ended(history) is not None


def test_a_watch_whose_command_ends_early_marks_the_end():
    def lines(stopped):
        yield "at 1.0 10"

    assert _ended(_watch(lines, _ended))


def test_a_watch_that_was_stopped_leaves_no_end_mark():
    def lines(stopped):
        yield "at 1.0 10"
        stopped.wait(5)

    history = _watch(lines, lambda h: h.observed(HEAD_PIDS, "head"))
    assert len(history.observed(HEAD_PIDS, "head")) == 1
    assert history.observed(HEAD_WATCH_ENDED, "head") == []
