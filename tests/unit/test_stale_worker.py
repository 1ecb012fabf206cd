"""The stale-worker scenarios: priming their connections on an HAProxy worker
that routes to both replicas, against a small server on 127.0.0.1 that
answers like the echo app behind a worker that has not reloaded yet; and
each event's facts, from a history alone."""

import asyncio
import json

import pytest

from harness.core.errors import HarnessError
from harness.experiment.history import Event, History, Request
from harness.scenarios.base import HEAD_PIDS, LOG_LINE
from harness.scenarios.stale_worker import (
    CONNS_PER_ATTEMPT,
    LATE_SENT,
    PRIME_ATTEMPTS,
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
    """The kept connections' numbers and the history of priming against `answer`."""
    scenario = StaleWorkerDrain(stale=STALE)
    scenario.prime_retry_s = 0.0
    history = History() if history is None else history

    async def main():
        server, port = await _echo(answer)
        try:
            # Bounded: a _prime that retried for ever fails here, not by hanging.
            conns = await asyncio.wait_for(scenario._prime(history, "127.0.0.1", port, 1000), 20)
            for conn in conns:
                conn.close()
            return [c.number for c in conns]
        finally:
            server.close()

    return asyncio.run(main()), history


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


def _history(*, stop_line: bool = True, attempts=("ab", "ab")) -> History:
    """One event at t=100: primes by attempt (each letter a prime's replica),
    the stop at 102, the late send at 105.5, a stale request to each replica,
    the one to the stopping replica "b" cut; HAProxy reloads at 99 and 102.4."""
    history = History()
    for k, replicas in enumerate(attempts):
        for i, replica in enumerate(replicas):
            history.requests.append(
                Request(
                    "prime",
                    99.0 + k * 0.1,
                    99.05,
                    200,
                    None,
                    0 + k * CONNS_PER_ATTEMPT + i,
                    replica,
                    "n1",
                )
            )
    history.add_event(Event(100.0, "scale_down", "start", "event 0"))
    history.add_event(Event(105.5, "scale_down", "mark", "event 0", {"label": LATE_SENT}))
    history.add_event(Event(120.0, "scale_down", "end", "event 0"))
    history.requests.append(Request("stale", 105.5, 113.0, 200, None, 0, "a", "n1"))
    history.requests.append(Request("stale", 105.5, 112.0, None, "reset", 1, None, None))
    if stop_line:
        history.observe(LOG_LINE, "Stopping Replica(id='b', deployment='Echo')", 102.0, "head")
    for t, pids in ((90.0, [1]), (99.0, [1, 2]), (102.4, [2, 3])):
        history.observe(HEAD_PIDS, pids, t, "head")
    return history


def test_an_events_facts_come_from_its_rows_marks_and_log_lines():
    [event] = _per_event(_history())
    assert event.failed == 1 and event.stopping_completed == 0
    assert event.late_sent_at == pytest.approx(3.5)
    assert event.prime_attempts == 2 and event.primed_on_both
    assert event.primed_at == pytest.approx(-2.9)
    assert event.reloads_at == pytest.approx([-3.0, 0.4])


def test_without_its_stop_line_an_event_says_it_does_not_know():
    [event] = _per_event(_history(stop_line=False))
    assert event.late_sent_at is None and event.stopping_completed is None
    assert event.failed == 1


def test_one_attempt_or_a_last_one_on_one_replica_is_not_primed_on_both():
    assert not _per_event(_history(attempts=("ab",)))[0].primed_on_both
    assert not _per_event(_history(attempts=("ab", "ab", "aa")))[0].primed_on_both
