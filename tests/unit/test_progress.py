"""core/progress.py driven by a fake clock: what each line says (time so far,
what is running, the share of the plan done, the time left), how often a line
is printed when stderr is not a terminal, the live line when it is, and the
last line when the run ends."""

from __future__ import annotations

import logging
import sys
import threading

import pytest

from harness.core import log, progress
from harness.core.progress import Progress, duration

CLEAR = "\r\x1b[K"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _hand_ticks(monkeypatch):
    # The ticker thread runs on the real clock; these tests tick by hand.
    monkeypatch.setattr(progress, "REDRAW_S", 3600.0)
    yield
    log.set_verbosity(0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_durations_read_to_the_second_under_an_hour_and_to_the_minute_above():
    assert [duration(s) for s in (0, 42.4, 60, 724, 3599, 3600, 3725, 7380)] == [
        "0s",
        "42s",
        "1m00s",
        "12m04s",
        "59m59s",
        "1h00m",
        "1h02m",
        "2h03m",
    ]


def test_each_line_says_time_so_far_what_runs_the_share_done_and_the_time_left(clock, capsys):
    p = Progress("bench-health", 400, tty=False, clock=clock)
    clock.now += 20
    p.begin("size 16: deploying 2 x 16 replicas")
    clock.now += 60
    p.begin("size 16, repeat 1/2: pull", 100)
    clock.now += 40
    p.tick()
    assert err_lines(capsys) == [
        # Nothing planned has begun: the time left is the plan.
        "bench-health [20s elapsed, 0% of plan, about 6m40s left] "
        "size 16: deploying 2 x 16 replicas",
        "bench-health [1m20s elapsed, 0% of plan, about 6m40s left] size 16, repeat 1/2: pull",
        # The periodic line says how long the piece has run, of its plan.
        "bench-health [2m00s elapsed, 10% of plan, about 6m00s left] "
        "size 16, repeat 1/2: pull (40s of 1m40s)",
    ]


def test_the_time_left_is_the_plan_left_at_the_pace_so_far(clock):
    p = Progress("bench", 300, tty=False, clock=clock)
    assert p.left_s() == 300  # no pace yet: the plan itself
    p.begin("a cluster starting")  # unplanned, so not in the pace
    clock.now += 500
    p.begin("A", 100)
    clock.now += 150  # A took 150 s of its planned 100 and ended
    p.begin("B", 100)
    assert p.done_s() == 100
    assert p.left_s() == pytest.approx(200 * 150 / 100)
    clock.now += 50  # B, running, counts the 50 s it has run
    assert p.done_s() == 150
    assert p.left_s() == pytest.approx(150 * 200 / 150)


def test_pieces_side_by_side_count_together(clock):
    """The soak's runs two at once: 600 s of load each, four runs."""
    p = Progress("soak", 4 * 600, tty=False, clock=clock)
    p.begin("run 1/4: under load", 600, key="1")
    p.begin("run 2/4: under load", 600, key="2")
    clock.now += 300
    assert p.done_s() == 600
    assert p.left_s() == pytest.approx(900)  # 1800 s of plan at two per second
    assert "run 1/4: under load (5m00s of 10m00s); run 2/4: under load (5m00s of 10m00s)" in (
        p.line()
    )
    p.end(key="1")
    assert "run 1/4" not in p.line()


def test_a_piece_past_its_plan_counts_no_more_and_the_line_says_so(clock):
    p = Progress("bench-stop", 10, tty=False, clock=clock)
    p.begin("round 1/1", 10)
    clock.now += 25
    assert p.done_s() == 10
    assert p.line() == "bench-stop [25s elapsed, 100% of plan, finishing] round 1/1 (25s of 10s)"


def test_not_a_terminal_a_line_at_most_every_n_seconds_and_on_each_phase_change(clock, capsys):
    p = Progress("soak", 1800, tty=False, clock=clock, every_s=30)
    p.begin("run 1/3: under load", 600)
    for _ in range(29):  # a tick a second, as the ticker thread does
        clock.now += 1
        p.tick()
    assert len(err_lines(capsys)) == 1  # the phase line only
    clock.now += 1
    p.tick()
    assert len(err_lines(capsys)) == 1  # 30 s on: one more
    clock.now += 1
    p.begin("run 2/3: under load", 600)  # a phase change is printed at once
    clock.now += 1
    p.tick()
    (line,) = err_lines(capsys)
    assert line == "soak [31s elapsed, 33% of plan, about 1m02s left] run 2/3: under load"
    clock.now += 28
    p.tick()
    assert err_lines(capsys) == []  # 29 s after the phase line
    clock.now += 1
    p.tick()
    assert len(err_lines(capsys)) == 1


def test_a_last_line_says_how_long_the_run_took(clock, capsys):
    p = Progress("bench-keepalive", 60, tty=False, clock=clock)
    p.begin("short, 8 clients", 60)
    clock.now += 425
    p.close()
    p.close()  # once only
    assert err_lines(capsys)[-1:] == ["bench-keepalive: done in 7m05s"]
    p.tick()
    assert err_lines(capsys) == []


def test_a_run_that_raises_says_where_it_stopped(clock, capsys):
    with pytest.raises(KeyboardInterrupt):
        with Progress("bench-health", 400, tty=False, clock=clock) as p:
            p.begin("size 32, repeat 2/3: push", 39)
            clock.now += 12
            raise KeyboardInterrupt
    assert err_lines(capsys)[-1] == (
        "bench-health: stopped after 12s (KeyboardInterrupt), "
        "during size 32, repeat 2/3: push (12s of 39s)"
    )


def test_on_a_terminal_a_live_line_under_the_others_cut_to_its_width(clock, capsys, monkeypatch):
    monkeypatch.setattr(progress, "_columns", lambda: 60)
    other = log.get("harness.cluster.test")
    with Progress("soak", 1200, tty=True, clock=clock) as p:
        p.begin("run 1/2 (spot-notice ladder #1): under load", 600)
        clock.now += 5
        p.tick()
        other.info("soak: spot notice for worker-1 at +5s")
        clock.now += 1
        p.tick()
        clock.now += 100  # no periodic lines on a terminal, only the redraws
    err = capsys.readouterr().err
    assert {len(w) for w in err.split(CLEAR) if not w.endswith("\n")} <= {0, 59}
    # Each write begins by clearing the line; split there to read them one by one.
    writes = [w for w in err.split(CLEAR) if w]
    assert writes == [
        "soak [0s elapsed, 0% of plan, about 20m00s left] run 1/2 (spot-notice ladder #1): "
        "under load\n",
        # The live line, cut to the width less one: the figures first, so they stay.
        "soak [0s elapsed, 0% of plan, about 20m00s left] run 1/2 (s",
        "soak [5s elapsed, 0% of plan, about 19m55s left] run 1/2 (s",  # redrawn
        "soak: spot notice for worker-1 at +5s\n",  # cleared first, so on a line of its own
        "soak [5s elapsed, 0% of plan, about 19m55s left] run 1/2 (s",  # and back under it
        "soak [6s elapsed, 0% of plan, about 19m54s left] run 1/2 (s",
        "soak: done in 1m46s\n",  # the live line cleared, not drawn again
    ]
    # Out of the with, the harness's handler clears nothing any more.
    other.info("after")
    assert capsys.readouterr().err == "after\n"


def test_quiet_prints_no_progress_live_or_not(clock, capsys):
    log.set_verbosity(-1)
    for tty in (True, False):
        p = Progress("bench-stop", 20, tty=tty, clock=clock, every_s=1)
        p.begin("round 1/2", 10)
        clock.now += 5
        p.tick()
        p.close()
    assert capsys.readouterr().err == ""


def test_a_log_line_is_cleared_and_written_in_one_step_the_ticker_waits(clock, capsys):
    """The ticker redrawing between the clearing and the writing would leave
    the log line at the end of the live line: here it tries to, from inside
    the writing (the message is formatted there), and must wait."""
    other = log.get("harness.cluster.test")
    ticks: list[threading.Thread] = []

    class TickWhileWritten:
        def __str__(self) -> str:
            ticks.append(threading.Thread(target=p.tick))
            ticks[0].start()
            ticks[0].join(0.2)  # done at once unless the write holds the lock
            return "spot notice"

    with Progress("soak", 100, tty=True, clock=clock) as p:
        p.begin("run 1/1", 100)
        other.info("soak: %s", TickWhileWritten())
        ticks[0].join()
    writes = capsys.readouterr().err.split(CLEAR)
    assert "soak: spot notice\n" in writes  # on a line of its own
    live = "soak [0s elapsed, 0% of plan, about 1m40s left] run 1/1 (0s of 1m40s)"
    assert writes.count(live) == 3  # under the phase line, under the notice, the tick


def test_runs_in_threads_of_their_own_report_side_by_side(clock):
    """Two runs, each its own key, begin, end and tick at once while a third
    thread reads: the sums hold and nothing trips over the other threads."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as can be, to meet a race
    log.set_verbosity(-1)  # the lines are built but not printed
    p = Progress("soak", 1.0, tty=False, clock=clock, every_s=0)
    rounds = 3000
    errors: list[BaseException] = []
    stop = threading.Event()

    def run(key: str) -> None:
        try:
            for n in range(rounds):
                p.begin(f"{key} {n}", 1.0, key=key)
                p.tick()
                p.end(key=key)
        except BaseException as error:
            errors.append(error)

    def read() -> None:
        try:
            while not stop.is_set():
                p.line(), p.done_s(), p.left_s()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(key,)) for key in ("a", "b")]
    reader = threading.Thread(target=read)
    try:
        for thread in [*threads, reader]:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        reader.join()
        sys.setswitchinterval(interval)
    assert errors == []
    assert p.done_s() == 2 * rounds * 1.0


def hooked() -> list[logging.Handler]:
    """The harness's handlers that a Progress still has a hand in."""
    return [h for h in logging.getLogger(log.ROOT_LOGGER).handlers if "handle" in vars(h)]


def test_a_second_ctrl_c_while_the_ticker_stops_still_gets_the_last_line(clock, capsys):
    def interrupted(timeout=None):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with Progress("soak", 100, tty=True, clock=clock) as p:
            p.begin("run 1/1", 100)
            p._ticker.join = interrupted  # the second Ctrl-C, while the ticker is joined
            raise KeyboardInterrupt
    assert capsys.readouterr().err.endswith(
        "soak: stopped after 0s (KeyboardInterrupt), during run 1/1 (0s of 1m40s)\n"
    )
    assert hooked() == []
    log.get("harness.cluster.test").info("after")
    assert capsys.readouterr().err == "after\n"  # no live line cleared


def test_a_last_line_that_cannot_be_written_leaves_the_handlers_as_they_were(clock, capsys):
    def broken(error=None):
        raise OSError("stderr is gone")

    with pytest.raises(OSError, match="stderr is gone"):
        with Progress("soak", 100, tty=True, clock=clock) as p:
            p.begin("run 1/1", 100)
            p.close = broken
    assert hooked() == []
    capsys.readouterr()
    log.get("harness.cluster.test").info("after")
    assert capsys.readouterr().err == "after\n"
