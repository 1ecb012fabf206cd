"""Declarative deploys (what `serve deploy` does), and the rule for when an app's
replicas count as ready, which the churn and the membership probe share."""

from __future__ import annotations

import time

from harness.cluster.agent.session import connect, serve_client


def deploy(config: dict, timeout_s: float) -> dict:
    """Deploy a multi-app config declaratively (as `serve deploy` does) and wait
    until every application is RUNNING."""
    connect()
    from ray import serve
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.parse_obj(config)
    serve_client(schema).deploy_apps(schema)
    names = {app.name for app in schema.applications}
    if timeout_s <= 0:  # the caller times what follows the change itself
        return {"applications": {name: "SUBMITTED" for name in names}}
    deadline = time.monotonic() + timeout_s
    while True:
        apps = serve.status().applications
        states = {name: apps[name].status if name in apps else "MISSING" for name in names}
        if all(state == "RUNNING" for state in states.values()):
            return {"applications": states}
        failed = {n: apps[n].message for n, s in states.items() if s == "DEPLOY_FAILED"}
        if failed or time.monotonic() > deadline:
            return {"applications": states, "error": failed or f"not RUNNING in {timeout_s}s"}
        time.sleep(0.5)


def replicas_ready(app_status, wanted: int) -> bool:
    """Every replica the app asked for is RUNNING; replicas still stopping do
    not count (they are already out of HAProxy's view)."""
    return all(
        d.replica_states.get("RUNNING", 0) == wanted
        and set(d.replica_states) <= {"RUNNING", "STOPPING"}
        for d in app_status.deployments.values()
    )
