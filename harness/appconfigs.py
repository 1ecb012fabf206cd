"""Serve deploy configs (the `serve deploy` schema) for the apps in
`harness/apps/`, built on the host and sent to the head's driver."""

from __future__ import annotations

from harness.cluster import SERVE_PORT


def deploy_config(*apps: dict, http_options: dict | None = None) -> dict:
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": SERVE_PORT, **(http_options or {})},
        "applications": list(apps),
    }


def echo_app(num_replicas: int = 3, max_replicas_per_node: int | None = 1,
             **deployment_options) -> dict:
    """The echo app. One replica per node by default, so that every node runs a
    replica and therefore a Serve proxy (Serve only places proxies on the head
    and on nodes that hold replicas)."""
    deployment = {"name": "Echo", "num_replicas": num_replicas, **deployment_options}
    if max_replicas_per_node:
        deployment["max_replicas_per_node"] = max_replicas_per_node
    return {"name": "echo", "route_prefix": "/", "import_path": "harness.apps.echo:app",
            "deployments": [deployment]}
