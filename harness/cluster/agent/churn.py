"""The membership-churn workload: replica counts flipped one app at a time, from
inside the cluster so that a tick costs two controller calls."""

from __future__ import annotations

import time

from harness.cluster.agent.deploy import replicas_ready
from harness.cluster.agent.session import connect, serve_client


def churn(
    config: dict, churned: list[str], low: int, high: int, interval_s: float, duration_s: float
) -> dict:
    """Every `interval_s` for `duration_s`, flip one churned app of the config
    between `low` and `high` replicas: one membership change per tick. Only an
    app whose every asked-for replica is RUNNING (replicas still stopping do
    not count) is flipped, the one left alone longest first: a replica stopped
    while still STARTING never reaches HAProxy, so blind toggling faster than
    replicas start changes nothing there. Runs here so that a tick costs two
    controller calls, not a `docker exec` and a Ray import."""
    connect()
    from ray import serve
    from ray.serve.schema import ServeDeploySchema

    apps = {app["name"]: app for app in config["applications"]}
    client = serve_client(ServeDeploySchema.parse_obj(config))

    last_flip = {name: 0.0 for name in churned}
    started = time.monotonic()
    changes, idle_ticks, tick = [], 0, 0
    while time.monotonic() - started < duration_s:
        time.sleep(max(0.0, started + tick * interval_s - time.monotonic()))
        tick += 1
        status = serve.status().applications
        settled = [
            name
            for name in churned
            if name in status
            and replicas_ready(status[name], apps[name]["deployments"][0]["num_replicas"])
        ]
        if not settled:
            idle_ticks += 1
            continue
        name = min(settled, key=last_flip.__getitem__)
        deployment = apps[name]["deployments"][0]
        deployment["num_replicas"] = low if deployment["num_replicas"] == high else high
        client.deploy_apps(ServeDeploySchema.parse_obj(config))
        last_flip[name] = time.monotonic()
        changes.append({"at": time.time(), "app": name, "replicas": deployment["num_replicas"]})
    return {"changes": changes, "idle_ticks": idle_ticks}
