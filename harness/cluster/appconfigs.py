"""Serve deploy configs (the `serve deploy` schema) for the apps in
`harness/cluster/apps/`, built on the host and sent to the head's driver."""

from __future__ import annotations

from harness.cluster.cluster import SERVE_PORT


def deploy_config(*apps: dict, http_options: dict | None = None) -> dict:
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": SERVE_PORT, **(http_options or {})},
        "applications": list(apps),
    }


def echo_app(
    num_replicas: int = 3, max_replicas_per_node: int | None = 1, **deployment_options
) -> dict:
    """The echo app. One replica per node by default, so that every node runs a
    replica and therefore a Serve proxy (Serve only places proxies on the head
    and on nodes that hold replicas)."""
    deployment = {"name": "Echo", "num_replicas": num_replicas, **deployment_options}
    if max_replicas_per_node:
        deployment["max_replicas_per_node"] = max_replicas_per_node
    return {
        "name": "echo",
        "route_prefix": "/",
        "import_path": "harness.cluster.apps.echo:app",
        "deployments": [deployment],
    }


def ticker_app(num_replicas: int, route_prefix: str = "/ws", **deployment_options) -> dict:
    """The WebSocket ticker (harness/cluster/apps/ticker.py) at `route_prefix`."""
    return {
        "name": "ticker",
        "route_prefix": route_prefix,
        "import_path": "harness.cluster.apps.ticker:app",
        "deployments": [{"name": "Ticker", "num_replicas": num_replicas, **deployment_options}],
    }


def workload_apps(
    short_floor: int = 2, long_floor: int = 2, max_replicas: int = 6, **deployment_options
) -> list[dict]:
    """The spot-notice workload as two apps: echo at / (short and streaming requests)
    and the long-runner at /long/, each with a warm floor of `min_replicas` that
    autoscaling never goes below, so a drained node's replicas always have
    somewhere warm to go. `deployment_options` (the ladder's gst and wait loop)
    apply to both."""

    def autoscaled(name: str, floor: int, target: int) -> dict:
        return {
            "name": name,
            "max_ongoing_requests": 100,
            "ray_actor_options": {"num_cpus": 0, "resources": {"w": 1}},
            "autoscaling_config": {
                "min_replicas": floor,
                "max_replicas": max_replicas,
                "target_ongoing_requests": target,
            },
            **deployment_options,
        }

    return [
        {
            "name": "echo",
            "route_prefix": "/",
            "import_path": "harness.cluster.apps.echo:app",
            "deployments": [autoscaled("Echo", short_floor, 5)],
        },
        # A long-runner holds its slot for seconds: scale on fewer of them.
        {
            "name": "long",
            "route_prefix": "/long",
            "import_path": "harness.cluster.apps.workload:app",
            "deployments": [autoscaled("LongRunner", long_floor, 10)],
        },
    ]
