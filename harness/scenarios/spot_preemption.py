"""spot_preemption (the spot-notice ladder): a worker node gets a spot notice under mixed
load (short, long-runner, streaming) through the front load balancer.

The nemesis plays the node agent: notice, detection delay, a GCS drain with
reason PREEMPTION and a deadline, and the container killed when the notice
ends. The spot-notice ladder (with ordering E) runs at full scale by default:
notice 120 s, detection 10 s, drain deadline 60 s. `scale` multiplies every
time by one factor, which keeps every ordering (make test runs it at 0.5).

Pass: no failed request; every replica on the node retired before the kill;
the node's death reason is AUTOSCALER_DRAIN_PREEMPTED. The report carries the
timeline of the drain, from the notice to the kill, with measured times.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from harness.cluster import appconfigs
from harness.cluster.boundary import STOPPING, Node, RayCluster
from harness.cluster.cluster import METRICS_PORT, ClusterConfig
from harness.experiment.configs import FAST_HAPROXY_METRICS, RunConfig
from harness.experiment.history import History
from harness.experiment.load import HTTPConnection, LoadSpec, Mix, open_loop
from harness.experiment.nemesis import spot_preemption
from harness.ladder.model import Ladder
from harness.scenarios.base import (
    AFTER,
    BEFORE,
    Facts,
    ImageRun,
    Scenario,
    fact,
    haproxy_counted,
    lb_errors,
    logged,
    observe_haproxy_counters,
    observe_lb_errors,
    observe_log_lines,
)

PREEMPTED = "AUTOSCALER_DRAIN_PREEMPTED"
LEAD_S = 5.0  # steady load before the notice
# What the scenario reads from the cluster, kept in the history as observations.
TARGET = "target node"  # name, Ray node id, and the ids of the replicas it held
PREEMPTION = "preemption"  # the nemesis's record: notice, drain answer, kill
FIRST_UNHEALTHY = "first non-200 healthz"  # when the node's /-/healthz stopped saying 200
DEATH = "node death"  # the GCS's record of the dead node
REPLICAS_AFTER = "target replicas after"  # those replicas' actor states and end times
EXITED = "container exited"  # when `ray start --block` ended by itself, or None
TAIL_S = 8.0  # load after the node is gone

# (timeline row, node whose Serve logs hold it, text in the log line)
LOG_ROWS = [
    ("controller: replicas on the node marked for migration", "head", "Migrating "),
    ("controller: first replica on the node STOPPING", "head", STOPPING),
    ("replica: phase 1, reachable for MIN_DRAINING", "target", "Draining: staying reachable"),
    ("replica: listener closed (phase 2)", "target", "closing the direct ingress HTTP listener"),
    ("replica: graceful shutdown complete", "target", "Graceful shutdown complete"),
    ("controller: replica stopped", "head", " is stopped."),
    ("controller: drained proxy removed", "head", "Removing drained proxy"),
    ("raylet: drained and idle, shuts itself down", "raylet", "The node is drained"),
]


@dataclass
class SpotFacts(Facts):
    ladder: str = fact("ladder (scaled)")  # as it ran: the ladder's defaults may change
    death: dict | None = fact("death")  # the GCS's record of the node, None if not dead in time
    # (event, when it happened or None if not seen), from the notice to the kill
    timeline: list[tuple[str, float | None]] = fact("timeline")
    counted: str = fact("counted by the head's HAProxy manager during the preemption")
    # Where a failed request met its error: the node's proxy, or the LB itself.
    lb_errors: str = fact("front LB's errors, by node")

    def listed(self) -> dict:
        # report.md tables the timeline of every run side by side instead.
        return {k: v for k, v in self.rows().items() if k != "timeline"}


class SpotPreemption(Scenario[SpotFacts]):
    name = "spot_preemption"
    title = "Spot preemption under mixed load, spot-notice ladder"
    needs = frozenset({"terminate"})

    def __init__(self, scale: float = 1.0, rate: float = 25.0) -> None:
        self.ladder = Ladder().scaled(scale)
        self.scale, self.rate = scale, rate

    def cluster_config(self, image_tag: str, config: RunConfig) -> ClusterConfig:
        """Two workers, the ladder's node env, metrics read each second."""
        return ClusterConfig(
            image=image_tag,
            name="rayspot-spot",
            workers=2,
            env={**self.ladder.node_env(), **FAST_HAPROXY_METRICS, **config.env},
            worker_resources={"w": 10},
            metrics_port=METRICS_PORT,
        )

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        ladder = self.ladder
        history = History({"ladder_scale": self.scale, "ladder": self._ladder_text()})
        app = appconfigs.deploy_config(
            appconfigs.echo_app(
                num_replicas=4,
                max_replicas_per_node=None,
                ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
                # The echo handler only sleeps: let a replica hold the
                # long-runners of this load without queueing them.
                max_ongoing_requests=100,
                **ladder.deployment_options(),
            ),
            http_options=ladder.http_options(),
        )
        with self.open_cluster(image_tag, config) as cluster:
            cluster.deploy(app)
            cluster.wait_lb_ready()
            target, target_id, replicas = preemption_target(cluster)
            history.observe(
                TARGET,
                {"name": target.name, "node_id": target_id, "replicas": replicas},
                time.time(),
            )
            observe_haproxy_counters(cluster, history, BEFORE)
            outcome, first_503 = asyncio.run(self._experiment(cluster, target, history))
            observe_haproxy_counters(cluster, history, AFTER)
            observe_lb_errors(cluster, history)
            history.observe(PREEMPTION, outcome, outcome["killed"])
            history.observe(FIRST_UNHEALTHY, first_503, first_503 or time.time())
            history.observe(DEATH, _wait_for_death(cluster, target_id), time.time())
            history.observe(
                REPLICAS_AFTER, [a for a in cluster.actors() if a["id"] in replicas], time.time()
            )
            for where in ("head", "target", "raylet"):
                observe_log_lines(
                    history,
                    cluster,
                    cluster.head if where == "head" else target,
                    [needle for _, w, needle in LOG_ROWS if w == where],
                    where,
                    "/logs/raylet.out" if where == "raylet" else "/logs/serve/",
                )
            exited_at = cluster.exit_time(target)
            history.observe(EXITED, exited_at, exited_at or time.time())
        return history

    def _ladder_text(self) -> str:
        ladder = self.ladder
        return (
            f"x{self.scale}: notice {ladder.notice.notice_s:g} s, detection "
            f"{ladder.notice.detection_s:g} s, drain deadline "
            f"{ladder.notice.drain_deadline_s:g} s, env {ladder.node_env()}, "
            f"{ladder.deployment_options()}"
        )

    async def _experiment(self, cluster: RayCluster, target: Node, history: History):
        ladder = self.ladder
        duration = LEAD_S + ladder.notice.notice_s + TAIL_S
        spec = LoadSpec(
            rate=self.rate,
            duration_s=duration,
            connections=96,
            mix=Mix(
                short=0.85,
                long=0.10,
                stream=0.05,
                long_s=(ladder.long_runner_min_s, ladder.known_long_runner_s),
            ),
            timeout_s=ladder.known_request_timeout_s + 30,
        )
        load = asyncio.create_task(open_loop(*cluster.ingress, spec, history))
        stop = asyncio.Event()
        healthz = asyncio.create_task(_first_unhealthy(target.ip, cluster.serve_port, stop))
        await asyncio.sleep(LEAD_S)
        outcome = await spot_preemption(cluster, target, history, ladder.notice)
        stop.set()
        await load
        return outcome, await healthz

    def judge(self, config: RunConfig, history: History) -> ImageRun[SpotFacts]:
        target, outcome = history.value(TARGET), history.value(PREEMPTION)
        replicas, after = target["replicas"], history.value(REPLICAS_AFTER)
        death, exited_at = history.value(DEATH), history.value(EXITED)
        t0, killed = outcome["t0"], outcome["killed"]
        deadline = outcome["drain"]["deadline"]
        gone_by = min(killed, exited_at) if exited_at else killed
        retired = [a for a in after if a["state"] == "DEAD" and a["end"] and a["end"] <= gone_by]
        reason = death.get("DeathReason") if death else None
        target = target["name"]
        checks = [
            (
                f"{target} held {len(replicas)} replicas, and every one retired before the "
                f"node went away",
                bool(replicas) and len(retired) == len(replicas),
            ),
            (f"death reason {reason} is {PREEMPTED}", str(reason) == PREEMPTED),
            ("the node was not killed before its drain deadline", killed >= deadline - 0.05),
        ]
        rows = [
            ("notice (T0)", t0),
            ("drain sent (GCS, PREEMPTION, deadline)", outcome["drain"]["sent"]),
        ]
        rows.append(
            ("node /-/healthz answers 503 (front LB deregisters)", history.value(FIRST_UNHEALTHY))
        )
        for title, where, needle in LOG_ROWS:
            stamps = logged(history, where, needle, since=t0 - 0.5)
            rows.append((title, stamps[0] if stamps else None))
        rows.append(("container exited by itself (`ray start --block` ended)", exited_at))
        rows.append(("drain deadline", deadline))
        rows.append(
            (
                "container killed (notice ends)"
                if not outcome["exited_before_kill"]
                else "notice ends (node already gone)",
                killed,
            )
        )
        facts = SpotFacts(
            ladder=history.meta["ladder"],
            death=death,
            timeline=rows,
            counted=haproxy_counted(config, history),
            lb_errors=lb_errors(history),
        )
        return ImageRun(config.label, history, facts, config, checks=checks)

    def sections(self, runs: dict[str, ImageRun[SpotFacts]]) -> dict[str, str]:
        sections = super().sections(runs)
        lines = ["| event | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
        first = next(iter(runs.values())).facts.timeline
        for index, (title, _) in enumerate(first):
            cells = []
            for run in runs.values():
                t0 = run.facts.timeline[0][1]
                stamp = run.facts.timeline[index][1]
                cells.append(f"+{stamp - t0:.2f} s" if stamp and t0 is not None else "not seen")
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
        sections["Timeline after the notice"] = "\n".join(lines)
        return sections


def preemption_target(cluster: RayCluster) -> tuple[Node, str, list[str]]:
    """The worker that holds the most echo replicas, its Ray node id, and the
    ids of those replicas: the node a preemption costs the most."""
    node_ids = cluster.ray_node_ids()
    by_node = cluster.replicas_by_node("echo", "Echo")
    target = max(cluster.workers, key=lambda w: len(by_node.get(node_ids[w.name], [])))
    target_id = node_ids[target.name]
    return target, target_id, [r["id"] for r in by_node.get(target_id, [])]


async def _first_unhealthy(ip: str, port: int, stop: asyncio.Event) -> float | None:
    """Poll the node's /-/healthz as the front LB does; the first non-200."""
    while not stop.is_set():
        conn = HTTPConnection(ip, port, -1)
        row = await conn.get("/-/healthz", "healthz", 1.0)
        conn.close()
        if row.status is not None and row.status != 200:
            return row.start
        await asyncio.sleep(0.25)
    return None


def _wait_for_death(cluster: RayCluster, node_id: str, timeout_s: float = 90.0) -> dict | None:
    """The GCS's record of the node once it is dead (a killed raylet takes a
    few health-check periods to be declared dead)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = cluster.ray_node(node_id)
        if not info["Alive"]:
            return info
        time.sleep(2)
    return None
