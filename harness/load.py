"""Client traffic through the front load balancer, recorded as a history: one
row per request with start, end, status, error class and who served it.

aiohttp: it keeps connections alive, runs many requests on one event loop with
little per-request overhead, and is already installed with `ray[serve]`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass

import aiohttp


@dataclass
class Row:
    start: float  # wall-clock seconds (time.time), comparable with fault events
    end: float
    status: int | None  # HTTP status, None when no response arrived
    error: str | None  # None on 2xx; else "refused", "reset", "timeout", "http_<code>", ...
    replica: str | None = None
    node: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def classify(exc: BaseException) -> str:
    """Name a transport failure the way a user would describe it."""
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "refused"
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return "reset"
    return type(exc).__name__


async def _one(session: aiohttp.ClientSession, url: str, timeout_s: float) -> Row:
    start = time.time()
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            body = await resp.json(content_type=None) if resp.status == 200 else None
            end = time.time()
            if resp.status >= 300:
                return Row(start, end, resp.status, f"http_{resp.status}")
            return Row(start, end, resp.status, None, body.get("replica"), body.get("node"))
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        return Row(start, time.time(), None, classify(exc))


async def closed_loop(url: str, count: int, connections: int,
                      timeout_s: float = 30.0) -> list[Row]:
    """Send `count` requests, `connections` at a time, each connection kept alive
    and reused. Bounded by count; each request by `timeout_s`."""
    rows: list[Row] = []
    remaining = iter(range(count))
    connector = aiohttp.TCPConnector(limit=connections, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker() -> None:
            for _ in remaining:
                rows.append(await _one(session, url, timeout_s))

        await asyncio.gather(*(worker() for _ in range(connections)))
    return rows


def run_closed_loop(url: str, count: int, connections: int = 8) -> list[Row]:
    return asyncio.run(closed_loop(url, count, connections))
