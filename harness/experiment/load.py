"""Client traffic, recorded into a History: one row per request.

The client is a small HTTP/1.1 implementation on asyncio streams rather than
aiohttp or httpx, for two reasons. The scenarios need to own individual
keep-alive connections (open K, leave them idle across an HAProxy reload, then
reuse exactly those), which pooled clients hide. And the error classes must be
exact: a refused connect, a connection closed before any response, a response
cut mid-body and a client timeout are different failures with different
causes. It is also cheap per request, so the generator is never the bottleneck
(`make bench-load` measures that against the cluster in one run).

Request kinds and paths (served by harness/cluster/apps/echo.py):
    short   GET /
    long    GET /?sleep=S        the long-runner, S drawn from [8, 20] s
    stream  GET /stream?chunks=N a chunked response, one line per chunk
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import random
import re
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from harness.experiment.history import (
    CLIENT,
    PROTOCOL,
    REFUSED,
    RESET,
    TIMEOUT,
    TRUNCATED,
    UNFINISHED,
    History,
    Request,
)

# asyncio's StreamReader refuses a head longer than its limit (64 KiB) with
# LimitOverrunError, which is how an oversized head is detected.
_MAX_HEAD = 64 * 1024
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([1-5][0-9][0-9])(?: [^\r\n]*)?")
_HEX = re.compile(rb"[0-9A-Fa-f]+")
_DIGITS = re.compile(r"[0-9]+")


class ProtocolError(Exception):
    """The peer's answer is not valid HTTP/1.1."""


class HTTPConnection:
    """One keep-alive HTTP/1.1 connection. Reconnects on the next request after
    a failure, a `Connection: close`, or the server closing it while it sat
    idle (seen before sending, as pooled clients such as urllib3 check);
    `number` identifies it in the history."""

    def __init__(self, host: str, port: int, number: int) -> None:
        self.host, self.port, self.number = host, port, number
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.connects = 0  # TCP connections opened so far

    @property
    def is_open(self) -> bool:
        return (
            self._writer is not None
            and not self._writer.is_closing()
            and self._reader is not None
            and not self._reader.at_eof()
        )

    # The streams between connect() and close(); a request opens the
    # connection before it touches them.
    @property
    def _open_reader(self) -> asyncio.StreamReader:
        assert self._reader is not None, "read on a closed connection"
        return self._reader

    @property
    def _open_writer(self) -> asyncio.StreamWriter:
        assert self._writer is not None, "write on a closed connection"
        return self._writer

    async def connect(self) -> None:
        self.connects += 1
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, limit=_MAX_HEAD
        )

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def get(
        self,
        path: str,
        kind: str,
        timeout_s: float,
        scheduled: float | None = None,
        on_cancelled: Callable[[Request], None] | None = None,
    ) -> Request:
        """Send one GET and return its row. Never raises for anything the peer
        or the network does: every outcome is a row with a class. Cancelling
        it still cancels it; `on_cancelled` first gets the request's
        UNFINISHED row, for the caller to record (see `_recorded`)."""
        start = time.time()
        status: int | None = None
        error: str | None
        detail: str | None = None
        try:
            async with asyncio.timeout(timeout_s):
                if not self.is_open:
                    await self.connect()
                self._open_writer.write(
                    f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
                )
                await self._open_writer.drain()
                status, headers, keep_alive = await self._read_head()
                while 100 <= status < 200 and status != 101:
                    # An interim response (100 Continue, 103 Early Hints): the
                    # answer is the final one that follows it.
                    status, headers, keep_alive = await self._read_head()
                body = await self._read_body(status, headers)
        except asyncio.CancelledError:
            self.close()
            row = self._row(kind, start, status, UNFINISHED, scheduled)
            row.detail = "cancelled before it ended (the run ended, or its caller gave up)"
            if on_cancelled is not None:
                on_cancelled(row)
            raise
        except TimeoutError:
            error = TRUNCATED if status else TIMEOUT
        except ConnectionRefusedError:
            error = REFUSED
        except (ProtocolError, asyncio.LimitOverrunError) as exc:
            error, detail = PROTOCOL, _describe(exc)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            # A response whose head arrived but whose body did not is truncated;
            # one that never started is a reset. Both happen when HAProxy's old
            # worker is hard-stopped.
            error, detail = (TRUNCATED if status else RESET), _describe(exc)
        except Exception as exc:  # noqa: BLE001 - a client bug still gets its row
            error, detail = CLIENT, _describe(exc)
        else:
            framed = _chunked(headers) or "content-length" in headers or status in (204, 304)
            if not (keep_alive and framed):
                self.close()
            row = self._row(
                kind, start, status, None if 200 <= status < 300 else str(status), scheduled
            )
            if row.error is None:
                row.replica, row.node = _identity(body)
            return row
        self.close()
        row = self._row(kind, start, status, error, scheduled)
        row.detail = detail
        return row

    def _row(self, kind, start, status, error, scheduled) -> Request:
        return Request(
            kind=kind,
            start=start,
            end=time.time(),
            status=status,
            error=error,
            conn=self.number,
            scheduled=scheduled,
        )

    async def _read_head(self) -> tuple[int, dict[str, str], bool]:
        """Status, headers, and whether the connection may carry another
        request (HTTP/1.1 unless `Connection: close`; 1.0 only with keep-alive)."""
        raw = await self._open_reader.readuntil(b"\r\n\r\n")
        status_line, _, rest = raw.partition(b"\r\n")
        match = _STATUS_LINE.fullmatch(status_line)
        if not match:
            raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        headers = {}
        for line in rest.decode("latin-1").split("\r\n"):
            if not line:
                continue
            name, colon, value = line.partition(":")
            if not colon or not name.strip():
                raise ProtocolError(f"not a header line: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        tokens = _tokens(headers.get("connection", ""))
        keep_alive = "keep-alive" in tokens if match.group(1) == b"0" else "close" not in tokens
        return int(match.group(2)), headers, keep_alive

    async def _read_body(self, status: int, headers: dict[str, str]) -> bytes:
        if status < 200 or status in (204, 304):
            return b""
        if _chunked(headers):
            chunks: list[bytes] = []
            while True:
                line = await self._open_reader.readuntil(b"\r\n")
                size_text = line.split(b";")[0].strip()
                if not _HEX.fullmatch(size_text):
                    raise ProtocolError(f"bad chunk size {size_text[:40]!r}")
                size = int(size_text, 16)
                if size == 0:
                    # Trailer fields, if any, up to the empty line that ends them.
                    while await self._open_reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    return b"".join(chunks)
                chunk = await self._open_reader.readexactly(size + 2)
                if chunk[-2:] != b"\r\n":
                    raise ProtocolError(f"chunk of {size} bytes not followed by CRLF")
                chunks.append(chunk[:-2])
        if "content-length" not in headers:
            # No length and not chunked: the body runs to the connection's end.
            return await self._open_reader.read()
        text = headers["content-length"]
        if not _DIGITS.fullmatch(text):
            raise ProtocolError(f"bad Content-Length {text[:40]!r}")
        return await self._open_reader.readexactly(int(text))


def _tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(",") if t.strip()}


def _chunked(headers: dict[str, str]) -> bool:
    """Chunked framing: `chunked` is the last transfer coding (RFC 9112 6.3)."""
    codings = [t.strip().lower() for t in headers.get("transfer-encoding", "").split(",")]
    return codings[-1] == "chunked"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _recorded(
    history: History,
    ticket: int,
    conn: HTTPConnection,
    path: str,
    kind: str,
    timeout_s: float,
    scheduled: float | None = None,
) -> Request:
    """`conn.get` whose row is recorded under `ticket` however it ends,
    cancellation included (the cancellation then goes on)."""
    row = await conn.get(
        path,
        kind,
        timeout_s,
        scheduled=scheduled,
        on_cancelled=lambda unfinished: history.record(ticket, unfinished),
    )
    history.record(ticket, row)
    return row


async def send(
    history: History, conn: HTTPConnection, path: str, kind: str, timeout_s: float
) -> Request:
    """One request outside the open loop, scheduled in the history before it
    is sent so that it has its row whatever happens."""
    return await _recorded(history, history.schedule(), conn, path, kind, timeout_s)


def _identity(body: bytes) -> tuple[str | None, str | None]:
    """Replica and node from the echo app's JSON (a stream's first line)."""
    try:
        first = body.split(b"\n", 1)[0]
        data = json.loads(first)
        return data.get("replica"), data.get("node")
    except (ValueError, AttributeError):
        return None, None


@dataclass(frozen=True)
class Mix:
    """Weights of the request kinds, and the long-runner's range in seconds."""

    short: float = 1.0
    long: float = 0.0
    stream: float = 0.0
    long_s: tuple[float, float] = (8.0, 20.0)
    stream_chunks: int = 5
    short_path: str = "/"
    long_path: str = "/"  # "/long/": harness/cluster/apps/workload.py's long-runner

    def draw(self, rng: random.Random) -> tuple[str, str]:
        kind = rng.choices(("short", "long", "stream"), (self.short, self.long, self.stream))[0]
        if kind == "long":
            return kind, f"{self.long_path}?sleep={rng.uniform(*self.long_s):.2f}"
        if kind == "stream":
            return kind, f"/stream?chunks={self.stream_chunks}"
        return kind, self.short_path


@dataclass(frozen=True)
class LoadSpec:
    rate: float  # requests per second, scheduled regardless of completions
    duration_s: float  # stop scheduling after this long
    connections: int = 64  # keep-alive connections, opened as needed
    max_requests: int = 1_000_000  # stop scheduling after this many
    mix: Mix = Mix()
    timeout_s: float = 60.0  # per request
    seed: int = 1


async def open_loop(
    host: str,
    port: int,
    spec: LoadSpec,
    history: History,
    stop: asyncio.Event | None = None,
    start: float | None = None,
    first_connection: int = 0,
) -> None:
    """Open loop: request k is due at t0 + k/rate whether or not earlier ones
    finished, so a slow cluster shows up as latency and errors, not as a lower
    offered rate. A request waits for a free connection only when all
    `connections` are busy; `scheduled` in its row records how late it started,
    and the wait counts toward its `timeout_s`. Bounded by duration and count,
    and by `stop`: once it is set nothing more is scheduled (for an experiment
    whose length depends on how fast the cluster does what it is asked).

    Every request scheduled here gets exactly one row: one that never found a
    free connection in time is a TIMEOUT, and one still running when the loop
    ends (or is cancelled) is UNFINISHED.

    `start` is when the first request is due (default: now); connections are
    numbered from `first_connection` (open_loop_processes gives each process
    its own range)."""
    rng = random.Random(spec.seed)
    idle: asyncio.Queue[HTTPConnection] = asyncio.Queue()
    for number in range(spec.connections):
        idle.put_nowait(HTTPConnection(host, port, first_connection + number))
    loop = asyncio.get_running_loop()
    # Tickets whose task has not run yet: a task cancelled before its first
    # step never reaches its own bookkeeping, so the loop records those.
    unstarted: dict[int, tuple[str, float]] = {}

    def never_sent(ticket: int, kind: str, due: float, error: str, why: str) -> None:
        now = time.time()
        history.record(
            ticket,
            Request(
                kind=kind,
                start=now,
                end=now,
                status=None,
                error=error,
                scheduled=due,
                sent=False,
                detail=f"never sent: {why}",
            ),
        )

    async def one(ticket: int, kind: str, path: str, due: float) -> None:
        unstarted.pop(ticket)
        # The request's time runs from when it was due, not from when this
        # task got to run or a connection came free.
        deadline = loop.time() + spec.timeout_s - max(0.0, time.time() - due)
        try:
            async with asyncio.timeout_at(deadline):
                conn = await idle.get()
        except TimeoutError:
            never_sent(
                ticket, kind, due, TIMEOUT, f"no connection was free within {spec.timeout_s:g} s"
            )
            return
        except asyncio.CancelledError:
            never_sent(ticket, kind, due, UNFINISHED, "no connection was free when the run ended")
            raise
        try:
            await _recorded(
                history, ticket, conn, path, kind, max(0.0, deadline - loop.time()), scheduled=due
            )
        finally:
            idle.put_nowait(conn)

    tasks: set[asyncio.Task] = set()
    try:
        t0 = time.time() if start is None else start
        for k in range(spec.max_requests):
            due = t0 + k / spec.rate
            if due - t0 >= spec.duration_s or (stop is not None and stop.is_set()):
                break
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            kind, path = spec.mix.draw(rng)
            ticket = history.schedule()
            unstarted[ticket] = (kind, due)
            task = asyncio.create_task(one(ticket, kind, path, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            # Each request ends within its timeout; the margin is for the
            # event loop, not for the requests.
            await asyncio.wait(set(tasks), timeout=spec.timeout_s + 5)
    finally:
        # What is still running records itself as unfinished when cancelled.
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for ticket, (kind, due) in list(unstarted.items()):
            never_sent(ticket, kind, due, UNFINISHED, "the run ended before it was due to start")
        while not idle.empty():
            idle.get_nowait().close()


# Processes start and import this module in well under a second; the schedule
# starts this long after they were asked for, so none begins behind.
PROCESS_START_S = 2.0
CONNECTIONS_PER_PROCESS = 100_000  # connection numbers: process i from i x this


async def open_loop_processes(
    host: str,
    port: int,
    spec: LoadSpec,
    history: History,
    processes: int,
    start: float | None = None,
) -> None:
    """The open loop of `spec` split over `processes` OS processes, for a rate
    one process cannot keep (one core's worth of asyncio): process i sends
    requests i, i + N, i + 2N, ... of the one schedule, on its own share of
    the connections and its own draw of the mix, as `open_loop` does. Every
    row comes back into `history` under a ticket of its own, each process's
    in the order it scheduled them, so the record is as complete as one
    process's: a ticket a process scheduled and never recorded stays a gap
    the checker fails on. Bounded as `open_loop` is (duration, count, and each
    request's timeout); there is no `stop`. `start`: when the first request
    is due (default: as soon as the processes are up)."""
    if processes <= 1:
        await open_loop(host, port, spec, history, start=start)
        return
    start = start or time.time() + PROCESS_START_S
    parts = [
        (
            replace(
                spec,
                rate=spec.rate / processes,
                connections=max(1, spec.connections // processes),
                max_requests=-(-(spec.max_requests - i) // processes),
                seed=spec.seed * 1000 + i,
            ),
            start + i / spec.rate,
            i * CONNECTIONS_PER_PROCESS,
        )
        for i in range(processes)
    ]
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = await asyncio.gather(
            *(loop.run_in_executor(pool, _open_loop_part, host, port, *part) for part in parts)
        )
    for scheduled, rows in done:
        tickets = [history.schedule() for _ in range(scheduled)]
        for row in rows:
            assert row.id is not None  # History.record gave it the process's ticket
            history.record(tickets[row.id], row)


def _open_loop_part(
    host: str, port: int, spec: LoadSpec, start: float, first_connection: int
) -> tuple[int, list[Request]]:
    """One process's share of open_loop_processes: how many it scheduled, and
    its rows (each with its ticket in this process)."""
    part = History()
    asyncio.run(open_loop(host, port, spec, part, start=start, first_connection=first_connection))
    return part.scheduled, part.requests


async def websocket_session(
    history: History, host: str, port: int, path: str, ticks: int, number: int, timeout_s: float
) -> Request:
    """One WebSocket session: connect, read `ticks` messages from the ticker
    (harness/cluster/apps/ticker.py), recorded as one row of kind "websocket" however
    it ends. Success is every tick and then a 1000 close. Otherwise the row's
    detail says who ended it and how: a close frame from the server with its
    code and reason, or a connection lost with no close frame (1006), and how
    many ticks arrived first."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    ticket = history.schedule()
    start = time.time()
    row = Request(
        kind="websocket", start=start, end=start, status=None, error=None, conn=number, id=ticket
    )
    received = 0
    try:
        async with asyncio.timeout(timeout_s):
            async with connect(
                f"ws://{host}:{port}{path}",
                open_timeout=timeout_s,
                ping_interval=None,
                close_timeout=2,
            ) as ws:
                row.status = 101
                try:
                    async for message in ws:
                        if not received:
                            row.replica, row.node = _identity(
                                message if isinstance(message, bytes) else message.encode()
                            )
                        received += 1
                    code, reason, by = ws.close_code, ws.close_reason, "server"
                except ConnectionClosed as exc:
                    frame = exc.rcvd
                    code, reason = (frame.code, frame.reason) if frame else (1006, "")
                    by = "server" if frame else "nobody (no close frame)"
    except asyncio.CancelledError:
        row.end, row.error = time.time(), UNFINISHED
        row.detail = f"cancelled after {received} of {ticks} ticks"
        history.record(ticket, row)
        raise
    except TimeoutError:
        row.error = TRUNCATED if row.status else TIMEOUT
        row.detail = f"no end within {timeout_s:g} s, after {received} of {ticks} ticks"
    except InvalidStatus as exc:
        row.status = exc.response.status_code
        row.error = str(row.status)
        row.detail = "the upgrade was refused"
    except (ConnectionError, OSError) as exc:
        if row.status:
            row.error = TRUNCATED
        elif isinstance(exc, ConnectionRefusedError):
            row.error = REFUSED
        else:
            row.error = RESET
        row.detail = _describe(exc)
    except Exception as exc:  # noqa: BLE001 - a client bug still gets its row
        row.error, row.detail = CLIENT, _describe(exc)
    else:
        complete = received == ticks and code == 1000
        row.error = None if complete else TRUNCATED
        row.detail = (
            f"closed by {by} with {code}{f' ({reason})' if reason else ''} "
            f"after {received} of {ticks} ticks"
        )
    row.end = time.time()
    history.record(ticket, row)
    return row


async def closed_loop(
    host: str,
    port: int,
    count: int,
    connections: int,
    history: History,
    path: str = "/",
    timeout_s: float = 30.0,
    kind: str = "short",
) -> int:
    """`count` requests over `connections` keep-alive connections, each sending
    its next request as soon as the last one ends: the most a target serves.
    Returns how many TCP connections the clients opened."""
    remaining = iter(range(count))
    clients = [HTTPConnection(host, port, number) for number in range(connections)]

    async def worker(conn: HTTPConnection) -> None:
        for _ in remaining:
            await send(history, conn, path, kind, timeout_s)
        conn.close()

    await asyncio.gather(*(worker(c) for c in clients))
    return sum(c.connects for c in clients)
