"""slot_growth (runtime membership at any size): one backend scaled from below
the HAProxy server slots' initial capacity to well past it and back, under
keep-alive load with a long slice.

    2.60.0-stock                    every change reloads HAProxy; the old
                                    workers are hard-stopped with requests in
                                    flight
    2.60.0-patched slots            RAY_SERVE_HAPROXY_DYNAMIC_SERVERS_ENABLED=1
                                    (patch 0006) and master-worker mode: the
                                    scale-up outgrows the 16 slots, and that
                                    one reload's old worker is hard-stopped
                                    like stock's
    2.60.0-patched runtime servers  RAY_SERVE_HAPROXY_RUNTIME_SERVERS_ENABLED=1
                                    and master-worker mode: servers are added
                                    and deleted over the admin socket; no
                                    HAProxy process started, no request failed

The traffic is membership_churn's: keep-alive clients straight to the head
node's HAProxy, 40 requests a second, 5% of them 4 s long against
hard-stop-after 3 s. The echo app goes from 12 replicas to 40 (past the 16
slots and the 32 they double to) and, once all 40 run, back to 12; the run
ends once the 28 removed replicas are gone. `slots` sets the pool's initial
size (RAY_SERVE_HAPROXY_MIN_SERVER_SLOTS): a smaller pool shows the same
reloads with fewer replicas (3 -> 20 past 4 slots outgrows them about three
times), which is how `make test` runs it. Reloads are counted as HAProxy
processes that appear on the head (sampled every 0.25 s): with -sf each reload
is a new process, in master-worker mode a new worker.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from harness.cluster import appconfigs, images
from harness.cluster.cluster import METRICS_PORT, SERVE_PORT, Cluster, ClusterConfig
from harness.core import log
from harness.experiment.configs import (
    DYNAMIC_MEMBERSHIP_MASTER_WORKER,
    FAST_HAPROXY_METRICS,
    MEMBERSHIP_CHURN,
    RUNTIME_SERVERS_MASTER_WORKER,
    RunConfig,
)
from harness.experiment.history import Event, History
from harness.experiment.load import LoadSpec, Mix, open_loop
from harness.scenarios.base import (
    AFTER,
    BEFORE,
    PATCHED,
    STOCK,
    Facts,
    ImageRun,
    Scenario,
    fact,
    haproxy_counted,
    haproxy_starts,
    observe_haproxy_counters,
    watch_head_haproxy,
)

_log = log.get(__name__)

LONG_S = 4.0  # longer than configs.CHURN_HARD_STOP_AFTER_S
MIN_SERVER_SLOTS = "RAY_SERVE_HAPROXY_MIN_SERVER_SLOTS"  # 0006's initial pool size
FAULT = "scale"  # the events' fault name: one start/end pair per change
# Observation: per change, the replicas asked for and those alive once it settled.
SETTLED = "replicas settled"


def _app(replicas: int) -> dict:
    """The echo app with `replicas` zero-CPU replicas, all on the worker."""
    return appconfigs.deploy_config(
        appconfigs.echo_app(
            num_replicas=replicas,
            max_replicas_per_node=None,
            ray_actor_options={"num_cpus": 0, "resources": {"w": 0.01}},
            graceful_shutdown_timeout_s=LONG_S + 3,
            graceful_shutdown_wait_loop_s=1,
            max_ongoing_requests=100,
        )
    )


@dataclass
class GrowthFacts(Facts):
    changes: str = fact("replica changes")  # "12 -> 40 in 41 s, 40 -> 12 in 9 s"
    started: int = fact("HAProxy processes started on the head")
    counted: str = fact("counted by the head's HAProxy manager while scaling")


class SlotGrowth(Scenario[GrowthFacts]):
    name = "slot_growth"
    title = "One backend scaled past its server slots and back under keep-alive load"

    def __init__(
        self, low: int = 12, high: int = 40, rate: float = 40.0, slots: int | None = None
    ) -> None:
        self.low, self.high, self.rate = low, high, rate
        self.slots = slots  # the pool's initial size; None: 0006's default (16)

    runs_on = (STOCK, PATCHED)

    def configs(self, spec: images.ImageSpec) -> list[RunConfig]:
        if spec.flavor == "patched":
            return [
                RunConfig(spec, "slots", DYNAMIC_MEMBERSHIP_MASTER_WORKER),
                RunConfig(spec, "runtime servers", RUNTIME_SERVERS_MASTER_WORKER),
            ]
        return [RunConfig(spec)]

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        history = History()
        cluster_config = ClusterConfig(
            image=image_tag,
            name="rayspot-growth",
            workers=1,
            env={**MEMBERSHIP_CHURN, **FAST_HAPROXY_METRICS, **self._slots_env(), **config.env},
            worker_resources={"w": 10},
            metrics_port=METRICS_PORT,
        )
        with Cluster(cluster_config) as cluster:
            cluster.deploy(_app(self.low))
            observe_haproxy_counters(cluster, history, BEFORE)
            asyncio.run(self._scale(cluster, history))
            observe_haproxy_counters(cluster, history, AFTER)
        return history

    def _slots_env(self) -> dict[str, str]:
        """The node env that sizes the slot pool (read only where 0006's slots are on)."""
        return {} if self.slots is None else {MIN_SERVER_SLOTS: str(self.slots)}

    async def _scale(self, cluster: Cluster, history: History) -> None:
        started = time.monotonic()
        spec = LoadSpec(
            rate=self.rate,
            duration_s=600,  # an upper bound: the run stops it once scaled back
            connections=24,
            mix=Mix(short=0.95, long=0.05, long_s=(LONG_S, LONG_S)),
            timeout_s=30,
        )
        stop_load, stop_watch = asyncio.Event(), asyncio.Event()
        watch = asyncio.create_task(watch_head_haproxy(cluster, history, stop_watch))
        load = asyncio.create_task(
            open_loop(cluster.head.ip, SERVE_PORT, spec, history, stop=stop_load)
        )
        try:
            await asyncio.sleep(3)
            for before, after in ((self.low, self.high), (self.high, self.low)):
                label = f"{before} -> {after}"
                log.progress(_log, f"{self.name}: scaling {label} under load", started)
                history.add_event(Event(time.time(), FAULT, "start", label))
                await asyncio.to_thread(cluster.deploy, _app(after))
                # RUNNING counts replicas started, not the removed ones gone:
                # wait for those too, so that their drain is inside the run.
                alive = await asyncio.to_thread(self._settle, cluster, after)
                history.observe(
                    SETTLED, {"asked": after, "alive": alive}, time.time(), target=label
                )
                history.add_event(Event(time.time(), FAULT, "end", label))
                await asyncio.sleep(LONG_S + 2)
        finally:
            stop_load.set()
            await load
            stop_watch.set()
            await watch

    @staticmethod
    def _settle(cluster: Cluster, replicas: int, timeout_s: float = 120) -> int:
        """Wait until the app runs exactly `replicas` alive replicas; how many it runs."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = len(cluster.replica_names("echo", "Echo"))
            if alive == replicas or time.monotonic() > deadline:
                return alive
            time.sleep(1)

    def judge(self, config: RunConfig, history: History) -> ImageRun[GrowthFacts]:
        starts = {
            e.target: e.time for e in history.events if e.fault == FAULT and e.phase == "start"
        }
        ends = {e.target: e.time for e in history.events if e.fault == FAULT and e.phase == "end"}
        changes = ", ".join(
            f"{label} in {ends[label] - at:.0f} s" if label in ends else f"{label} unfinished"
            for label, at in starts.items()
        )
        facts = GrowthFacts(
            changes=changes,
            started=sum(len(p) for _, p in haproxy_starts(history)),
            counted=haproxy_counted(config, history),
        )
        checks = [
            (
                f"{e.target}: {e.detail['value']['alive']} replicas alive once done",
                e.detail["value"]["alive"] == e.detail["value"]["asked"],
            )
            for e in history.observed(SETTLED)
        ]
        return ImageRun(config.label, history, facts, config, checks=checks)

    def expect(self, runs: dict[str, ImageRun[GrowthFacts]]) -> tuple[bool, list[str]]:
        findings, ok = [], True
        for run in runs.values():
            # judge_runs gave every run its verdict, and judge its configuration.
            assert run.verdict is not None and run.config is not None
            failures = run.verdict.failures
            findings.append(
                f"{run.label}: {failures} of {run.verdict.requests} requests failed "
                f"({dict(run.verdict.failures_by_class) or 'none'}); "
                f"{run.facts.started} HAProxy processes started ({run.facts.changes})"
            )
            scaled = all(held for _, held in run.checks)
            if not scaled:
                ok = False
                findings.append(f"{run.label} did not reach the replica counts it was asked for")
            elif run.config.sets(RUNTIME_SERVERS_MASTER_WORKER):
                ok &= failures == 0 and run.facts.started == 0
            elif failures == 0:
                ok = False
                findings.append(
                    f"{run.label} did not fail: the growth did not reproduce the "
                    f"hard-stopped old worker, so the runtime-servers run proves nothing"
                )
        if not any(
            r.config and r.config.sets(RUNTIME_SERVERS_MASTER_WORKER) for r in runs.values()
        ):
            ok = False
            findings.append("no run on the runtime-servers path: nothing was shown to hold")
        return ok, findings
