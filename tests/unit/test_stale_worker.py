"""The stale-worker scenarios prime their connections on an HAProxy worker
that routes to both replicas, against a small server on 127.0.0.1 that
answers like the echo app behind a worker that has not reloaded yet."""

import asyncio
import json

import pytest

from harness.core.errors import HarnessError
from harness.experiment.history import History
from harness.scenarios.stale_worker import CONNS_PER_ATTEMPT, PRIME_ATTEMPTS, StaleWorkerDrain


async def _echo(replicas_for_connection):
    """A keep-alive server; its n-th connection is answered by the replica
    `replicas_for_connection(n)` names."""
    accepted = []

    async def handler(reader, writer):
        replica = replicas_for_connection(len(accepted))
        accepted.append(replica)
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                body = json.dumps({"replica": replica, "node": "n1"}).encode()
                writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode())
                writer.write(body)
                await writer.drain()
        except asyncio.IncompleteReadError:
            writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _prime(replicas_for_connection, history: History | None = None):
    scenario = StaleWorkerDrain(stale=6)
    scenario.prime_retry_s = 0.0
    history = History() if history is None else history

    async def main():
        server, port = await _echo(replicas_for_connection)
        try:
            conns = await scenario._prime(history, "127.0.0.1", port, 1000)
            for conn in conns:
                conn.close()
            return conns
        finally:
            server.close()

    return asyncio.run(main()), history


def test_primes_again_on_new_connections_until_they_reached_both_replicas():
    # The first 6 connections land on a worker that knows only replica "a".
    conns, history = _prime(lambda n: "a" if n < 6 else "ab"[n % 2])
    assert [c.number for c in conns] == [1000 + CONNS_PER_ATTEMPT + i for i in range(6)]
    primes = [r for r in history.requests if r.kind == "prime"]
    assert len(primes) == 12 and all(r.error is None for r in primes)
    reached_by_returned = {r.replica for r in primes if r.conn in {c.number for c in conns}}
    assert reached_by_returned == {"a", "b"}


def test_primes_once_when_the_worker_already_knows_both_replicas():
    conns, history = _prime(lambda n: "ab"[n % 2])
    assert [c.number for c in conns] == [1000 + i for i in range(6)]
    assert len(history.requests) == 6


def test_a_worker_that_never_reaches_both_replicas_is_a_clear_error_with_every_prime_kept():
    history = History()
    with pytest.raises(HarnessError, match="did not route the primes to both replicas"):
        _prime(lambda n: "a", history)
    assert len(history.requests) == PRIME_ATTEMPTS * 6
    assert len({r.conn for r in history.requests}) == PRIME_ATTEMPTS * 6


def test_more_stale_connections_than_an_attempts_numbers_is_refused():
    with pytest.raises(HarnessError, match="stale must be 1 to"):
        StaleWorkerDrain(stale=CONNS_PER_ATTEMPT + 1)
