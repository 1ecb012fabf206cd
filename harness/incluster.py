"""Commands the harness runs inside the head container (`docker exec`), where
Ray is installed and the cluster is local. Output is one JSON document on the
last line of stdout, which `cluster.py` parses.

Standard library and Ray only: the node image has no harness dependencies.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _connect():
    import ray

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    return ray


def deploy(config: dict, timeout_s: float) -> dict:
    """Deploy a multi-app config declaratively (as `serve deploy` does) and wait
    until every application is RUNNING."""
    _connect()
    from ray import serve
    from ray.serve._private.api import serve_start
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.parse_obj(config)
    client = serve_start(http_options=schema.http_options.dict(),
                         proxy_location=schema.proxy_location)
    client.deploy_apps(schema)
    names = {app.name for app in schema.applications}
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


def nodes() -> list[dict]:
    ray = _connect()
    keep = ("NodeID", "Alive", "NodeManagerAddress", "NodeManagerHostname", "Resources",
            "DeathReason", "DeathReasonMessage")
    return [{k: n.get(k) for k in keep} for n in ray.nodes()]


def serve_status() -> dict:
    _connect()
    from ray import serve

    status = serve.status()
    return {
        "applications": {
            name: {
                "status": str(app.status),
                "deployments": {d: {"status": str(ds.status),
                                    "replica_states": dict(ds.replica_states)}
                                for d, ds in app.deployments.items()},
            }
            for name, app in status.applications.items()
        },
        "proxies": {node: str(state) for node, state in status.proxies.items()},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.incluster")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_deploy = sub.add_parser("deploy")
    p_deploy.add_argument("config_json")
    p_deploy.add_argument("--timeout", type=float, default=180.0)
    sub.add_parser("nodes")
    sub.add_parser("serve-status")
    args = parser.parse_args(argv)
    if args.cmd == "deploy":
        result = deploy(json.loads(args.config_json), args.timeout)
    elif args.cmd == "nodes":
        result = nodes()
    else:
        result = serve_status()
    print(json.dumps(result))
    return 1 if isinstance(result, dict) and result.get("error") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
