"""membership_churn (runtime membership): a replica added or removed about
every second for a minute, under keep-alive load with a long slice.

    2.60.0-stock               every change reloads HAProxy; each reload leaves
                               an old worker that keeps idle keep-alive
                               connections and is hard-stopped with requests
                               in flight
    2.60.0-patched flags off   the same code path: the negative control, which
                               must fail like stock
    2.60.0-patched flags on    RAY_SERVE_HAPROXY_RUNTIME_SERVERS_ENABLED=1 and
                               RAY_SERVE_HAPROXY_MASTER_WORKER_ENABLED=1
                               (patches 0009, 0006): membership changes go
                               over the admin socket; 0 reloads, 0 errors

Keep-alive clients straight to the head node's HAProxy, 95% short requests
and 5% of 4 s, longer than hard-stop-after (3 s here), all to the echo app;
the replicas run on a worker. Every second one of five apps (echo and four
more the head's HAProxy also serves) goes from 2 to 3 replicas or back, the
settled app left alone longest first (harness/cluster/agent/churn.py). Reloads
are counted as HAProxy processes that appear on the head during the churn
(sampled every 0.5 s): with -sf each reload is a new process, in
master-worker mode a new worker.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from dataclasses import dataclass

from harness.cluster import appconfigs, images
from harness.cluster.boundary import RayCluster
from harness.cluster.cluster import METRICS_PORT, ClusterConfig
from harness.experiment.configs import (
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
    HEAD_PIDS,
    PATCHED,
    STOCK,
    Facts,
    ImageRun,
    Scenario,
    fact,
    haproxy_counted,
    observe_haproxy_counters,
    watch_head_haproxy,
)

LONG_S = 4.0  # longer than configs.CHURN_HARD_STOP_AFTER_S
# Observations: the head's HAProxy pids before the churn and at each change
# during it (base.HEAD_PIDS; runs recorded before that sampled them every 0.5 s
# as PIDS_SEEN), and the in-cluster churn driver's own record of its changes.
PIDS_BEFORE, PIDS_SEEN, CHURN = "haproxy pids before", "haproxy pids", "churn"


# Echo (which the clients call) and four apps nobody calls: the head's HAProxy
# serves them all, so a change in any is a membership change for it. One app
# could change only every 5-25 s here (an added replica has to be RUNNING
# before it is taken away again, see agent/churn.py); five in turn change
# as fast as the worker starts replicas, one every 1.5-2 s on this machine
# (eight apps gave no more).
CHURNED_APPS = (("echo", "/"), *((f"churn-{c}", f"/{c}") for c in "bcde"))
LOW, HIGH = 2, 3


def _apps(replicas: int) -> dict:
    """The churned apps, each with `replicas` replicas on the worker."""
    apps = []
    for name, route in CHURNED_APPS:
        app = appconfigs.echo_app(
            num_replicas=replicas,
            max_replicas_per_node=None,
            ray_actor_options={"num_cpus": 0, "resources": {"w": 0.01}},
            graceful_shutdown_timeout_s=LONG_S + 3,
            graceful_shutdown_wait_loop_s=1,
            max_ongoing_requests=100,
        )
        apps.append({**app, "name": name, "route_prefix": route})
    return appconfigs.deploy_config(*apps)


@dataclass
class ChurnFacts(Facts):
    changes: int = fact("membership changes")
    idle_ticks: int = fact("seconds with no settled app to change")
    started: int = fact("HAProxy processes started on the head")
    reloads_per_change: float = fact("reloads per change")
    counted: str = fact("counted by the head's HAProxy manager during the churn")


class MembershipChurn(Scenario[ChurnFacts]):
    name = "membership_churn"
    title = "A replica swapped every second under keep-alive load"

    def __init__(
        self,
        duration_s: float = 60.0,
        interval_s: float = 1.0,
        rate: float = 60.0,
        connections: int = 24,
    ) -> None:
        self.duration_s, self.interval_s = duration_s, interval_s
        self.rate, self.connections = rate, connections

    runs_on = (STOCK, PATCHED)
    # The churn is a deploy loop run by the agent on the head; no node changes.
    needs = frozenset[str]()

    def configs(self, spec: images.ImageSpec) -> list[RunConfig]:
        if spec.flavor == "patched":
            return [
                RunConfig(spec, "flags off"),
                RunConfig(spec, "flags on", RUNTIME_SERVERS_MASTER_WORKER),
            ]
        return [RunConfig(spec)]

    def cluster_config(self, image_tag: str, config: RunConfig) -> ClusterConfig:
        """One worker; old HAProxy workers hard-stopped soon (MEMBERSHIP_CHURN)."""
        return ClusterConfig(
            image=image_tag,
            name="rayspot-churn",
            workers=1,
            env={**MEMBERSHIP_CHURN, **FAST_HAPROXY_METRICS, **config.env},
            worker_resources={"w": 10},
            metrics_port=METRICS_PORT,
        )

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        history = History()
        with self.open_cluster(image_tag, config) as cluster:
            cluster.deploy(_apps(LOW))
            observe_haproxy_counters(cluster, history, BEFORE)
            history.observe(PIDS_BEFORE, sorted(cluster.haproxy_pids(cluster.head)), time.time())
            asyncio.run(self._churn(cluster, history))
            observe_haproxy_counters(cluster, history, AFTER)
        return history

    def judge(self, config: RunConfig, history: History) -> ImageRun[ChurnFacts]:
        churn = history.value(CHURN)
        before = set(history.value(PIDS_BEFORE))
        # Runs recorded before the watch sampled every 0.5 s (PIDS_SEEN).
        seen = {
            pid
            for e in [*history.observed(PIDS_SEEN), *history.observed(HEAD_PIDS)]
            for pid in e.detail["value"]
        }
        started = sorted(seen - before)
        changes = churn["changes"]
        facts = ChurnFacts(
            changes=len(changes),
            idle_ticks=churn["idle_ticks"],
            started=len(started),
            reloads_per_change=round(len(started) / max(len(changes), 1), 2),
            counted=haproxy_counted(config, history),
        )
        return ImageRun(config.label, history, facts, config)

    async def _churn(self, cluster: RayCluster, history: History) -> None:
        spec = LoadSpec(
            rate=self.rate,
            duration_s=self.duration_s + 4,
            connections=self.connections,
            mix=Mix(short=0.95, long=0.05, long_s=(LONG_S, LONG_S)),
            timeout_s=30,
        )
        load = asyncio.create_task(open_loop(cluster.head.ip, cluster.serve_port, spec, history))
        done = asyncio.Event()
        # One command on the head reports every change of its HAProxy
        # processes (a `docker exec`, or a Ray job on a cluster of your own).
        sampler = asyncio.create_task(watch_head_haproxy(cluster, history, done))
        await asyncio.sleep(2)
        result = await asyncio.to_thread(
            functools.partial(cluster.exec_head, timeout_s=self.duration_s + 60),
            [
                "churn",
                # As deployed: a config that differed would redeploy every app.
                json.dumps(cluster.app_config(_apps(LOW))),
                "--apps",
                ",".join(n for n, _ in CHURNED_APPS),
                "--low",
                str(LOW),
                "--high",
                str(HIGH),
                "--interval",
                str(self.interval_s),
                "--duration",
                str(self.duration_s),
            ],
        )
        history.observe(CHURN, result, time.time())
        for change in result["changes"]:
            history.add_event(
                Event(
                    change["at"],
                    "membership_churn",
                    "mark",
                    change["app"],
                    {"label": f"{change['app']} -> {change['replicas']}"},
                )
            )
        await load
        done.set()
        await sampler

    def expect(self, runs: dict[str, ImageRun[ChurnFacts]]) -> tuple[bool, list[str]]:
        findings, ok = [], True
        for run in runs.values():
            # judge_runs gave every run its verdict, and judge its configuration.
            assert run.verdict is not None and run.config is not None
            failures = run.verdict.failures
            findings.append(
                f"{run.label}: {failures} of {run.verdict.requests} requests failed "
                f"({dict(run.verdict.failures_by_class) or 'none'}); "
                f"{run.facts.started} HAProxy processes "
                f"started for {run.facts.changes} membership changes"
            )
            if run.config.sets(RUNTIME_SERVERS_MASTER_WORKER):
                ok &= failures == 0 and run.facts.started == 0
            elif failures == 0:
                ok = False
                findings.append(
                    f"{run.label} did not fail: the churn did not reproduce the "
                    f"stale-worker errors, so the flags-on run proves nothing"
                )
        return ok, findings
