"""Replica health scenarios (push-based health): stock 2.60.0, which probes every
replica, against the patched image with RAY_SERVE_ENABLE_PUSH_HEALTH=1.

    health_failure   a replica's check starts failing; it is replaced in both,
                     and the time to detect is reported for each
    controller_lag   SIGSTOP/SIGCONT cycles on the controller under load; with
                     push no replica is falsely killed (stock's count reported).
                     On 2.60.0 stock logs no strike either: on SIGCONT the core
                     worker completes the probe replies that arrived during the
                     stop before the control loop looks at them.
    slow_head_link   the head's network link throttled (a token bucket both
                     ways) for several health-check periods, twice, under load
                     routed around the head: no healthy replica may be
                     replaced and no request lost
    slow_worker_link the same on one worker's link, half the fleet behind it: a
                     measurement of what each mode does
    hung_replica     one replica's process stopped (SIGSTOP): its connections
                     open and nothing answers, its own checks included; the
                     time each mode takes to detect and replace it
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from harness.cluster import appconfigs, images
from harness.cluster.boundary import Node, RayCluster, Unavailable
from harness.cluster.cluster import METRICS_PORT, Cluster, ClusterConfig
from harness.core import log
from harness.experiment.configs import FAST_METRICS, PUSH_HEALTH, RunConfig
from harness.experiment.health import (
    PERIOD_S,
    TIMEOUT_S,
    UNHEALTHY,
    VERDICTS,
    health_counters,
    wait_for_unhealthy,
    wait_replaced,
)
from harness.experiment.history import Event, History
from harness.experiment.load import LoadSpec, open_loop
from harness.experiment.nemesis import (
    controller_lag,
    fail_health_check,
    hang_replica,
    slow_link,
)
from harness.scenarios.base import (
    PATCHED,
    STOCK,
    F,
    Facts,
    ImageRun,
    Scenario,
    docker_only,
    fact,
    logged,
    observe_log_lines,
)

_log = log.get(__name__)

# Observations: when the controller logged the failing replica unhealthy and
# when it was gone from the alive replicas (None: not within the wait), the
# replica names around a lag, and the probe rate before and after a pause.
# The controller's unhealthy log lines are kept as base.LOG_LINE.
DETECTED, REPLACED = "detected unhealthy", "replaced"
REPLICAS_BEFORE, REPLICAS_AFTER = "replicas before", "replicas after"
# The controller's health counters at the end of a run (health.HEALTH_COUNTERS).
COUNTED = "health counters"


@dataclass
class FailureFacts(Facts):
    detect: str = fact("time to detect")  # "6.0 s" or "not detected"
    replace: str = fact("time to replace")  # "38.7 s" or "not replaced"
    detect_s: float | None = fact("detect_s")
    counted: str = fact("what the controller counted over the run")


@dataclass
class LagFacts(Facts):
    false_kills: int = fact("false strikes or kills logged")
    replaced: int = fact("replicas replaced")


@dataclass
class SlowLinkFacts(Facts):
    replaced: int = fact("healthy replicas replaced")
    verdicts: int = fact("unhealthy verdicts logged")
    not_charged: float = fact("probe timeouts not charged")


class _HealthScenario(Scenario[F]):
    replicas = 2
    workers = 1
    # None: as many replicas on a node as fit.
    max_replicas_per_node: int | None = None
    period_s, timeout_s = PERIOD_S, TIMEOUT_S

    runs_on = (STOCK, PATCHED)

    def configs(self, spec: images.ImageSpec) -> list[RunConfig]:
        """Push-based health on the patched image: what it is compared for."""
        return [RunConfig(spec, env=PUSH_HEALTH if spec.flavor == "patched" else {})]

    def cluster_config(
        self, tag: str, config: RunConfig, extra_env: dict | None = None
    ) -> ClusterConfig:
        return ClusterConfig(
            image=tag,
            name=f"rayspot-{self.name.replace('_', '-')}",
            workers=self.workers,
            env={**config.env, **FAST_METRICS, **(extra_env or {})},
            worker_resources={"w": 10},
            metrics_port=METRICS_PORT,
        )

    def _cluster(self, tag: str, config: RunConfig, extra_env: dict | None = None) -> Cluster:
        return Cluster(self.cluster_config(tag, config, extra_env))

    def _deploy(self, cluster: RayCluster) -> None:
        cluster.deploy(
            appconfigs.deploy_config(
                appconfigs.echo_app(
                    num_replicas=self.replicas,
                    max_replicas_per_node=self.max_replicas_per_node,
                    ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
                    health_check_period_s=self.period_s,
                    health_check_timeout_s=self.timeout_s,
                )
            )
        )
        cluster.wait_lb_ready()


class HealthFailure(_HealthScenario[FailureFacts]):
    name = "health_failure"
    title = "A replica's health check starts failing (push-based health)"
    # The fault's name in the history, how long the load runs, and how long
    # detection and replacement are each waited for.
    fault = "health_failure"
    load_s = 45.0
    wait_s = 40.0
    # The fault goes through the ingress (the app's own switch) and changes no node.
    needs: frozenset[str] | None = frozenset()

    async def _inject(
        self, cluster: RayCluster, history: History
    ) -> tuple[str, asyncio.Task | None]:
        """Start the fault; the replica id it hit, and the task that holds it
        (None if nothing needs undoing)."""
        return await fail_health_check(history, *cluster.ingress), None

    def _check(self, fault: Event) -> str:
        return f"replica {fault.target} detected unhealthy and replaced"

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        history = History()
        with self.open_cluster(image_tag, config) as cluster:
            self._deploy(cluster)

            async def main():
                load = asyncio.create_task(
                    open_loop(
                        *cluster.ingress,
                        LoadSpec(rate=10, duration_s=self.load_s, connections=16, timeout_s=30),
                        history,
                    )
                )
                await asyncio.sleep(5)
                replica, holding = await self._inject(cluster, history)
                since = next(e for e in history.events if e.fault == self.fault).time - 1
                detected = await asyncio.to_thread(
                    wait_for_unhealthy, cluster, replica, since, self.wait_s
                )
                history.observe(DETECTED, detected, detected or time.time(), target=replica)
                replaced = await asyncio.to_thread(
                    wait_replaced, cluster, "echo", self.replicas, {replica}, self.wait_s
                )
                history.observe(REPLACED, replaced, replaced or time.time(), target=replica)
                if holding is not None:
                    await holding
                await load

            asyncio.run(main())
            _observe_counters(cluster, history)
        return history

    def judge(self, config: RunConfig, history: History) -> ImageRun[FailureFacts]:
        fault = next(e for e in history.events if e.fault == self.fault)
        detected, replaced = history.value(DETECTED), history.value(REPLACED)
        facts = FailureFacts(
            detect=f"{detected - fault.time:.1f} s" if detected else "not detected",
            replace=f"{replaced - fault.time:.1f} s" if replaced else "not replaced",
            detect_s=detected - fault.time if detected else None,
            counted=_counted(history),
        )
        checks = [(self._check(fault), bool(detected and replaced))]
        return ImageRun(config.label, history, facts, config, checks=checks)

    def expect(self, runs: dict[str, ImageRun[FailureFacts]]) -> tuple[bool, list[str]]:
        findings = [
            f"{r.label}: detect {r.facts.detect}, replace {r.facts.replace}" for r in runs.values()
        ]
        replaced = all(ok for r in runs.values() for _, ok in r.checks)
        return replaced, findings


class HungReplica(HealthFailure):
    """A replica whose process stops answering, health checks included: pull
    finds it when its probes time out; push when its reports go stale, its
    fallback probes time out and batches from its node show it silent. A
    measurement of both, not a pass/fail claim on requests: those routed to
    the hung replica stall in both."""

    name = "hung_replica"
    title = "A replica's process hangs (SIGSTOP): time to detect, pull vs push"
    fault = "hung_replica"
    load_s = 60.0
    wait_s = 45.0
    needs = None  # it stops a replica's process inside its node

    async def _inject(
        self, cluster: RayCluster, history: History
    ) -> tuple[str, asyncio.Task | None]:
        docker = docker_only(cluster, self.name)
        hang = asyncio.create_task(hang_replica(docker, history, "echo", "Echo", self.load_s - 10))
        while not any(e.fault == self.fault for e in history.events):
            await asyncio.sleep(0.1)
        start = next(e for e in history.events if e.fault == self.fault)
        # The actor name ends with the replica id, which the controller logs.
        return (start.target or "").rsplit("#", 1)[-1], hang

    def _check(self, fault: Event) -> str:
        return "the hung replica detected and replaced"

    def expect(self, runs: dict[str, ImageRun[FailureFacts]]) -> tuple[bool, list[str]]:
        findings = [
            f"{r.label}: detect {r.facts.detect}, replace {r.facts.replace}; "
            f"{r.verdict.failures if r.verdict else '?'} requests failed"
            for r in runs.values()
        ]
        return all(ok for r in runs.values() for _, ok in r.checks), findings


def _observe_counters(cluster: RayCluster, history: History) -> None:
    """Keep the controller's health counters at the end of a run."""
    time.sleep(3)  # the last second's counts, exported every second
    try:
        counters = health_counters(cluster.metrics_text())
    except Unavailable as exc:
        _log.warning("the controller's health counters are not recorded: %s", exc)
        return
    history.observe(COUNTED, counters, time.time(), target="controller")


def _counted(history: History) -> str:
    """The controller's health counters as a report row: the probes it sent,
    and with push-based health the reports it received and the probes they
    spared."""
    reads = [e.detail["value"] for e in history.observed(COUNTED)]
    if not reads:
        return "not recorded"
    c = reads[-1]
    row = f"{c['probes']:.0f} probes"
    if c["reports"]:
        row += (
            f"; {c['reports']:.0f} pushed reports in {c['batches']:.0f} calls; "
            f"{c['deferred']:.0f} probes deferred for a fresh report"
        )
    return row


class ControllerLag(_HealthScenario[LagFacts]):
    name = "controller_lag"
    title = "Controller lag: SIGSTOP/SIGCONT cycles on the Serve controller (push-based health)"
    cycles, stop_s, run_s = 4, 6.0, 2.0

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        history = History()
        with self._cluster(image_tag, config) as cluster:
            self._deploy(cluster)
            history.observe(
                REPLICAS_BEFORE, sorted(cluster.replica_names("echo", "Echo")), time.time()
            )

            async def main():
                load = asyncio.create_task(
                    open_loop(
                        "127.0.0.1",
                        cluster.lb_port,
                        LoadSpec(
                            rate=10,
                            duration_s=self.cycles * (self.stop_s + self.run_s) + 15,
                            connections=16,
                            timeout_s=30,
                        ),
                        history,
                    )
                )
                await asyncio.sleep(5)
                await controller_lag(cluster, history, self.cycles, self.stop_s, self.run_s)
                await asyncio.sleep(3 * PERIOD_S)
                await load

            asyncio.run(main())
            observe_log_lines(history, cluster, cluster.head, [UNHEALTHY], "head")
            history.observe(
                REPLICAS_AFTER, sorted(cluster.replica_names("echo", "Echo")), time.time()
            )
        return history

    def judge(self, config: RunConfig, history: History) -> ImageRun[LagFacts]:
        started = history.observed(REPLICAS_BEFORE)[0].time
        killed = logged(history, "head", UNHEALTHY, since=started)
        before, after = set(history.value(REPLICAS_BEFORE)), set(history.value(REPLICAS_AFTER))
        facts = LagFacts(false_kills=len(killed), replaced=len(before - after))
        checks = [("no replica falsely killed", not killed and before == after)]
        return ImageRun(config.label, history, facts, config, checks=checks)

    def expect(self, runs: dict[str, ImageRun[LagFacts]]) -> tuple[bool, list[str]]:
        *baselines, push = runs.values()
        findings = [
            f"{r.label}: {r.facts.false_kills} false strikes or kills logged" for r in runs.values()
        ]
        if baselines and all(r.facts.false_kills == 0 for r in baselines):
            findings.append(
                "stock killed no replica either: at these timings the lag does "
                "not hurt pull, so this run shows no difference"
            )
        return push.facts.false_kills == 0, findings


class SlowHeadLink(_HealthScenario[SlowLinkFacts]):
    """The head's link slowed for several health-check periods: every probe
    reply and every pushed report reaches the controller late. Requests go
    around the head (the front LB has it in maintenance) to replicas on two
    workers, so what is lost is lost to the controller's verdicts, not to the
    slow link itself."""

    name = "slow_head_link"
    title = "The head's network link slowed for several health-check periods"
    replicas, workers, max_replicas_per_node = 4, 2, 2
    # A 1 s period and timeout: a slow link delays a reply past it at once.
    period_s = timeout_s = 1.0
    # (kbit/s each way, seconds): two slowdowns of different depth and length,
    # 25 s apart, in one run.
    throttles = ((64, 15.0), (32, 8.0))
    settle_s = 25.0

    def _deploy(self, cluster: RayCluster) -> None:
        super()._deploy(cluster)
        docker = docker_only(cluster, self.name)
        for node in self._routed_around(docker):
            docker.lb_exclude(node)

    def _slowed(self, cluster: Cluster) -> Node:
        return cluster.head

    def _routed_around(self, cluster: Cluster) -> list[Node]:
        return [cluster.head]

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        history = History()
        with self._cluster(image_tag, config) as cluster:
            self._deploy(cluster)
            history.observe(
                REPLICAS_BEFORE, sorted(cluster.replica_names("echo", "Echo")), time.time()
            )
            faults_s = sum(d + self.settle_s for _, d in self.throttles)

            async def main():
                load = asyncio.create_task(
                    open_loop(
                        "127.0.0.1",
                        cluster.lb_port,
                        LoadSpec(rate=10, duration_s=faults_s + 5, connections=16, timeout_s=30),
                        history,
                    )
                )
                await asyncio.sleep(5)
                for rate_kbit, duration_s in self.throttles:
                    await slow_link(cluster, self._slowed(cluster), history, rate_kbit, duration_s)
                    await asyncio.sleep(self.settle_s)
                await load

            asyncio.run(main())
            observe_log_lines(history, cluster, cluster.head, [UNHEALTHY], "head")
            history.observe(
                REPLICAS_AFTER, sorted(cluster.replica_names("echo", "Echo")), time.time()
            )
            _observe_counters(cluster, history)
        return history

    def judge(self, config: RunConfig, history: History) -> ImageRun[SlowLinkFacts]:
        started = history.observed(REPLICAS_BEFORE)[0].time
        verdicts = [t for v in VERDICTS for t in logged(history, "head", v, since=started)]
        before, after = set(history.value(REPLICAS_BEFORE)), set(history.value(REPLICAS_AFTER))
        counted = history.value(COUNTED) or {}
        facts = SlowLinkFacts(
            replaced=len(before - after),
            verdicts=len(verdicts),
            not_charged=counted.get("not_charged", 0.0),
        )
        checks = [("no healthy replica replaced", before == after and not verdicts)]
        return ImageRun(config.label, history, facts, config, checks=checks)


class SlowWorkerLink(SlowHeadLink):
    """One worker's link slowed instead of the head's: its two replicas' probe
    replies and reports are late, the other worker's are not. A measurement,
    not a pass/fail claim: whether replacing replicas behind a link too slow
    to answer a probe is right depends on what the link still carries. The
    load goes through the other worker only, so requests to the slowed
    worker's replicas cross its slow link (some may be lost to the link
    itself, which the report attributes to the fault windows)."""

    name = "slow_worker_link"
    title = "One worker's network link slowed for several health-check periods"

    def _slowed(self, cluster: Cluster) -> Node:
        return cluster.workers[0]

    def _routed_around(self, cluster: Cluster) -> list[Node]:
        return [cluster.head, cluster.workers[0]]

    def expect(self, runs: dict[str, ImageRun[SlowLinkFacts]]) -> tuple[bool, list[str]]:
        findings = [
            f"{r.label}: {r.facts.replaced} healthy replicas replaced, "
            f"{r.facts.verdicts} unhealthy verdicts, {r.facts.not_charged:.0f} probe "
            "timeouts not charged"
            for r in runs.values()
        ]
        return True, findings
