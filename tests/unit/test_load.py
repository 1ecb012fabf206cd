"""The HTTP client's error classes and the open loop's schedule, against small
asyncio servers on 127.0.0.1 that misbehave on purpose."""

import asyncio
import json
import socket
import time

import pytest

from harness.experiment.history import History
from harness.experiment.load import (
    HTTPConnection,
    LoadSpec,
    Mix,
    closed_loop,
    open_loop,
    open_loop_processes,
    send,
    websocket_session,
)

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
        await open_loop(
            "127.0.0.1", port, LoadSpec(rate=200, duration_s=1.0, connections=8, mix=Mix()), history
        )
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
        await open_loop(
            "127.0.0.1", port, LoadSpec(rate=500, duration_s=10, max_requests=25), history
        )
        server.close()
        return history

    assert len(run(main()).requests) == 25


def test_open_loop_split_over_processes_is_the_one_schedule_with_one_row_each():
    """Two processes, one schedule: their requests interleave (due times 1/rate
    apart across both), every ticket has exactly one row, the rows name each
    process's own connections, and the errors are the same classes."""

    async def slow_then_ok(reader, writer):
        await _read_request(reader)
        writer.write(_response(503, b"busy"))
        await writer.drain()
        await _keepalive_ok(reader, writer)

    async def main():
        server, port = await _serve(slow_then_ok)
        history = History()
        spec = LoadSpec(rate=100, duration_s=1.0, connections=4, mix=Mix())
        await open_loop_processes("127.0.0.1", port, spec, history, processes=2)
        server.close()
        return history

    history = run(main())
    assert history.scheduled == len(history.requests) == 100
    assert history.record_gap() is None
    assert sorted(r.id for r in history.requests) == list(range(100))
    dues = sorted(r.scheduled for r in history.requests)
    gaps = [b - a for a, b in zip(dues, dues[1:], strict=False)]
    assert min(gaps) == pytest.approx(0.01, abs=1e-6)
    assert max(gaps) == pytest.approx(0.01, abs=1e-6)
    # Two connections each (4 split over 2), numbered apart per process.
    assert {r.conn for r in history.requests} == {0, 1, 100_000, 100_001}
    # Each connection's first answer is the server's 503.
    assert sum(r.error == "503" for r in history.requests) == 4
    assert sum(r.ok for r in history.requests) == 96


def test_open_loop_split_over_processes_honours_the_request_cap():
    async def main():
        server, port = await _serve(_keepalive_ok)
        history = History()
        spec = LoadSpec(rate=500, duration_s=10, max_requests=25)
        await open_loop_processes("127.0.0.1", port, spec, history, processes=3)
        server.close()
        return history

    history = run(main())
    assert len(history.requests) == history.scheduled == 25


# --- the record is complete: one row per scheduled request, whatever the server does


def _open_loop(
    handler,
    requests: int = 5,
    connections: int = 2,
    timeout_s: float = 10.0,
    cancel_after_s: float | None = None,
) -> History:
    """`requests` scheduled over 0.25 s against a server running `handler`.

    The default timeout is far above any answer's time so that a busy CI
    machine cannot turn a test of another failure class into a timeout; the
    tests of timeouts pass their own."""

    async def main():
        server, port = await _serve(handler)
        history = History()
        spec = LoadSpec(
            rate=requests / 0.25, duration_s=0.25, connections=connections, timeout_s=timeout_s
        )
        load = asyncio.create_task(open_loop("127.0.0.1", port, spec, history))
        if cancel_after_s is None:
            await load
        else:
            await asyncio.sleep(cancel_after_s)
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
        server.close()
        return history

    history = run(main())
    assert history.scheduled == requests
    assert len(history.requests) == requests and history.record_gap() is None
    assert sorted(r.id for r in history.requests) == list(range(requests))
    return history


def _answer(data: bytes, then_hang: bool = False):
    async def handler(reader, writer):
        try:
            while True:
                await _read_request(reader)
                writer.write(data)
                await writer.drain()
                if then_hang:
                    await asyncio.sleep(30)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    return handler


def _classes(history: History) -> set:
    return {r.error for r in history.requests}


@pytest.mark.parametrize(
    "name, response, detail",
    [
        (
            "head over 64 KiB",
            b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
            "LimitOverrunError",
        ),
        ("garbage status line", b"GARBAGE\r\n\r\n", "not an HTTP/1.x status line"),
        (
            "non-numeric status",
            b"HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n",
            "not an HTTP/1.x status line",
        ),
        (
            "bad chunk size",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n",
            "bad chunk size",
        ),
        (
            "non-numeric Content-Length",
            b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
            "bad Content-Length",
        ),
    ],
)
def test_invalid_http_is_a_recorded_protocol_failure(name, response, detail):
    history = _open_loop(_answer(response))
    assert _classes(history) == {"protocol"}, name
    assert all(detail in r.detail for r in history.requests), [r.detail for r in history.requests]


def test_a_body_longer_than_its_content_length_corrupts_the_next_answer():
    # The head promises 5 bytes less than the body that follows it.
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(OK_BODY) - 5}\r\n\r\n".encode()
    history = _open_loop(_answer(head + OK_BODY), connections=1)
    first, *rest = sorted(history.requests, key=lambda r: r.id)
    assert first.error is None
    # The leftover bytes are read as the next response's status line.
    assert "protocol" in {r.error for r in rest}


def test_a_body_shorter_than_its_content_length_is_truncated():
    history = _open_loop(
        _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf", then_hang=True),
        timeout_s=0.5,
        connections=5,
    )
    assert _classes(history) == {"truncated"}


def test_head_then_hang_is_truncated():
    history = _open_loop(
        _answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", then_hang=True),
        timeout_s=0.5,
        connections=5,
    )
    assert _classes(history) == {"truncated"}
    assert all(r.status == 200 for r in history.requests)


def test_closed_mid_chunk_is_truncated():
    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly-half")
        await writer.drain()
        writer.close()

    assert _classes(_open_loop(handler)) == {"truncated"}


def test_never_answers_is_a_timeout_and_the_wait_for_a_connection_counts():
    async def handler(reader, writer):
        await asyncio.sleep(30)

    started = time.time()
    history = _open_loop(handler, connections=1, timeout_s=0.5)
    assert _classes(history) == {"timeout"}
    # One connection, held by each request until its timeout: the later ones
    # spend most of theirs waiting for it, and still end within it of when
    # they were due (not 5 x 0.5 s after the first).
    assert all(r.end <= r.scheduled + 0.5 + 0.2 for r in history.requests)
    assert time.time() - started < 3


def test_requests_running_when_the_run_ends_are_unfinished():
    async def handler(reader, writer):
        await asyncio.sleep(30)

    history = _open_loop(handler, connections=2, timeout_s=30, cancel_after_s=0.5)
    assert _classes(history) == {"unfinished"}
    assert sum("never sent" in r.detail for r in history.requests) == 3


def test_an_unexpected_client_exception_is_recorded_with_its_text(monkeypatch):
    async def broken(self, status, headers):
        raise RuntimeError("a bug in the client")

    monkeypatch.setattr(HTTPConnection, "_read_body", broken)
    history = _open_loop(_answer(_response(200, OK_BODY)))
    assert _classes(history) == {"client"}
    assert all(r.detail == "RuntimeError: a bug in the client" for r in history.requests)


@pytest.mark.parametrize("size", [b"0x2", b"+2", b"-1", b"1_0"])
def test_a_chunk_size_that_is_not_hex_digits_is_protocol(size):
    history = _open_loop(
        _answer(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\nab\r\n0\r\n\r\n"
        )
    )
    assert _classes(history) == {"protocol"}


def test_valid_framing_variants_are_read_and_keep_the_connection():
    """Trailers, an interim 100 before the answer, `Chunked` in any case: all
    valid, all read whole, on one reused connection."""
    body = b"{}\n"
    answers = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n"
        + body
        + b"\r\n0\r\nX-Trailer: 1\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n" + _response(200, body),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\n" + body + b"\r\n0\r\n\r\n",
    ]
    accepted = []

    async def handler(reader, writer):
        accepted.append(1)
        for answer in answers:
            await _read_request(reader)
            writer.write(answer)
            await writer.drain()
        await asyncio.sleep(1)

    async def main():
        server, port = await _serve(handler)
        conn = HTTPConnection("127.0.0.1", port, 0)
        rows = [await conn.get("/", "short", 2) for _ in answers]
        server.close()
        return rows

    rows = run(main())
    assert [r.status for r in rows] == [200, 200, 200] and all(r.ok for r in rows), rows
    assert len(accepted) == 1


@pytest.mark.parametrize(
    "head", [b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\n", b"HTTP/1.0 200 OK\r\n"]
)
def test_a_connection_the_server_closes_is_not_reused(head):
    """The next request opens a new connection instead of being charged a reset."""

    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(head + f"Content-Length: {len(OK_BODY)}\r\n\r\n".encode() + OK_BODY)
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.close()

    async def main():
        server, port = await _serve(handler)
        conn = HTTPConnection("127.0.0.1", port, 0)
        rows = [await conn.get("/", "short", 2)]
        await asyncio.sleep(0.4)
        rows.append(await conn.get("/", "short", 2))
        server.close()
        return rows

    assert all(r.ok for r in run(main()))


def test_an_idle_connection_the_server_closed_is_replaced_before_sending():
    """A keep-alive connection the server closed while it sat idle (HAProxy's
    soft-stop, a keep-alive timeout) is seen closed and replaced, as pooled
    clients do, rather than reused and charged a reset."""

    async def handler(reader, writer):
        await _read_request(reader)
        writer.write(_response(200, OK_BODY))  # keep-alive, then closed while idle
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.close()

    async def main():
        server, port = await _serve(handler)
        conn = HTTPConnection("127.0.0.1", port, 0)
        first = await conn.get("/", "short", 2)
        await asyncio.sleep(0.4)
        second = await conn.get("/", "short", 2)
        server.close()
        return first, second, conn.connects

    first, second, connects = run(main())
    assert first.ok and second.ok, (first, second)
    assert connects == 2


def test_closed_loop_returns_the_connections_it_opened():
    async def main():
        server, port = await _serve(_keepalive_ok)
        history = History()
        opened = await closed_loop("127.0.0.1", port, 12, 3, history, kind="probe")
        server.close()
        return opened, history

    opened, history = run(main())
    assert opened == 3
    assert len(history.requests) == 12 and {r.kind for r in history.requests} == {"probe"}


# --- cancellation: recorded, and still a cancellation


async def _silent(reader, writer):
    await asyncio.sleep(30)


def test_a_caller_timeout_around_send_still_times_out_and_the_row_is_kept():
    async def main():
        server, port = await _serve(_silent)
        history = History()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await send(history, HTTPConnection("127.0.0.1", port, 0), "/", "short", 30)
        server.close()
        return history

    history = run(main())
    assert history.record_gap() is None and _classes(history) == {"unfinished"}


def test_a_cancelled_closed_loop_stops_and_records_what_it_had_started():
    async def main():
        server, port = await _serve(_silent)
        history = History()
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(closed_loop("127.0.0.1", port, 20, 2, history), 0.5)
        server.close()
        return history, time.monotonic() - started

    history, took = run(main())
    assert took < 2
    assert history.scheduled == 2 and history.record_gap() is None


def test_a_polling_loop_of_gets_ends_with_asyncio_run():
    """asyncio.run cancels what is left when its main coroutine ends; a task
    looping over get() must let that cancellation end it."""

    async def main():
        server, port = await _serve(_silent)

        async def poll():
            while True:
                await HTTPConnection("127.0.0.1", port, 0).get("/", "probe", 30)

        asyncio.create_task(poll())
        await asyncio.sleep(0.2)
        server.close()

    started = time.monotonic()
    run(main())
    assert time.monotonic() - started < 2


def test_requests_not_yet_started_when_the_loop_ends_get_rows(monkeypatch):
    """The loop fails while it schedules: the tasks it created have not run
    a single step, so only the loop itself can record them."""
    draws = []
    real_draw = Mix.draw

    def draw(self, rng):
        draws.append(1)
        if len(draws) == 4:
            raise RuntimeError("the mix broke")
        return real_draw(self, rng)

    monkeypatch.setattr(Mix, "draw", draw)

    async def main():
        server, port = await _serve(_silent)
        history = History()
        spec = LoadSpec(rate=1e6, duration_s=1, connections=2, timeout_s=30)
        with pytest.raises(RuntimeError):
            await open_loop("127.0.0.1", port, spec, history)
        server.close()
        return history

    history = run(main())
    assert history.scheduled == 3 and history.record_gap() is None
    assert _classes(history) == {"unfinished"}
    assert all(not r.sent and "before it was due to start" in r.detail for r in history.requests)


# --- WebSocket sessions: how each one ended


def _ticker_session(handler, ticks: int = 3):
    """One websocket_session against a local server running `handler`."""
    from websockets.asyncio.server import serve

    async def main():
        async with serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            history = History()
            row = await websocket_session(history, "127.0.0.1", port, "/ws/ticks", ticks, 5, 5)
        return row, history

    return run(main())


def _tick(index: int) -> str:
    return json.dumps({"replica": "r1", "node": "n1", "tick": index})


def test_a_whole_websocket_session_is_a_success():
    async def handler(ws):
        for index in range(3):
            await ws.send(_tick(index))
        await ws.close(1000)

    row, history = _ticker_session(handler)
    assert row.ok and row.status == 101 and row.kind == "websocket"
    assert (row.replica, row.node, row.conn) == ("r1", "n1", 5)
    assert row.detail == "closed by server with 1000 after 3 of 3 ticks"
    assert history.record_gap() is None


def test_a_server_close_before_the_end_names_its_code():
    async def handler(ws):
        await ws.send(_tick(0))
        await ws.close(1012, "service restart")

    row, _ = _ticker_session(handler)
    assert row.error == "truncated"
    assert row.detail == "closed by server with 1012 (service restart) after 1 of 3 ticks"


def test_a_connection_lost_without_a_close_frame_is_1006():
    async def handler(ws):
        await ws.send(_tick(0))
        ws.transport.abort()  # no close frame: a killed process or a hard stop

    row, _ = _ticker_session(handler)
    assert row.error == "truncated"
    assert row.detail == "closed by nobody (no close frame) with 1006 after 1 of 3 ticks"


def test_a_refused_websocket_connect_is_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    history = History()
    row = run(websocket_session(history, "127.0.0.1", port, "/ws/ticks", 3, 0, 2))
    assert row.error == "refused" and row.status is None


# --- several hosts' load, one record


def test_two_hosts_loads_are_judged_as_one_record(tmp_path, capsys):
    """`load` twice (standing in for two hosts) into one folder, then
    `analyze --merge`: one record with every request of both, each under a
    ticket of its own; a part with a ticket it never recorded leaves a gap the
    merged record fails on."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from harness import cli

    class Ok(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ingress = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        argv = ["load", "--ingress", ingress, "--rate", "40", "--seconds", "0.5"]
        argv += ["--processes", "1", "--out", str(tmp_path)]
        for host in ("a", "b"):
            assert cli.main([*argv, "--name", f"load from {host}"]) == 0
        # A third under a name already there would overwrite a history: refused.
        assert cli.main([*argv, "--name", "load from a"]) == 2
    finally:
        server.shutdown()
    parts = sorted(tmp_path.glob("history-*.jsonl"))
    assert len(parts) == 2
    assert cli.main(["analyze", str(tmp_path), "--merge"]) == 0
    out = capsys.readouterr().out
    assert "**2 histories merged**: 0 of 40 requests failed, PASSED" in out

    # One part scheduled a request it has no row for: the merged record has a gap.
    lines = parts[0].read_text().splitlines()
    parts[0].write_text("\n".join(lines[:-1]) + "\n")
    assert cli.main(["analyze", str(tmp_path), "--merge", "--out", str(tmp_path / "b")]) == 1
    assert "The record is incomplete" in capsys.readouterr().out
