"""The checker: a recorded History in, a Verdict out. How a verdict is printed
(the spot-notice acceptance table, the side-by-side comparison of images) is
the report's business.

It judges the record only (Jepsen's split): pure functions over Request and Event
rows, no I/O, no Docker, no clock. Writing files is the report's job.

Attribution: fault events pair into windows; a failed request counts against every
window it overlaps once the window is widened by a grace period after its end,
because a fault's effects (a drained node's last connections, a reload's old
worker) outlive the event that caused them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from harness.experiment.history import OBSERVED, Event, History, Request

# The spot-notice acceptance threshold: 0.01% of requests may fail.
DEFAULT_THRESHOLD = 0.0001
DEFAULT_GRACE_S = 5.0

# Table order for request kinds; unknown kinds follow alphabetically.
_KIND_ORDER = ("short", "long", "stream")


@dataclass
class Latency:
    """Nearest-rank percentiles of successful requests, in seconds."""

    count: int
    p50: float
    p90: float
    p99: float
    p999: float
    max: float


@dataclass
class KindStats:
    requests: int
    failures: int
    failures_by_class: dict[str, int]
    # None when no request of this kind succeeded. `latency` runs from the send;
    # `latency_from_scheduled` from when the open loop meant to send it, so time
    # spent waiting for a connection counts (wrk2's corrected figure: a slow
    # cluster cannot hide its stalls by delaying the requests it is sent).
    latency: Latency | None
    latency_from_scheduled: Latency | None
    outcomes: dict[str, int]  # status code or error class -> requests


@dataclass
class FaultWindow:
    fault: str
    target: str | None
    start: float  # seconds from the history's first request start
    end: float  # the fault's end, without the grace widening
    # True when one side had no partner event: a "start" without "end" runs to the
    # end of the history, an "end" without "start" from the beginning of it.
    unmatched: bool
    requests: int  # requests overlapping [start, end + grace]
    failures: int
    failures_by_class: dict[str, int]


@dataclass
class Mark:
    fault: str
    target: str | None
    time: float  # seconds from the history's first request start
    label: str  # short text for a plot or a list
    detail: dict


@dataclass
class Verdict:
    label: str
    duration_s: float  # first request start to last request end
    requests: int
    successes: int
    failures: int
    rps: float
    failure_rate: float
    threshold: float
    passed: bool
    failures_by_class: dict[str, int]
    kinds: dict[str, KindStats]
    latency: Latency | None
    outcomes: dict[str, int]  # status code or error class -> requests, all kinds
    grace_s: float
    windows: list[FaultWindow]
    marks: list[Mark]
    failures_in_windows: int  # failed requests attributed to at least one window
    failures_outside: int  # "outside any fault"
    outside_by_class: dict[str, int]
    scheduled: int = 0  # requests the history says were scheduled
    # None when every scheduled request has exactly one row; otherwise the gap,
    # and the verdict fails whatever the rows say.
    record_gap: str | None = None
    t0: float = field(default=0.0)  # wall-clock origin of the relative times above

    @property
    def result(self) -> str:
        return "PASSED" if self.passed else "FAILED"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["result"] = self.result
        return out


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of values at or
    below it. Always an observed value, never interpolated, so a p99 is a latency
    some request really had."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} is outside (0, 100]")
    # The epsilon keeps float noise (e.g. 99.9 * 1000 / 100) from bumping the rank.
    rank = math.ceil(p * len(sorted_values) / 100 - 1e-9)
    return sorted_values[max(rank, 1) - 1]


def latency_of(requests: Iterable[Request], from_scheduled: bool = False) -> Latency | None:
    """Percentiles of the successful requests' latency, from the send or from
    the time each was due (only rows the open loop scheduled have one)."""
    starts = ((r, r.scheduled if from_scheduled else r.start) for r in requests if r.ok)
    values = sorted(r.end - start for r, start in starts if start is not None)
    if not values:
        return None
    return Latency(
        count=len(values),
        p50=percentile(values, 50),
        p90=percentile(values, 90),
        p99=percentile(values, 99),
        p999=percentile(values, 99.9),
        max=values[-1],
    )


def _largest_first(keys: Iterable[str]) -> dict[str, int]:
    # Largest first so the dominant failure mode leads every listing.
    counts = Counter(keys)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _outcomes(rows: Iterable[Request]) -> dict[str, int]:
    return _largest_first(r.outcome for r in rows)


def _by_class(failed: Iterable[Request]) -> dict[str, int]:
    return _largest_first(str(r.error) for r in failed)


def _kind_key(kind: str) -> tuple[int, str]:
    return (_KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER), kind)


def _mark_label(event: Event) -> str:
    text = event.fault if event.target is None else f"{event.fault} {event.target}"
    note = event.detail.get("label") if event.detail else None
    return f"{text}: {note}" if note else text


def _pair_windows(
    events: Sequence[Event], first: float, last: float
) -> list[tuple[Event | None, Event | None, float, float]]:
    """Pair start/end events per (fault, target), oldest open start first."""
    open_starts: dict[tuple[str, str | None], list[Event]] = {}
    pairs: list[tuple[Event | None, Event | None, float, float]] = []
    for event in events:
        key = (event.fault, event.target)
        if event.phase == "start":
            open_starts.setdefault(key, []).append(event)
        elif event.phase == "end":
            waiting = open_starts.get(key)
            if waiting:
                start = waiting.pop(0)
                pairs.append((start, event, start.time, event.time))
            else:
                # An end whose start predates the record: the fault was already on.
                pairs.append((None, event, min(first, event.time), event.time))
        elif event.phase != "mark":
            raise ValueError(
                f"event {event.fault!r} at {event.time} has phase {event.phase!r};"
                " expected 'start', 'end' or 'mark'"
            )
    for waiting in open_starts.values():
        for start in waiting:
            pairs.append((start, None, start.time, max(last, start.time)))
    pairs.sort(key=lambda p: (p[2], p[3]))
    return pairs


def check(
    history: History, threshold: float = DEFAULT_THRESHOLD, grace_s: float = DEFAULT_GRACE_S
) -> Verdict:
    """Judge a history. Passed means failure_rate <= threshold, inclusive: a run that
    fails exactly the allowed fraction meets its acceptance threshold. A history
    with no requests never passes, because it proved nothing, and neither does
    one whose rows do not match the requests it scheduled: a lost row could be
    a failure."""
    requests = list(history.requests)
    # Observations are what a scenario read to judge itself, not faults: they
    # neither make windows nor stretch the record's end.
    events = sorted((e for e in history.events if e.phase != OBSERVED), key=lambda e: e.time)
    label = str(history.meta.get("label") or history.meta.get("image") or "run")

    if requests:
        t0 = min(r.start for r in requests)
        t_last = max(r.end for r in requests)
    else:
        t0 = events[0].time if events else 0.0
        t_last = t0
    duration = t_last - t0
    # The history ends at its last observation, which may be a fault event after
    # the last request; an open window must cover it too.
    history_end = max([t_last, *(e.time for e in events)])

    failed = [r for r in requests if not r.ok]
    total = len(requests)
    gap = history.record_gap()
    rate = len(failed) / total if total else 0.0

    kinds: dict[str, KindStats] = {}
    by_kind: dict[str, list[Request]] = {}
    for r in requests:
        by_kind.setdefault(r.kind, []).append(r)
    for kind in sorted(by_kind, key=_kind_key):
        rows = by_kind[kind]
        kind_failed = [r for r in rows if not r.ok]
        kinds[kind] = KindStats(
            requests=len(rows),
            failures=len(kind_failed),
            failures_by_class=_by_class(kind_failed),
            latency=latency_of(rows),
            latency_from_scheduled=latency_of(rows, from_scheduled=True),
            outcomes=_outcomes(rows),
        )

    windows: list[FaultWindow] = []
    attributed: set[int] = set()
    for start_ev, end_ev, w_start, w_end in _pair_windows(events, t0, history_end):
        reach = w_end + grace_s
        overlapping = [r for r in requests if r.start <= reach and r.end >= w_start]
        w_failed = [r for r in overlapping if not r.ok]
        attributed.update(id(r) for r in w_failed)
        some = start_ev or end_ev
        assert some is not None
        windows.append(
            FaultWindow(
                fault=some.fault,
                target=some.target,
                start=w_start - t0,
                end=w_end - t0,
                unmatched=start_ev is None or end_ev is None,
                requests=len(overlapping),
                failures=len(w_failed),
                failures_by_class=_by_class(w_failed),
            )
        )
    outside = [r for r in failed if id(r) not in attributed]

    marks = [
        Mark(
            fault=e.fault,
            target=e.target,
            time=e.time - t0,
            label=_mark_label(e),
            detail=dict(e.detail),
        )
        for e in events
        if e.phase == "mark"
    ]

    return Verdict(
        label=label,
        duration_s=duration,
        requests=total,
        successes=total - len(failed),
        failures=len(failed),
        rps=total / duration if duration > 0 else 0.0,
        failure_rate=rate,
        threshold=threshold,
        passed=total > 0 and rate <= threshold and gap is None,
        failures_by_class=_by_class(failed),
        kinds=kinds,
        latency=latency_of(requests),
        outcomes=_outcomes(requests),
        grace_s=grace_s,
        windows=windows,
        marks=marks,
        failures_in_windows=len(failed) - len(outside),
        failures_outside=len(outside),
        outside_by_class=_by_class(outside),
        scheduled=history.scheduled,
        record_gap=gap,
        t0=t0,
    )
