"""The HTTP client's error classes and the open loop's schedule, against small
asyncio servers on 127.0.0.1 that misbehave on purpose."""

import asyncio
import json
import socket
import time

import pytest

from harness.history import History
from harness.load import HTTPConnection, LoadSpec, Mix, open_loop

OK_BODY = json.dumps({"replica": "r1", "node": "n1"}).encode()


async def _serve(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _read_request(reader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def _response(status: int, body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


async def _keepalive_ok(reader, writer):
    while True:
        try:
            await _read_request(reader)
        except asyncio.IncompleteReadError:
            break
        writer.write(_response(200, OK_BODY))
        await writer.drain()
    writer.close()


def run(coro):
    return asyncio.run(coro)


def _one_request(handler, path: str = "/", timeout_s: float = 5):
    """One GET against a server that runs `handler` per connection."""
    async def main():
        server, port = await _serve(handler)
        row = await HTTPConnection("127.0.0.1", port, 0).get(path, "short", timeout_s)
        server.close()
        return row

    return run(main())


def test_success_records_replica_and_reuses_the_connection():
    async def main():
        accepted = []

        async def handler(reader, writer):
            accepted.append(1)
            await _keepalive_ok(reader, writer)

        server, port = await _serve(handler)
        conn = HTTPConnection("127.0.0.1", port, 7)
        rows = [await conn.get("/", "short", 5) for _ in range(3)]
        conn.close()
        server.close()
        return rows, len(accepted)

    rows, connections = run(main())
    assert all(r.ok and r.replica == "r1" and r.node == "n1" and r.conn == 7 for r in rows)
    assert connections == 1


def test_refused():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    row = run(HTTPConnection("127.0.0.1", port, 0).get("/", "short", 5))
    assert (row.status, row.error) == (None, "refused")


def test_closed_before_response_is_a_reset():
    async def handler(reader, writer):
        await _read_request(reader)
        writer.close()

    row = _one_request(handler)
    assert (row.status, row.error) == (None, "reset")


def test_body_cut_short_is_truncated():
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    row = _one_request(handler)
    assert (row.status, row.error) == (200, "truncated")


def test_slow_server_is_a_timeout():
    async def handler(reader, writer):
        await _read_request(reader)
        await asyncio.sleep(5)

    row = _one_request(handler, timeout_s=0.3)
    assert (row.status, row.error) == (None, "timeout")
    assert 0.25 < row.latency < 2


@pytest.mark.parametrize("status", [408, 500, 503])
def test_http_errors_are_their_status(status):
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(_response(status, b"no"))
        await writer.drain()

    row = _one_request(handler)
    assert (row.status, row.error) == (status, str(status))


def test_chunked_stream_is_read_whole():
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for line in (OK_BODY + b"\n", b'{"chunk": 1}\n'):
            writer.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    row = _one_request(handler, "/stream")
    assert row.ok and row.replica == "r1"


def test_open_loop_keeps_its_schedule_and_stops_by_itself():
    async def main():
        server, port = await _serve(_keepalive_ok)
        history = History()
        started = time.time()
        await open_loop("127.0.0.1", port, LoadSpec(rate=200, duration_s=1.0, connections=8,
                                                    mix=Mix()), history)
        server.close()
        return history, time.time() - started

    history, took = run(main())
    assert 190 <= len(history.requests) <= 200
    assert all(r.ok for r in history.requests)
    assert took < 3
    lags = sorted(r.start - r.scheduled for r in history.requests)
    assert lags[len(lags) // 2] < 0.05


def test_open_loop_honours_the_request_cap():
    async def main():
        server, port = await _serve(_keepalive_ok)
        history = History()
        await open_loop("127.0.0.1", port, LoadSpec(rate=500, duration_s=10, max_requests=25),
                        history)
        server.close()
        return history

    assert len(run(main()).requests) == 25
