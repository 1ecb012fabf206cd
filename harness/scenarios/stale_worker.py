"""stale_worker_drain (the two-phase drain): a stale HAProxy worker routes to a draining
replica. Stock 2.59.0 severs those requests; 2.60.0 refuses them at connect
time after the drain window, HAProxy redispatches them, and none fails.

One event:
  1. open K keep-alive connections to the head node's HAProxy and send one
     request on each, again on new ones until two attempts in a row reached
     both replicas; leave them idle (they now belong to the current worker)
  2. start long "pin" requests on both replicas: they keep the replica that
     will stop busy, so it is still in its drain loop after the window
  3. scale 2 -> 1 replicas (a lightweight update); Serve stops one replica
     and reloads HAProxy, whose old worker keeps the idle connections
  4. at STOP + ~7 s (after MIN_DRAINING = 5 s, before the force-kill at
     STOP + 10 s) send a request of 8 s on every stale connection at once,
     plus fresh-connection controls
The stale requests that the old worker sends to the stopping replica outlive
its force-kill: on 2.59.0 they fail, on 2.60.0 they are never admitted.

The client talks to the head node's HAProxy directly, not through the front
LB: the stale connections must be the client's own, held by the old worker.
Pins are not judged (they outlive the force-kill on both versions by design);
their outcome is reported as a fact.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from harness.cluster import appconfigs
from harness.cluster.boundary import STOPPING, RayCluster, logged_replica_id
from harness.cluster.cluster import METRICS_PORT, ClusterConfig
from harness.core import log
from harness.core.errors import HarnessError
from harness.experiment.configs import FAST_METRICS, FORCE_KILL_COVERS_REQUEST_TIMEOUT, RunConfig
from harness.experiment.history import Event, History, Request
from harness.experiment.load import HTTPConnection, send
from harness.scenarios.base import (
    HEAD_PIDS,
    PATCHED,
    STOCK,
    Facts,
    ImageRun,
    Scenario,
    fact,
    haproxy_starts,
    head_watch_ended,
    logged_lines,
    observe_log_lines,
    observe_shutdown_counters,
    shutdowns_counted,
    watch_head_haproxy,
)

_log = log.get(__name__)

MIN_DRAINING_S = 5.0
PINS = "pin outcomes"  # observation: each event's pins, by error class
# Observation: per event, the stale connections the client had to reopen
# before or for its late request.
REOPENED = "stale connections reopened"
LATE_SENT = "late requests sent"
# Connection numbers: event n's from n * EVENT_CONNS; within it, prime attempt
# k's from k * CONNS_PER_ATTEMPT, then the controls', then the pins'.
PRIME_ATTEMPTS = 5
CONNS_PER_ATTEMPT = 100
CONTROLS_AT = PRIME_ATTEMPTS * CONNS_PER_ATTEMPT
PINS_AT = 900
EVENT_CONNS = 1000
ENV = {
    **FAST_METRICS,
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": f"{MIN_DRAINING_S:g}",
    # Old workers must outlive the event with their idle connections intact.
    "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": "60",
    # The default differs: 0 on 2.59.0, 1 on 2.60.0. Pinned so that only the
    # drain differs between the runs.
    "RAY_SERVE_HAPROXY_OBSERVE_MARK_DOWN_ENABLED": "1",
}


def _app(replicas: int, request_timeout_s: float | None = None) -> dict:
    # gst = MIN_DRAINING + 5 s: the force-kill lands at STOP + 10 s, the relation
    # of the defaults (30 s window, 35 s floor). Set explicitly: the declarative
    # deploy path here did not apply Serve's floor (the controller force-killed
    # at STOP + MIN_DRAINING with gst 1), so relying on it would compare
    # different budgets.
    return appconfigs.deploy_config(
        appconfigs.echo_app(
            num_replicas=replicas,
            max_replicas_per_node=None,
            ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
            graceful_shutdown_timeout_s=MIN_DRAINING_S + 5,
            graceful_shutdown_wait_loop_s=2,
            max_ongoing_requests=100,
        ),
        http_options={"request_timeout_s": request_timeout_s} if request_timeout_s else None,
    )


@dataclass
class StaleFacts(Facts):
    failed_per_event: list[int] = fact("failed stale requests per event")
    late_sent_at: list[str] = fact("late requests sent at STOP +")  # "6.21 s", "?": no stop seen
    # "2 (-3.10 s)": two attempts, the kept one sent 3.1 s before the stop.
    primed: list[str] = fact("prime attempts per event (the kept one, s from the stop)")
    # Per event a list, or "?" with no stop seen; "not recorded" unwatched.
    reloads: list[list[str] | str] | str = fact(
        "new head HAProxy processes per event, s from the stop"
    )
    pins_failed: list[int] = fact("pins failed per event (cut or timed out; on every version)")
    # "?": no stop seen.
    stopping_completed: list[int | str] = fact(
        "stale requests the stopping replica completed per event"
    )
    reopened: list[int] | str = fact(
        "stale connections reopened per event (0: every late request went out on its primed "
        "connection)"
    )
    shutdowns: str = fact("replica shutdowns, as the controller counted them")
    # Per event not shown to have sent its stale requests to the stopping
    # replica through a stale worker: "event 2: why".
    unshown: list[str] = field(default_factory=list)


def _wait_for_two_replicas(cluster: RayCluster, timeout_s: float = 90.0) -> None:
    """Wait until exactly the two replicas the event needs are alive, twice in a
    row a second apart.

    The app can be RUNNING with a third replica alive: one replacing a replica
    that failed a health check while starting on a busy host, or the previous
    event's replica still stopping. Scaling down then stops that one, which
    serves nothing, and the event cuts no request on any version (seen once as
    stock "not reproduced" in one event)."""
    deadline = time.monotonic() + timeout_s
    steady = 0
    while steady < 2:
        if time.monotonic() > deadline:
            raise HarnessError(
                f"the echo app did not settle at 2 alive replicas in {timeout_s:.0f} s "
                f"(alive: {sorted(cluster.replica_names('echo', 'Echo'))})"
            )
        steady = steady + 1 if len(cluster.replica_names("echo", "Echo")) == 2 else 0
        if steady < 2:
            time.sleep(1.0)


def _reached_both(primes: list[Request]) -> bool:
    """Every prime succeeded and they were served by two replicas or more."""
    return all(not p.error for p in primes) and len(_served_by(primes)) >= 2


def _served_by(primes: list[Request]) -> set[str]:
    return {p.replica for p in primes if p.replica}


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} s"


@dataclass
class _EventFacts:
    failed: int  # stale requests that failed
    late_sent_at: float | None  # from the stop; None: no stop seen
    prime_attempts: int
    primed_at: float | None  # the kept attempt's first prime, from the stop
    # New head HAProxy processes since the last event, from the stop; None: no stop seen.
    reloads_at: list[float] | None
    stopping_completed: int | None  # stale requests the stopped replica served
    # Why its stale requests may never have been sent to the stopping replica
    # through a stale worker; empty when the history shows they were.
    unshown: list[str]


def _per_event(
    history: History, late_window_s: tuple[float, float] = (0.0, float("inf"))
) -> list[_EventFacts]:
    """Each event's facts, from its marks, its rows (a prime's connection
    number says its event and attempt), the controller's "Stopping Replica"
    lines, the head's HAProxy processes and the reopened connections.
    `late_window_s`: when, from the stop, the late requests must go."""
    marks = [e for e in history.events if e.detail.get("label") == LATE_SENT]
    starts = [e.time for e in history.events if e.fault == "scale_down" and e.phase == "start"]
    ends = [e.time for e in history.events if e.fault == "scale_down" and e.phase == "end"]
    stopped = [(t, logged_replica_id(line)) for t, line in logged_lines(history, "head", STOPPING)]
    watched = bool(history.observed(HEAD_PIDS, "head"))
    watch_ended = head_watch_ended(history)
    reloads = [t for t, _ in haproxy_starts(history)]
    reopened = {e.target: e.detail["value"] for e in history.observed(REOPENED)}
    events = []
    for number, mark in enumerate(marks):
        begin = starts[number]
        end = starts[number + 1] if number + 1 < len(starts) else float("inf")
        since = ends[number - 1] if number > 0 else float("-inf")
        until = ends[number] if number < len(ends) else float("inf")
        # The start mark is read before the scale-down is sent, so on one
        # clock the stop line comes after it; the second allows for a head
        # whose clock is behind the client's (a cluster of your own).
        stop, replica = next(((t, r) for t, r in stopped if begin - 1.0 <= t < end), (None, None))
        stale = [r for r in history.requests if r.kind == "stale" and begin <= r.start < end]
        attempts: dict[int, list[Request]] = {}
        for r in history.requests:
            if r.kind == "prime" and r.conn is not None and r.conn // EVENT_CONNS == number:
                attempts.setdefault(r.conn % EVENT_CONNS // CONNS_PER_ATTEMPT, []).append(r)
        tried = [attempts[k] for k in sorted(attempts)]
        kept = tried[-1] if tried else []
        in_window = [t for t in reloads if since < t <= until]
        unshown = []
        if len(tried) < 2 or not all(_reached_both(a) for a in tried[-2:]):
            unshown.append("its last two prime attempts did not each reach both replicas")
        if reopened.get(f"event {number}"):
            unshown.append(f"{reopened[f'event {number}']} stale connections were reopened")
        if stop is None:
            unshown.append("no Stopping Replica line: which replica stopped, and when, is unknown")
        else:
            if kept and replica not in _served_by(kept):
                unshown.append("the replica that stopped served none of its kept primes")
            low, high = late_window_s
            if not low <= mark.time - stop < high:
                unshown.append(
                    f"the late requests went at STOP + {mark.time - stop:.2f} s, not in "
                    f"{low:g}-{high:g} s"
                )
            # What makes the kept connections stale is a new process after
            # the stop and after their primes were answered. The controller
            # logs the stop before it hands the proxies the smaller replica
            # set, and the watch stamps a new process when it sees it, on the
            # head's clock too, so the reload that retires the replica comes
            # after the stop line.
            opens = max([stop, *(p.end for p in kept)])
            reloaded = any(opens < t <= mark.time for t in reloads)
            if not watched:
                unshown.append("the head's HAProxy processes were not recorded")
            elif not reloaded and watch_ended is not None and watch_ended < mark.time:
                unshown.append("the head's HAProxy processes were not watched to the late send")
            elif not reloaded:
                unshown.append(
                    "the head's HAProxy did not reload between the stop and the late send"
                )
        events.append(
            _EventFacts(
                failed=sum(1 for r in stale if r.error),
                late_sent_at=None if stop is None else mark.time - stop,
                prime_attempts=len(tried),
                primed_at=None if stop is None or not kept else min(p.start for p in kept) - stop,
                reloads_at=None if stop is None else [t - stop for t in in_window],
                stopping_completed=None
                if replica is None
                else sum(1 for r in stale if not r.error and r.replica == replica),
                unshown=unshown,
            )
        )
    return events


def _primes_seen(primes: list[Request]) -> str:
    errors = sorted({p.error for p in primes if p.error})
    return f"replicas {sorted(_served_by(primes))}" + (f", errors {errors}" if errors else "")


class StaleWorkerDrain(Scenario[StaleFacts]):
    name = "stale_worker_drain"
    title = "Stale HAProxy worker routing to a draining replica (the two-phase drain)"
    request_timeout_s: float | None = None  # http_options.request_timeout_s
    prime_retry_s = 2.0  # between attempts to prime on a worker that routes to both replicas
    # When, from the stop, the late requests must go: after the drain window,
    # before the force-kill at STOP + graceful_shutdown_timeout_s.
    late_window_s = (MIN_DRAINING_S, MIN_DRAINING_S + 5)
    # It talks to the head's HAProxy directly and changes no node; on a
    # cluster of your own its nodes need ENV (docs/existing-cluster.md).
    needs = frozenset[str]()

    def __init__(
        self,
        events: int = 2,
        stale: int = 20,
        pins: int = 4,
        controls: int = 5,
        send_after_s: float = 6.2,
        late_sleep_s: float = 8.0,
    ) -> None:
        # Two stale connections at least, to reach both replicas; each
        # count within its range of connection numbers.
        for what, count, low, high in (
            ("stale", stale, 2, CONNS_PER_ATTEMPT),
            ("controls", controls, 0, PINS_AT - CONTROLS_AT),
            ("pins", pins, 0, EVENT_CONNS - PINS_AT),
        ):
            if not low <= count <= high:
                raise HarnessError(f"{what} must be {low} to {high}, not {count}")
        self.events, self.stale, self.pins, self.controls = events, stale, pins, controls
        self.send_after_s, self.late_sleep_s = send_after_s, late_sleep_s

    # Node settings on top of ENV.
    extra_env: dict[str, str] = {}

    def cluster_config(self, image_tag: str, config: RunConfig) -> ClusterConfig:
        """One worker; the head's HAProxy has the long hard stop and short drain window of ENV."""
        return ClusterConfig(
            image=image_tag,
            name="rayspot-stale",
            workers=1,
            env={**ENV, **self.extra_env, **config.env},
            worker_resources={"w": 10},
            metrics_port=METRICS_PORT,
        )

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        history = History()
        started = time.monotonic()
        with self.open_cluster(image_tag, config) as cluster:
            asyncio.run(self._events(cluster, history, started))
            observe_log_lines(history, cluster, cluster.head, [STOPPING], "head")
            if config.image.flavor != "stock":
                # One replica stops in each event.
                observe_shutdown_counters(cluster, history, stopped=self.events)
        return history

    def judge(self, config: RunConfig, history: History) -> ImageRun[StaleFacts]:
        events = _per_event(history, self.late_window_s)
        reopened = [e.detail["value"] for e in history.observed(REOPENED)]
        watched = bool(history.observed(HEAD_PIDS, "head"))
        facts = StaleFacts(
            failed_per_event=[e.failed for e in events],
            late_sent_at=[_seconds(e.late_sent_at) for e in events],
            primed=[f"{e.prime_attempts} ({_seconds(e.primed_at)})" for e in events],
            reloads=[
                "?" if e.reloads_at is None else [_seconds(t) for t in e.reloads_at] for e in events
            ]
            if watched
            else "not recorded",
            pins_failed=[
                sum(1 for error in e.detail["value"]["done"] if error)
                for e in history.observed(PINS)
            ],
            stopping_completed=[
                "?" if e.stopping_completed is None else e.stopping_completed for e in events
            ],
            reopened=reopened if reopened else "not recorded",
            shutdowns=shutdowns_counted(config, history),
            unshown=[
                f"event {number + 1}: {', '.join(e.unshown)}"
                for number, e in enumerate(events)
                if e.unshown
            ],
        )
        check = (
            "each event sent its stale requests through a stale worker that routed to the "
            "stopping replica"
            + (f" (not shown: {'; '.join(facts.unshown)})" if facts.unshown else ""),
            not facts.unshown,
        )
        return ImageRun(config.label, history, facts, config, checks=[check])

    async def _events(self, cluster: RayCluster, history: History, started: float) -> None:
        """Every event, with the head's HAProxy processes watched throughout:
        when it reloaded tells whether the stale connections' worker knew the
        replica that stopped."""
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch_head_haproxy(cluster, history, stop))
        try:
            for number in range(self.events):
                await asyncio.to_thread(cluster.deploy, _app(2, self.request_timeout_s))
                await asyncio.to_thread(_wait_for_two_replicas, cluster)
                log.progress(
                    _log, f"{self.name}: event {number + 1} of {self.events} under load", started
                )
                await self._event(cluster, history, number)
        finally:
            stop.set()
            try:
                await watcher
            except Exception as exc:  # the record so far is kept; the judge says what is missing
                _log.warning("the head's HAProxy processes were not watched: %r", exc)

    async def _event(self, cluster: RayCluster, history: History, number: int) -> None:
        host, port, base = cluster.head.ip, cluster.serve_port, number * EVENT_CONNS
        stale = await self._prime(history, host, port, base)
        # Pins are not judged as requests: they outlive the force-kill on every
        # version by design. Their outcome is kept as an observation.
        pin_conns = [HTTPConnection(host, port, base + PINS_AT + i) for i in range(self.pins)]
        pins = [asyncio.create_task(c.get("/?sleep=40", "pin", 60)) for c in pin_conns]
        await asyncio.sleep(1.0)

        history.add_event(
            Event(
                time.time(), "scale_down", "start", f"event {number}", {"label": "2 -> 1 replicas"}
            )
        )
        await asyncio.to_thread(cluster.deploy, _app(1, self.request_timeout_s), wait=False)
        returned = time.time()
        history.add_event(
            Event(returned, "scale_down", "mark", f"event {number}", {"label": "deploy returned"})
        )
        await asyncio.sleep(max(0.0, returned + self.send_after_s - time.time()))
        history.add_event(
            Event(time.time(), "scale_down", "mark", f"event {number}", {"label": LATE_SENT})
        )
        path = f"/?sleep={self.late_sleep_s:g}"
        controls = [
            HTTPConnection(host, port, base + CONTROLS_AT + i) for i in range(self.controls)
        ]
        await asyncio.gather(
            *(send(history, c, path, "stale", 30) for c in stale),
            *(send(history, c, path, "control", 30) for c in controls),
        )
        history.add_event(Event(time.time(), "scale_down", "end", f"event {number}"))

        history.observe(
            REOPENED, sum(c.connects > 1 for c in stale), time.time(), target=f"event {number}"
        )
        done = [p.result().error for p in pins if p.done()]
        history.observe(
            PINS,
            {"done": done, "running": len(pins) - len(done)},
            time.time(),
            target=f"event {number}",
        )
        for p in pins:
            p.cancel()
        await asyncio.gather(*pins, return_exceptions=True)
        for conn in stale + controls + pin_conns:
            conn.close()

    async def _prime(
        self, history: History, host: str, port: int, base: int
    ) -> list[HTTPConnection]:
        """Open the stale connections and send one request on each: again on
        new ones, `prime_retry_s` apart, until two attempts in a row each
        reached both replicas, and keep the second's.

        `deploy` returns when the app is RUNNING, which can be before the
        head's HAProxy has reloaded with the replica the event just added, and
        scaling down stops the newest replica, that one. Connections opened
        before the reload belong to a worker that knows only the other
        replica; once stale, that worker sends nothing to the stopping one,
        and the event can cut no request on any version. An attempt that
        reached both replicas shows a worker that knows both was taking
        connections, but some of its connections may have gone to the worker
        it replaced; the next attempt, a pause later, is opened after that
        one stopped taking them. Replies cannot show which worker holds a
        connection, so the judge also checks that the replica that stopped
        served some kept primes and that the head reloaded before the late
        send. Every attempt's primes stay in the history; if no two in a row
        reached both replicas, the last attempt's connections are kept and
        the run's check says so."""
        reached_before = False
        for attempt in range(PRIME_ATTEMPTS):
            first = base + attempt * CONNS_PER_ATTEMPT
            conns = [HTTPConnection(host, port, first + i) for i in range(self.stale)]
            primes = await asyncio.gather(*(send(history, c, "/", "prime", 10) for c in conns))
            reached = _reached_both(primes)
            if (reached and reached_before) or attempt == PRIME_ATTEMPTS - 1:
                break
            reached_before = reached
            for c in conns:
                c.close()
            if not reached:
                _log.info("primes reached %s; priming again", _primes_seen(primes))
            await asyncio.sleep(self.prime_retry_s)
        if not (reached and reached_before):
            _log.warning(
                "the primes did not reach both replicas twice in a row in %d attempts (the last "
                "reached %s); the head's HAProxy may not have reloaded, or it balances by source "
                "or URI; the event goes on and its run's check fails",
                PRIME_ATTEMPTS,
                _primes_seen(primes),
            )
        return conns

    def expect(self, runs: dict[str, ImageRun[StaleFacts]]) -> tuple[bool, list[str]]:
        *baselines, fixed = runs.values()
        findings = []
        for run in baselines:
            failed = run.facts.failed_per_event
            every = all(n >= 1 for n in failed)
            findings.append(
                f"{run.label}: failed stale requests per event {failed} "
                f"({'reproduced in every event' if every else 'NOT reproduced'})"
            )
        reproduced = all(n >= 1 for run in baselines for n in run.facts.failed_per_event)
        assert fixed.verdict is not None  # judge_runs gave every run its verdict
        fixed_failed = fixed.verdict.failures
        by_kind = ", ".join(
            f"{kind} {stats.failures}"
            for kind, stats in sorted(fixed.verdict.kinds.items())
            if stats.failures
        )
        findings.append(
            f"{fixed.label}: {fixed_failed} failed request{'' if fixed_failed == 1 else 's'} in "
            f"{len(fixed.facts.failed_per_event)} events" + (f" ({by_kind})" if by_kind else "")
        )
        unshown = [run for run in runs.values() if run.facts.unshown]
        for run in unshown:
            findings.append(
                f"{run.label}: not shown to have sent the stale requests to the stopping "
                f"replica ({'; '.join(run.facts.unshown)}): those events prove nothing"
            )
        if baselines and not reproduced and fixed_failed == 0:
            findings.append(
                "the baseline did not fail in every event: the scenario did not "
                "reproduce the bug, so it proves nothing about the fix"
            )
        return reproduced and fixed_failed == 0 and not unshown, findings


class DrainWindowAdmission(StaleWorkerDrain):
    """drain_window_admission (ordering E): the same event, but the
    long requests arrive on the stale connections inside the drain window
    (STOP + ~3.5 s, window 5 s), where the stopping replica still admits them.
    They need 12 s, so they outlive the force-kill at the floor STOP + 10 s
    (MIN_DRAINING + SHUTDOWN_BUFFER_S) by ~5 s: stock 2.60.0 cuts the ones the
    old worker sends to the stopping replica. (With 8 s they ended only ~1 s
    after the kill, and a controller slow to kill on a loaded host let them
    finish: the bug went unreproduced.) With the ordering-E patch and a
    request timeout of 15 s, the budget is MIN + 15 s + the wait loop + a
    margin, which covers them.
    """

    name = "drain_window_admission"
    title = "Long requests admitted inside the drain window (ordering E)"
    request_timeout_s = 15.0
    late_window_s = (0.0, MIN_DRAINING_S)  # inside the drain window
    extra_env = FORCE_KILL_COVERS_REQUEST_TIMEOUT

    def __init__(
        self,
        events: int = 2,
        stale: int = 20,
        pins: int = 4,
        controls: int = 5,
        send_after_s: float = 2.5,
        late_sleep_s: float = 12.0,
    ) -> None:
        super().__init__(events, stale, pins, controls, send_after_s, late_sleep_s)

    runs_on = (STOCK, PATCHED)
