"""The history of a run: what the clients saw and what the nemesis did, with
wall-clock times on one host clock. Load and nemesis write it; the checker and
the report only read it (Jepsen's split: judge the record, not live state).

Stored as JSON Lines: one `meta` line, then one line per request or event.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Error classes a request can end with (None means success, a 2xx).
REFUSED = "refused"  # the TCP connect was refused
RESET = "reset"  # the connection closed or reset before a full response
TIMEOUT = "timeout"  # the client gave up waiting
TRUNCATED = "truncated"  # a response started but its body was cut short
# HTTP errors are their status code as a string: "408", "500", "502", ...


@dataclass
class Request:
    kind: str  # "short", "long", "stream"
    start: float  # time.time() when the request was sent
    end: float  # when the response completed or failed
    status: int | None  # HTTP status, None if no response arrived
    error: str | None  # None, one of the classes above, or the status as a string
    conn: int | None = None  # client connection number (keep-alive reuse is visible)
    replica: str | None = None
    node: str | None = None
    scheduled: float | None = None  # open loop: when it was due (lag = start - scheduled)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency(self) -> float:
        return self.end - self.start


@dataclass
class Event:
    time: float
    fault: str  # e.g. "spot_preemption", "reload", "kill"
    phase: str  # "start", "end", or "mark" (a point inside a fault, e.g. "drain sent")
    target: str | None = None  # node or replica the event concerns
    detail: dict = field(default_factory=dict)


class History:
    """Thread-safe append-only record; load and nemesis run concurrently."""

    def __init__(self, meta: dict | None = None) -> None:
        self.meta: dict = dict(meta or {})
        self.requests: list[Request] = []
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def add_request(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def add_event(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            out.write(json.dumps({"type": "meta", **self.meta}) + "\n")
            for r in self.requests:
                out.write(json.dumps({"type": "request", **asdict(r)}) + "\n")
            for e in self.events:
                out.write(json.dumps({"type": "event", **asdict(e)}) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        history = cls()
        for line in path.read_text().splitlines():
            row = json.loads(line)
            kind = row.pop("type")
            if kind == "meta":
                history.meta = row
            elif kind == "request":
                history.requests.append(Request(**row))
            elif kind == "event":
                history.events.append(Event(**row))
        return history
