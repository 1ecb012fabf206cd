"""Client traffic, recorded into a History: one row per request.

The client is a small HTTP/1.1 implementation on asyncio streams rather than
aiohttp or httpx, for two reasons. The scenarios need to own individual
keep-alive connections (open K, leave them idle across an HAProxy reload, then
reuse exactly those), which pooled clients hide. And the error classes must be
exact: a refused connect, a connection closed before any response, a response
cut mid-body and a client timeout are different failures with different
causes. It is also cheap per request, so the generator is never the bottleneck
(`make bench-load` measures that against the cluster in one run).

Request kinds and paths (served by harness/apps/echo.py):
    short   GET /
    long    GET /?sleep=S        the long-runner, S drawn from [8, 20] s
    stream  GET /stream?chunks=N a chunked response, one line per chunk
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass

from harness.history import REFUSED, RESET, TIMEOUT, TRUNCATED, History, Request

_MAX_HEADER = 64 * 1024


class HTTPConnection:
    """One keep-alive HTTP/1.1 connection. Reconnects on the next request after
    a failure or a `Connection: close`; `number` identifies it in the history."""

    def __init__(self, host: str, port: int, number: int) -> None:
        self.host, self.port, self.number = host, port, number
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    @property
    def is_open(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def get(self, path: str, kind: str, timeout_s: float,
                  scheduled: float | None = None) -> Request:
        start = time.time()
        status: int | None = None
        try:
            async with asyncio.timeout(timeout_s):
                if not self.is_open:
                    await self.connect()
                self._writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
                await self._writer.drain()
                status, headers = await self._read_head()
                body = await self._read_body(headers)
        except TimeoutError:
            self.close()
            return self._row(kind, start, status, TRUNCATED if status else TIMEOUT, scheduled)
        except ConnectionRefusedError:
            self.close()
            return self._row(kind, start, None, REFUSED, scheduled)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            self.close()
            # A response whose head arrived but whose body did not is truncated;
            # one that never started is a reset (the lab saw both, see specs).
            return self._row(kind, start, status, TRUNCATED if status else RESET, scheduled)
        if headers.get("connection", "").lower() == "close":
            self.close()
        row = self._row(kind, start, status, None if 200 <= status < 300 else str(status),
                        scheduled)
        if row.error is None:
            row.replica, row.node = _identity(body)
        return row

    def _row(self, kind, start, status, error, scheduled) -> Request:
        return Request(kind=kind, start=start, end=time.time(), status=status, error=error,
                       conn=self.number, scheduled=scheduled)

    async def _read_head(self) -> tuple[int, dict[str, str]]:
        raw = await self._reader.readuntil(b"\r\n\r\n")
        if len(raw) > _MAX_HEADER:
            raise ConnectionError("response head too large")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return status, headers

    async def _read_body(self, headers: dict[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await self._reader.readexactly(size + 2)
                if size == 0:
                    return b"".join(chunks)
                chunks.append(chunk[:-2])
        length = int(headers.get("content-length", "0"))
        return await self._reader.readexactly(length)


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
    long_path: str = "/"  # "/long/": harness/apps/workload.py's long-runner

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


async def open_loop(host: str, port: int, spec: LoadSpec, history: History) -> None:
    """Open loop: request k is due at t0 + k/rate whether or not earlier ones
    finished, so a slow cluster shows up as latency and errors, not as a lower
    offered rate. A request waits for a free connection only when all
    `connections` are busy; `scheduled` in its row records how late it started.
    Bounded by duration and count; the last requests get `timeout_s` to end."""
    rng = random.Random(spec.seed)
    idle: asyncio.Queue[HTTPConnection] = asyncio.Queue()
    for number in range(spec.connections):
        idle.put_nowait(HTTPConnection(host, port, number))

    async def one(kind: str, path: str, due: float) -> None:
        conn = await idle.get()
        try:
            history.add_request(await conn.get(path, kind, spec.timeout_s, scheduled=due))
        finally:
            idle.put_nowait(conn)

    tasks: set[asyncio.Task] = set()
    t0 = time.time()
    for k in range(spec.max_requests):
        due = t0 + k / spec.rate
        if due - t0 >= spec.duration_s:
            break
        delay = due - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        kind, path = spec.mix.draw(rng)
        task = asyncio.create_task(one(kind, path, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=spec.timeout_s + 5)
    while not idle.empty():
        idle.get_nowait().close()


async def closed_loop(host: str, port: int, count: int, connections: int, history: History,
                      path: str = "/", timeout_s: float = 30.0) -> None:
    """`count` requests over `connections` keep-alive connections, each sending
    its next request as soon as the last one ends: the most a target serves."""
    remaining = iter(range(count))

    async def worker(number: int) -> None:
        conn = HTTPConnection(host, port, number)
        for _ in remaining:
            history.add_request(await conn.get(path, "short", timeout_s))
        conn.close()

    await asyncio.gather(*(worker(n) for n in range(connections)))
