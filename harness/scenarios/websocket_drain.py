"""websocket_drain: what a replica drain and a spot preemption do to an open
WebSocket, measured, not judged.

One cluster (head and two workers, the ticker app's 4 replicas on the
workers; the spot-notice ladder at `scale`, but no request timeout: Serve's
request_timeout_s bounds a WebSocket session as it does a request, and ends it
with no close frame, so a WebSocket app cannot run under one;
`request_timeout=True` keeps the ladder's to show that), two events:

  drain       sessions straight to the head's HAProxy, then the app scaled
              4 -> 2: two replicas stop gracefully and the head's HAProxy
              reloads
  preemption  the app back at 4, new sessions straight to the head's HAProxy
              and through the front LB, then a spot notice for the worker
              holding the most replicas (killed at its drain deadline)

Each session asks for more ticks than the event lasts, so none ends by
itself: the record says who ended each one (the server with a close frame
and its code, or nobody: the connection lost with no close frame, which a
client sees as 1006), when, and where its replica was. A client can reconnect
safely after a 1001 (going away) or 1012 (service restart) close; after a 1006
it cannot tell a crash from a drain.

Not in `make test`: it reports what happens and asserts nothing.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from harness.cluster import appconfigs, images
from harness.cluster.apps.ticker import TICK_INTERVAL_S
from harness.cluster.boundary import STOPPING
from harness.cluster.cluster import SERVE_PORT, Cluster, ClusterConfig
from harness.experiment.configs import RunConfig
from harness.experiment.history import Event, History
from harness.experiment.load import websocket_session
from harness.experiment.nemesis import spot_preemption
from harness.ladder.model import Ladder
from harness.scenarios.base import (
    PATCHED,
    STOCK,
    Facts,
    ImageRun,
    Scenario,
    haproxy_starts,
    logged_lines,
    observe_log_lines,
    watch_head_haproxy,
    with_runtime_servers,
)

SESSION_S = 60.0  # longer than either event
NODES = "replica nodes"  # observation: the ticker's replicas by container, before each event
PHASES = ("drain", "preemption")


@dataclass
class PhaseFacts:
    """What one event did to the sessions open across it."""

    # "via, whose replica: how it ended" -> "N at +first..+last s" after the event
    ended: dict[str, str]
    first_reload: str  # the head's first HAProxy reload after the event, "+2.1 s" or "none"
    replicas_by_worker: dict[str, int]  # the ticker's replicas per worker before it


@dataclass
class WebSocketFacts(Facts):
    phases: dict[str, PhaseFacts] = field(default_factory=dict)  # by PHASES

    def rows(self) -> dict:
        rows: dict = {}
        for phase, facts in self.phases.items():
            rows[f"{phase}: how sessions ended, seconds after the event"] = facts.ended
            rows[f"{phase}: head's first HAProxy reload"] = facts.first_reload
            rows[f"{phase}: replicas by worker before it"] = facts.replicas_by_worker
        return rows


class WebSocketDrain(Scenario[WebSocketFacts]):
    name = "websocket_drain"
    title = "Open WebSockets across a replica drain and a spot preemption"
    runs_on = (STOCK, PATCHED)

    def __init__(
        self, scale: float = 0.5, sessions: int = 8, request_timeout: bool = False
    ) -> None:
        self.ladder = Ladder().scaled(scale)
        self.scale, self.sessions = scale, sessions
        # Serve's request_timeout_s bounds a WebSocket session too, and ends it
        # with no close frame, so the events are measured without one (as a
        # WebSocket app must run); True keeps the ladder's, to show that.
        self.request_timeout = request_timeout

    def _http_options(self) -> dict:
        return self.ladder.http_options() if self.request_timeout else {}

    def _config(self, replicas: int) -> dict:
        return appconfigs.deploy_config(
            appconfigs.ticker_app(
                replicas,
                max_ongoing_requests=100,
                ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
                **self.ladder.deployment_options(),
            ),
            http_options=self._http_options(),
        )

    def configs(self, spec: images.ImageSpec) -> list[RunConfig]:
        return with_runtime_servers(spec)

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        history = History({"ladder_scale": self.scale, "http_options": self._http_options()})
        cluster_config = ClusterConfig(
            image=image_tag,
            name="rayspot-websocket",
            workers=2,
            env={**self.ladder.node_env(), **config.env},
            worker_resources={"w": 10},
        )
        with Cluster(cluster_config) as cluster:
            cluster.deploy(self._config(4))
            cluster.wait_lb_ready()
            asyncio.run(self._experiment(cluster, history))
            observe_log_lines(history, cluster, cluster.head, [STOPPING], "head")
        return history

    async def _experiment(self, cluster: Cluster, history: History) -> None:
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch_head_haproxy(cluster, history, stop))
        ticks = math.ceil(SESSION_S / TICK_INTERVAL_S)
        timeout_s = SESSION_S + 30

        def open_sessions(via_lb: bool, base: int) -> list[asyncio.Task]:
            host, port = ("127.0.0.1", cluster.lb_port) if via_lb else (cluster.head.ip, SERVE_PORT)
            return [
                asyncio.create_task(
                    websocket_session(
                        history, host, port, f"/ws/ticks?n={ticks}", ticks, base + i, timeout_s
                    )
                )
                for i in range(self.sessions)
            ]

        # Drain: two of the four replicas stop.
        self._observe_replicas(cluster, history, "drain")
        sessions = open_sessions(False, 0)
        await asyncio.sleep(2.0)
        history.add_event(
            Event(time.time(), "scale_down", "start", "ticker", {"label": "4 -> 2 replicas"})
        )
        await asyncio.to_thread(cluster.deploy, self._config(2), wait=False)
        await asyncio.gather(*sessions)
        history.add_event(Event(time.time(), "scale_down", "end", "ticker"))

        # Preemption: back to four, then a spot notice for the busiest worker.
        await asyncio.to_thread(cluster.deploy, self._config(4))
        await asyncio.sleep(3.0)
        target = self._observe_replicas(cluster, history, "preemption")
        sessions = open_sessions(False, 100) + open_sessions(True, 200)
        await asyncio.sleep(2.0)
        await spot_preemption(cluster, target, history, self.ladder.notice.ending_at_deadline())
        await asyncio.gather(*sessions)
        stop.set()
        await watcher

    def _observe_replicas(self, cluster: Cluster, history: History, phase: str):
        """Which container each ticker replica runs in; returns the worker
        holding the most (the preemption's target)."""
        node_ids = cluster.ray_node_ids()
        by_node = cluster.replicas_by_node("ticker", "Ticker")
        counts = {w.name: len(by_node.get(node_ids[w.name], [])) for w in cluster.workers}
        history.observe(NODES, counts, time.time(), target=phase)
        return max(cluster.workers, key=lambda w: counts[w.name])

    def judge(self, config: RunConfig, history: History) -> ImageRun[WebSocketFacts]:
        run = ImageRun(config.label, history, WebSocketFacts(), config)
        starts = {
            "drain": next(e.time for e in history.events if e.fault == "scale_down"),
            "preemption": next(e.time for e in history.events if e.fault == "spot_preemption"),
        }
        reloads = [t for t, _ in haproxy_starts(history)]
        for phase in PHASES:
            t0 = starts[phase]
            # Every row is a session's, numbered by websocket_session.
            rows = [
                (r, r.conn)
                for r in history.requests
                if r.conn is not None and (r.conn // 100 == 0) == (phase == "drain")
            ]
            first_reload = next((t for t in reloads if t >= t0), None)
            ended: dict[str, list[float]] = {}
            for row, conn in rows:
                via = "front LB" if conn >= 200 else "head's HAProxy"
                how = (row.detail or "").split(" after ")[0]
                key = f"{via}, {self._whose(history, phase, row)}: {how}"
                ended.setdefault(key, []).append(row.end - t0)
            run.facts.phases[phase] = PhaseFacts(
                ended={
                    key: f"{len(times)} at +{min(times):.1f}..+{max(times):.1f} s"
                    for key, times in sorted(ended.items())
                },
                first_reload=f"+{first_reload - t0:.1f} s" if first_reload else "none",
                replicas_by_worker=history.observed(NODES, phase)[0].detail["value"],
            )
        return run

    @staticmethod
    def _whose(history: History, phase: str, row) -> str:
        """Where the session's replica was, in the event's terms."""
        if row.replica is None:
            return "no replica answered"
        if phase == "drain":
            end = next(
                e.time for e in history.events if e.fault == "scale_down" and e.phase == "end"
            )
            stopped = any(
                row.replica in line and t <= end
                for t, line in logged_lines(history, "head", STOPPING)
            )
            return "replica stopped" if stopped else "replica kept"
        target = next(e.target for e in history.events if e.fault == "spot_preemption")
        assert target is not None  # the nemesis names the node it preempts
        return (
            "replica on the preempted node"
            if target.endswith(f"-{row.node}")
            else "replica on a surviving node"
        )

    def expect(self, runs: dict[str, ImageRun[WebSocketFacts]]) -> tuple[bool, list[str]]:
        """A measurement: the findings are what happened, and nothing is asserted."""
        findings = [
            f"{run.label}: {phase}: how sessions ended, seconds after the event: {facts.ended}"
            for run in runs.values()
            for phase, facts in run.facts.phases.items()
        ]
        return True, findings
