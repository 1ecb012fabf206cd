"""The history of a run: what the clients saw, what the nemesis did, and what
the scenario read from the cluster, with wall-clock times on one host clock.
Load, nemesis and scenarios write it; the checker and the report only read it
(Jepsen's split: judge the record, not live state), so a saved history can be
judged again with no cluster (`python -m harness analyze`).

Every request is scheduled before it is sent and takes a ticket; its row
carries the ticket, and the history counts the tickets it handed out. A row
that never arrives (a client bug, a task that died) shows up as a gap between
the count and the rows, which the checker fails loudly instead of judging a
smaller record as clean.

Stored as JSON Lines: one `meta` line (with the scheduled count), then one
line per request or event.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError

# Error classes a request can end with (None means success, a 2xx).
REFUSED = "refused"  # the TCP connect was refused
RESET = "reset"  # the connection closed or reset before a full response
TIMEOUT = "timeout"  # the client gave up waiting (for a connection or the answer)
TRUNCATED = "truncated"  # a response started but its body was cut short
PROTOCOL = "protocol"  # the answer was not valid HTTP/1.1 (the text says how)
# Still running (or never sent) when the run ended or its caller gave up. It
# counts as a failure: the client did not see it succeed.
UNFINISHED = "unfinished"
CLIENT = "client"  # the client itself raised something unexpected (a bug)
# HTTP errors are their status code as a string: "408", "500", "502", ...

# An event's phase: a fault's "start" and "end" make a window, a "mark" is a
# point inside one, and "observed" is something a scenario read from the
# cluster (a death reason, a log line, a process list) and judges by.
OBSERVED = "observed"

# How saved histories are named in a results directory (gzipped ones too).
HISTORY_GLOB = "history-*.jsonl*"


def history_name(label: str) -> str:
    """The file a run labelled `label` is saved as."""
    return f"history-{label.replace(' ', '-')}.jsonl"


def clear_histories(out_dir: Path) -> None:
    """Remove an earlier run's histories, which `analyze` would otherwise
    judge together with the next run's."""
    for stale in out_dir.glob(HISTORY_GLOB):
        stale.unlink()


@dataclass
class Request:
    kind: str  # "short", "long", "stream"
    start: float  # time.time() when the request was sent (or given up, if never sent)
    end: float  # when the response completed or failed
    status: int | None  # HTTP status, None if no response arrived
    error: str | None  # None, one of the classes above, or the status as a string
    conn: int | None = None  # client connection number (keep-alive reuse is visible)
    replica: str | None = None
    node: str | None = None
    scheduled: float | None = None  # open loop: when it was due (lag = start - scheduled)
    id: int | None = None  # the ticket History.schedule handed out
    detail: str | None = None  # why it failed, in the client's words
    # False for a request that never left the client (no connection came free in
    # time, or the run ended first): its start is when it was given up.
    sent: bool = True

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def latency(self) -> float:
        return self.end - self.start

    @property
    def outcome(self) -> str:
        """One key per row of a status/error breakdown: the error class of a
        failure (an HTTP error's class is its status), else the status."""
        return self.error if self.error is not None else str(self.status)


@dataclass
class Event:
    time: float
    fault: str  # e.g. "spot_preemption", "reload", "kill"; for "observed", what was read
    phase: str  # "start", "end", "mark" or "observed"
    target: str | None = None  # node or replica the event concerns
    detail: dict = field(default_factory=dict)


class History:
    """Thread-safe append-only record; load and nemesis run concurrently."""

    def __init__(self, meta: dict | None = None) -> None:
        self.meta: dict = dict(meta or {})
        self.requests: list[Request] = []
        self.events: list[Event] = []
        self.scheduled = 0  # tickets handed out
        self._lock = threading.Lock()

    def schedule(self) -> int:
        """A ticket for a request about to be sent; its row must carry it."""
        with self._lock:
            self.scheduled += 1
            return self.scheduled - 1

    def record(self, ticket: int, request: Request) -> None:
        request.id = ticket
        with self._lock:
            self.requests.append(request)

    def add_request(self, request: Request) -> None:
        """Schedule and record at once, for a row that already exists."""
        self.record(self.schedule(), request)

    def add_event(self, event: Event) -> None:
        # Kept as it will read back from the saved file, so a verdict reached
        # now and one reached by `analyze` later see the same values (a tuple
        # is a list in both), and a value JSON cannot hold fails here, while
        # the cluster is still there, not when the history is saved.
        event.detail = json.loads(json.dumps(event.detail))
        with self._lock:
            self.events.append(event)

    def observe(self, what: str, value: Any, time: float, target: str | None = None) -> None:
        """Keep something read from the cluster, so the verdict can be reached
        again from the saved history. `value` must be JSON-serialisable."""
        self.add_event(Event(time, what, OBSERVED, target, {"value": value}))

    def observed(self, what: str, target: str | None = None) -> list[Event]:
        """The observations of `what` (for one target, if given), in time order."""
        return sorted(
            (
                e
                for e in self.events
                if e.phase == OBSERVED
                and e.fault == what
                and (target is None or e.target == target)
            ),
            key=lambda e: e.time,
        )

    def value(self, what: str, default: Any = None) -> Any:
        """The value of the latest observation of `what`, or `default`."""
        found = self.observed(what)
        return found[-1].detail["value"] if found else default

    def record_gap(self) -> str | None:
        """None if every scheduled request has exactly one row; otherwise what
        is missing or doubled, by ticket."""
        seen: dict[int | None, int] = {}
        for r in self.requests:
            seen[r.id] = seen.get(r.id, 0) + 1
        missing = [t for t in range(self.scheduled) if t not in seen]
        doubled = sorted(t for t, n in seen.items() if t is not None and n > 1)
        stray = sum(n for t, n in seen.items() if t is None or not 0 <= t < self.scheduled)
        if not (missing or doubled or stray):
            return None
        parts = [f"{self.scheduled:,} requests scheduled, {len(self.requests):,} rows"]
        if missing:
            parts.append(f"{len(missing):,} scheduled with no row (tickets {_ids(missing)})")
        if doubled:
            parts.append(f"{len(doubled):,} with more than one row (tickets {_ids(doubled)})")
        if stray:
            parts.append(f"{stray:,} rows with no ticket")
        return "; ".join(parts)

    @classmethod
    def merged(cls, parts: list[History], meta: dict) -> History:
        """One record of several (the load of several hosts): every part's
        requests under tickets of this history's, so a ticket a part handed out
        and never recorded stays a gap here, and every part's events."""
        whole = cls(meta)
        for part in parts:
            tickets = [whole.schedule() for _ in range(part.scheduled)]
            for row in part.requests:
                if row.id is None or not 0 <= row.id < len(tickets):
                    raise HarnessError(
                        f"{part.meta.get('label', 'a history')} has a row with no ticket of "
                        f"its own ({row.id}); it cannot be merged"
                    )
                whole.record(tickets[row.id], replace(row))
            for event in part.events:
                whole.add_event(event)
        return whole

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            out.write(json.dumps({"type": "meta", **self.meta, "scheduled": self.scheduled}) + "\n")
            for r in self.requests:
                out.write(json.dumps({"type": "request", **asdict(r)}) + "\n")
            for e in self.events:
                out.write(json.dumps({"type": "event", **asdict(e)}) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        """Read a saved history; a file that is not one is a HarnessError
        naming the file and the line."""
        history = cls()
        try:
            # A history kept for later (a test fixture, an attachment) may be gzipped.
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            lines = raw.decode().splitlines()
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
            raise HarnessError(f"cannot read {path} as a history: {exc}") from exc
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
                kind = row.pop("type")
                if kind == "meta":
                    if "scheduled" not in row:
                        raise HarnessError(
                            f"{path} was saved before the harness counted the "
                            f"requests it scheduled, so whether its record is "
                            f"complete cannot be told; run it again."
                        )
                    history.scheduled = int(row.pop("scheduled"))
                    history.meta = row
                elif kind == "request":
                    history.requests.append(Request(**row))
                elif kind == "event":
                    history.events.append(Event(**row))
                else:
                    raise ValueError(f"unknown row type {kind!r}")
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise HarnessError(
                    f"{path}:{number} is not a history row ({exc}); a history "
                    f"is what the harness saves as history-*.jsonl"
                ) from exc
        return history


def _ids(tickets: list[int], shown: int = 10) -> str:
    text = ", ".join(str(t) for t in tickets[:shown])
    return text + (f", ... ({len(tickets) - shown} more)" if len(tickets) > shown else "")
