"""membership_churn (runtime membership): a replica added or removed about
every second for a minute, under keep-alive load with a long slice.

    2.60.0-stock               every change reloads HAProxy; each reload leaves
                               an old worker that keeps idle keep-alive
                               connections and is hard-stopped with requests
                               in flight
    2.60.0-patched flags off   the same code path: the negative control, which
                               must fail like stock
    2.60.0-patched flags on    RAY_SERVE_HAPROXY_DYNAMIC_SERVERS_ENABLED=1 and
                               RAY_SERVE_HAPROXY_MASTER_WORKER_ENABLED=1
                               (patches 0005, 0006): membership changes go
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
import json
import time

from harness.cluster import appconfigs, images
from harness.cluster.cluster import SERVE_PORT, Cluster, ClusterConfig
from harness.experiment.history import Event, History
from harness.experiment.load import LoadSpec, Mix, open_loop
from harness.scenarios.base import ImageRun, Scenario, stock_and_patched

HARD_STOP_AFTER_S = 3
LONG_S = 4.0
ENV = {
    "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": str(HARD_STOP_AFTER_S),
    # Removed replicas go quickly, so the churn never runs out of room for new ones.
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
}
FLAGS_ON = {
    "RAY_SERVE_HAPROXY_DYNAMIC_SERVERS_ENABLED": "1",
    "RAY_SERVE_HAPROXY_MASTER_WORKER_ENABLED": "1",
}
FLAGS_ON_LABEL, FLAGS_OFF_LABEL = "flags on", "flags off"
# Observations: the head's HAProxy pids before the churn and every 0.5 s during
# it, and the in-cluster churn driver's own record of the changes it made.
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


class MembershipChurn(Scenario):
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

    default_images = staticmethod(stock_and_patched)

    def labels(self, spec: images.ImageSpec) -> list[str]:
        if spec.flavor == "patched":
            return [f"{spec} {FLAGS_OFF_LABEL}", f"{spec} {FLAGS_ON_LABEL}"]
        return [str(spec)]

    def run_once(self, image_tag: str, label: str) -> History:
        history = History()
        env = {**ENV, **(FLAGS_ON if label.endswith(FLAGS_ON_LABEL) else {})}
        config = ClusterConfig(
            image=image_tag, name="rayspot-churn", workers=1, env=env, worker_resources={"w": 10}
        )
        with Cluster(config) as cluster:
            cluster.deploy(_apps(LOW))
            history.observe(PIDS_BEFORE, sorted(cluster.haproxy_pids(cluster.head)), time.time())
            asyncio.run(self._churn(cluster, history))
        return history

    def judge(self, label: str, history: History) -> ImageRun:
        run = ImageRun(label, history)
        churn = history.value(CHURN)
        before = set(history.value(PIDS_BEFORE))
        seen = {pid for e in history.observed(PIDS_SEEN) for pid in e.detail["value"]}
        started = sorted(seen - before)
        changes = churn["changes"]
        run.facts["membership changes"] = len(changes)
        run.facts["seconds with no settled app to change"] = churn["idle_ticks"]
        run.facts["HAProxy processes started on the head"] = len(started)
        run.facts["reloads per change"] = round(len(started) / max(len(changes), 1), 2)
        return run

    async def _churn(self, cluster: Cluster, history: History) -> None:
        spec = LoadSpec(
            rate=self.rate,
            duration_s=self.duration_s + 4,
            connections=self.connections,
            mix=Mix(short=0.95, long=0.05, long_s=(LONG_S, LONG_S)),
            timeout_s=30,
        )
        load = asyncio.create_task(open_loop(cluster.head.ip, SERVE_PORT, spec, history))
        done = asyncio.Event()

        async def sample_pids():
            while not done.is_set():
                pids = await asyncio.to_thread(cluster.haproxy_pids, cluster.head)
                history.observe(PIDS_SEEN, sorted(pids), time.time(), target="head")
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample_pids())
        await asyncio.sleep(2)
        result = await asyncio.to_thread(
            cluster.exec_head,
            [
                "churn",
                json.dumps(_apps(LOW)),
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

    def expect(self, runs: dict[str, ImageRun]) -> tuple[bool, list[str]]:
        findings, ok = [], True
        for run in runs.values():
            failures = run.verdict.failures
            findings.append(
                f"{run.label}: {failures} of {run.verdict.requests} requests failed "
                f"({dict(run.verdict.failures_by_class) or 'none'}); "
                f"{run.facts['HAProxy processes started on the head']} HAProxy processes "
                f"started for {run.facts['membership changes']} membership changes"
            )
            if run.label.endswith(FLAGS_ON_LABEL):
                ok &= failures == 0 and run.facts["HAProxy processes started on the head"] == 0
            elif failures == 0:
                ok = False
                findings.append(
                    f"{run.label} did not fail: the churn did not reproduce the "
                    f"stale-worker errors, so the flags-on run proves nothing"
                )
        return ok, findings
