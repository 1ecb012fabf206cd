"""The stale-worker scenarios: priming their connections on an HAProxy worker
that routes to both replicas, against a small server on 127.0.0.1 that
answers like the echo app behind a worker that has not reloaded yet; and
each event's facts, from a history alone."""

import asyncio
import json

import pytest

from harness.core.errors import HarnessError
from harness.experiment import checker
from harness.experiment.configs import ImageSpec, RunConfig
from harness.experiment.history import Event, History, Request
from harness.scenarios.base import HEAD_PIDS, HEAD_WATCH_ENDED, LOG_LINE
from harness.scenarios.stale_worker import (
    CONNS_PER_ATTEMPT,
    EVENT_CONNS,
    LATE_SENT,
    PRIME_ATTEMPTS,
    REOPENED,
    DrainWindowAdmission,
    StaleWorkerDrain,
    _per_event,
)

STALE = 6


async def _echo(answer):
    """A keep-alive server; `answer(n)` is the replica that serves its n-th
    connection, or None to close that connection without answering."""
    accepted = []

    async def handler(reader, writer):
        replica = answer(len(accepted))
        accepted.append(replica)
        try:
            while replica is not None:
                await reader.readuntil(b"\r\n\r\n")
                body = json.dumps({"replica": replica, "node": "n1"}).encode()
                writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
                writer.write(body)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _prime(answer, history: History | None = None):
    """The kept connections' numbers, whether each was open when returned,
    and the history of priming against `answer`."""
    scenario = StaleWorkerDrain(stale=STALE)
    scenario.prime_retry_s = 0.0
    history = History() if history is None else history

    async def main():
        server, port = await _echo(answer)
        try:
            # Bounded: a _prime that retried for ever fails here, not by hanging.
            conns = await asyncio.wait_for(scenario._prime(history, "127.0.0.1", port, 1000), 20)
            kept = [(c.number, c.is_open) for c in conns]
            for conn in conns:
                conn.close()
            return kept
        finally:
            server.close()

    kept = asyncio.run(main())
    assert all(is_open for _, is_open in kept), "the kept connections must be open"
    return [number for number, _ in kept], history


def _attempt(k: int) -> list[int]:
    return [1000 + k * CONNS_PER_ATTEMPT + i for i in range(STALE)]


def _both(n: int) -> str:
    return "ab"[n % 2]


def test_keeps_the_second_of_two_attempts_in_a_row_that_reached_both_replicas():
    kept, history = _prime(_both)
    assert kept == _attempt(1)
    assert len(history.requests) == 2 * STALE


def test_primes_again_while_the_worker_knows_only_one_replica():
    # The first two attempts land on a worker that knows only replica "a".
    kept, history = _prime(lambda n: "a" if n < 2 * STALE else _both(n))
    assert kept == _attempt(3)
    assert len(history.requests) == 4 * STALE and all(r.ok for r in history.requests)


def test_two_attempts_that_reached_both_must_be_in_a_row():
    # Both, then only "a", then both twice: the fourth attempt is kept.
    kept, _ = _prime(lambda n: "a" if STALE <= n < 2 * STALE else _both(n))
    assert kept == _attempt(3)


def test_an_attempt_with_a_failed_prime_does_not_count():
    # The first attempt's third connection is closed unanswered.
    kept, history = _prime(lambda n: None if n == 2 else _both(n))
    assert kept == _attempt(2)
    assert sum(1 for r in history.requests if r.error) == 1


def test_primes_without_a_replica_id_do_not_make_a_second_replica():
    kept, _ = _prime(lambda n: "" if n % 2 else "a")
    assert kept == _attempt(PRIME_ATTEMPTS - 1)


def test_a_worker_that_never_reaches_both_keeps_the_last_attempt_and_every_prime():
    kept, history = _prime(lambda n: "a")
    assert kept == _attempt(PRIME_ATTEMPTS - 1)
    assert len({r.conn for r in history.requests}) == PRIME_ATTEMPTS * STALE


@pytest.mark.parametrize(
    ("what", "counts"),
    [
        ("stale", {"stale": 1}),
        ("stale", {"stale": 101}),
        ("controls", {"controls": 401}),
        ("pins", {"pins": 101}),
    ],
)
def test_counts_that_do_not_fit_their_connection_numbers_are_refused(what, counts):
    with pytest.raises(HarnessError, match=f"{what} must be"):
        StaleWorkerDrain(**counts)


def _add_event(
    history: History,
    number: int,
    *,
    attempts=("ab", "ab"),
    stop_at: float | None = 2.0,
    reload_at: float | None = 2.4,
    reopened: int = 0,
    cut: bool = True,
) -> None:
    """Event `number`, 100 s after the one before, from t0: primes at t0-1
    by attempt, 0.1 s apart (each letter a prime's replica), the start mark
    at t0, replica "b" stopping at t0+`stop_at`, the head's HAProxy
    reloading at t0+`reload_at`, the late send at t0+5.5 with one stale
    request to each replica, the one to "b" cut unless not `cut`."""
    t0, base = 100.0 + 100.0 * number, number * EVENT_CONNS
    for k, replicas in enumerate(attempts):
        for i, replica in enumerate(replicas):
            at = t0 - 1.0 + 0.1 * k
            conn = base + k * CONNS_PER_ATTEMPT + i
            history.requests.append(Request("prime", at, at + 0.05, 200, None, conn, replica))
    history.add_event(Event(t0, "scale_down", "start", f"event {number}"))
    history.add_event(
        Event(t0 + 5.5, "scale_down", "mark", f"event {number}", {"label": LATE_SENT})
    )
    history.add_event(Event(t0 + 20.0, "scale_down", "end", f"event {number}"))
    stale = base + 600
    history.requests.append(Request("stale", t0 + 5.5, t0 + 13.0, 200, None, stale, "a"))
    if cut:
        history.requests.append(Request("stale", t0 + 5.5, t0 + 12.0, None, "reset", stale + 1))
    else:
        history.requests.append(Request("stale", t0 + 5.5, t0 + 13.0, 200, None, stale + 1, "b"))
    if stop_at is not None:
        line = "Stopping Replica(id='b', deployment='Echo')"
        history.observe(LOG_LINE, line, t0 + stop_at, "head")
    history.observe(HEAD_PIDS, [number, number + 1], t0 - 10.0, "head")
    if reload_at is not None:
        history.observe(HEAD_PIDS, [number + 1, number + 2], t0 + reload_at, "head")
    history.observe(REOPENED, reopened, t0 + 14.0, f"event {number}")


def _history(**event) -> History:
    history = History()
    _add_event(history, 0, **event)
    return history


def _unshown(history: History, late_window_s=(0.0, 5.0)) -> list[str]:
    [event] = _per_event(history, late_window_s)
    return event.unshown


def test_an_events_facts_come_from_its_rows_marks_and_log_lines():
    [event] = _per_event(_history())
    assert event.failed == 1 and event.stopping_completed == 0
    assert event.late_sent_at == pytest.approx(3.5)
    assert event.prime_attempts == 2 and event.primed_at == pytest.approx(-2.9)
    assert event.reloads_at == pytest.approx([0.4])
    assert event.unshown == []


def test_without_its_stop_line_an_event_says_it_does_not_know():
    history = _history(stop_at=None)
    [event] = _per_event(history)
    assert event.late_sent_at is None and event.stopping_completed is None
    assert event.reloads_at is None and event.failed == 1
    assert any("no Stopping Replica line" in why for why in _unshown(history))


def test_an_event_without_its_stop_line_does_not_take_the_next_ones():
    history = _history(stop_at=None)
    _add_event(history, 1)
    first, second = _per_event(history)
    assert first.late_sent_at is None
    assert second.late_sent_at == pytest.approx(3.5)


def test_a_stop_well_before_the_events_start_is_not_its_stop():
    history = _history()
    history.observe(LOG_LINE, "Stopping Replica(id='c', deployment='Echo')", 97.0, "head")
    [event] = _per_event(history)
    assert event.late_sent_at == pytest.approx(3.5)


@pytest.mark.parametrize(
    ("event", "why"),
    [
        ({"attempts": ("ab",)}, "did not each reach both replicas"),
        ({"attempts": ("ab", "ab", "aa")}, "did not each reach both replicas"),
        ({"attempts": ("aa", "ab")}, "did not each reach both replicas"),
        ({"attempts": ("ab", "ab", "ac")}, "the replica that stopped served none"),
        ({"reopened": 3}, "3 stale connections were reopened"),
        ({"reload_at": None}, "did not reload between the stop and the late send"),
        ({"reload_at": 6.0}, "did not reload between the stop and the late send"),
        # Stamped a little before the start (a head's clock behind), the stop
        # does not make a reload during the kept primes count.
        ({"stop_at": -0.5, "reload_at": -0.88}, "did not reload between the stop"),
        # A reload just before the stop line is not the one that retires it.
        ({"reload_at": 1.9}, "did not reload between the stop"),
    ],
)
def test_an_event_not_shown_to_reach_the_stopping_replica_says_why(event, why):
    assert any(why in reason for reason in _unshown(_history(**event))), why


def test_late_requests_outside_the_scenarios_window_are_not_shown():
    assert any("not in 5-10 s" in why for why in _unshown(_history(), (5.0, 10.0)))


def test_without_a_record_of_the_heads_haproxy_nothing_is_shown_about_its_reloads():
    history = _history()
    history.events = [e for e in history.events if e.fault != HEAD_PIDS]
    assert "the head's HAProxy processes were not recorded" in _unshown(history)


def test_a_watch_that_ended_before_the_late_send_is_not_taken_for_no_reload():
    history = _history(reload_at=None)
    history.observe(HEAD_WATCH_ENDED, None, 101.0, "head")
    assert _unshown(history) == ["the head's HAProxy processes were not watched to the late send"]


def test_a_watch_that_ended_after_recording_the_reload_shows_it():
    history = _history()
    history.observe(HEAD_WATCH_ENDED, None, 103.0, "head")
    assert _unshown(history) == []


def test_late_requests_after_the_window_are_not_shown():
    assert any("not in 0-3 s" in why for why in _unshown(_history(), (0.0, 3.0)))


def test_each_scenario_checks_the_late_send_against_its_own_window():
    # Sent 3.5 s after the stop: inside the drain window, as drain_window_admission
    # wants, and too early for stale_worker_drain.
    for scenario, shown in ((DrainWindowAdmission(), True), (StaleWorkerDrain(), False)):
        run = scenario.judge(RunConfig(ImageSpec("2.60.0", "stock")), _history())
        assert run.checks[0][1] is shown, scenario.name


def test_with_no_stop_line_its_reloads_read_unknown():
    _, run = _judged(stop_at=None)
    assert run.facts.reloads == ["?"]


def _judged(**event):
    scenario = DrainWindowAdmission()
    history = _history(**event)
    run = scenario.judge(RunConfig(ImageSpec("2.60.0", "stock")), history)
    run.verdict = checker.check(history)
    return scenario, run


def test_an_event_not_shown_fails_the_runs_check():
    _, run = _judged(attempts=("ab",))
    [(check, held)] = run.checks
    assert not held and "event 1: its last two prime attempts" in check
    _, run = _judged()
    assert run.checks[0][1]


def test_an_unshown_event_fails_the_scenario_without_blaming_a_baseline_that_reproduced():
    scenario, stock = _judged()
    _, patched = _judged(attempts=("ab",), cut=False)
    assert patched.verdict.failures == 0
    ok, findings = scenario.expect({"stock": stock, "patched": patched})
    assert not ok
    assert "reproduced in every event" in findings[0]
    assert any("those events prove nothing" in f for f in findings)
    assert not any("did not fail in every event" in f for f in findings)
