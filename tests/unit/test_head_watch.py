"""watch_head_haproxy: the head's HAProxy processes as a history records
them, and the mark it leaves when its watch ends before it was stopped, so a
judge can tell "not watched" from "no reload". The watch's command is
faked: a ProcessWatch over lines a test writes. And a judge that reads the
mark: membership_churn's, on its saved run."""

import asyncio
import threading
import time
from pathlib import Path

from harness.cluster.boundary import ProcessWatch
from harness.experiment.history import History
from harness.scenarios.base import (
    HEAD_PIDS,
    HEAD_WATCH_ENDED,
    haproxy_starts,
    head_watch_ended,
    judge_runs,
    watch_head_haproxy,
)
from harness.scenarios.membership_churn import PIDS_SEEN, MembershipChurn
from harness.scenarios.streaming_drain import StreamingDrain
from harness.scenarios.websocket_drain import WebSocketDrain


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


def test_flags_on_churn_with_a_watch_that_ended_early_shows_nothing_about_reloads(tmp_path):
    saved = Path(__file__).parent / "saved_runs" / "membership_churn"
    histories = [History.load(f) for f in sorted(saved.glob("history-*.jsonl.gz"))]
    assert judge_runs(MembershipChurn(), histories, tmp_path / "whole").as_expected
    [flags_on] = [h for h in histories if h.meta["label"].endswith("flags on")]
    # Saved before the watch (HEAD_PIDS), it sampled the processes as PIDS_SEEN.
    first = flags_on.observed(PIDS_SEEN, "head")[0].time
    flags_on.observe(HEAD_WATCH_ENDED, None, first + 1.0, "head")
    outcome = judge_runs(MembershipChurn(), histories, tmp_path / "cut")
    assert not outcome.as_expected
    assert any("not watched through the churn" in f for f in outcome.findings)


def _saved(name: str, label: str) -> History:
    return History.load(Path(__file__).parent / "saved_runs" / name / f"history-{label}.jsonl.gz")


def test_streaming_drain_says_what_it_saw_before_its_watch_ended():
    history = _saved("streaming_drain", "2.60.0-stock")
    notice = next(e.time for e in history.events if e.fault == "spot_preemption")
    counted = StreamingDrain().judge_history(history).facts.started_after_notice
    assert isinstance(counted, int)
    history.observe(HEAD_WATCH_ENDED, None, notice + 0.5, "head")
    shown = StreamingDrain().judge_history(history).facts.started_after_notice
    assert shown == f"{counted} seen, not watched after the notice +0.5 s"


def test_websocket_drain_does_not_read_a_watch_that_ended_as_no_reload():
    history = _saved("websocket_drain", "2.60.0-stock")
    pids = history.observed(HEAD_PIDS, "head")
    history.events = [e for e in history.events if e not in pids[1:]]  # nothing after the first
    assert WebSocketDrain().judge_history(history).facts.phases["drain"].first_reload == "none"
    history.observe(HEAD_WATCH_ENDED, None, pids[0].time, "head")
    assert (
        "not watched after"
        in WebSocketDrain().judge_history(history).facts.phases["drain"].first_reload
    )
