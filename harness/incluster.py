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


def _serve_client(schema):
    """Serve's client, Serve started with the config's HTTP options if it is not
    running yet (what `serve deploy` does)."""
    from ray.serve._private.api import serve_start

    return serve_start(http_options=schema.http_options.dict(),
                       proxy_location=schema.proxy_location)


def deploy(config: dict, timeout_s: float) -> dict:
    """Deploy a multi-app config declaratively (as `serve deploy` does) and wait
    until every application is RUNNING."""
    _connect()
    from ray import serve
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.parse_obj(config)
    _serve_client(schema).deploy_apps(schema)
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


def churn(config: dict, churned: list[str], low: int, high: int,
          interval_s: float, duration_s: float) -> dict:
    """Every `interval_s` for `duration_s`, flip one churned app of the config
    between `low` and `high` replicas: one membership change per tick. Only an
    app whose every asked-for replica is RUNNING (replicas still stopping do
    not count) is flipped, the one left alone longest first: a replica stopped
    while still STARTING never reaches HAProxy, so blind toggling faster than
    replicas start changes nothing there. Runs here so that a tick costs two
    controller calls, not a `docker exec` and a Ray import."""
    _connect()
    from ray import serve
    from ray.serve.schema import ServeDeploySchema

    apps = {app["name"]: app for app in config["applications"]}
    client = _serve_client(ServeDeploySchema.parse_obj(config))

    def ready(name: str, status) -> bool:
        wanted = apps[name]["deployments"][0]["num_replicas"]
        return name in status and all(
            d.replica_states.get("RUNNING", 0) == wanted
            and set(d.replica_states) <= {"RUNNING", "STOPPING"}
            for d in status[name].deployments.values())

    last_flip = {name: 0.0 for name in churned}
    started = time.monotonic()
    changes, idle_ticks, tick = [], 0, 0
    while time.monotonic() - started < duration_s:
        time.sleep(max(0.0, started + tick * interval_s - time.monotonic()))
        tick += 1
        status = serve.status().applications
        settled = [name for name in churned if ready(name, status)]
        if not settled:
            idle_ticks += 1
            continue
        name = min(settled, key=last_flip.__getitem__)
        deployment = apps[name]["deployments"][0]
        deployment["num_replicas"] = low if deployment["num_replicas"] == high else high
        client.deploy_apps(ServeDeploySchema.parse_obj(config))
        last_flip[name] = time.monotonic()
        changes.append({"at": time.time(), "app": name,
                        "replicas": deployment["num_replicas"]})
    return {"changes": changes, "idle_ticks": idle_ticks}


def nodes() -> list[dict]:
    ray = _connect()
    from ray.core.generated.common_pb2 import NodeDeathInfo

    keep = ("NodeID", "Alive", "NodeManagerAddress", "NodeManagerHostname", "Resources")
    found = []
    for node in ray.nodes():
        info = {k: v for k, v in node.items() if k in keep or k.startswith("Death")}
        if isinstance(info.get("DeathReason"), int):  # the enum's number; name it
            info["DeathReason"] = NodeDeathInfo.Reason.Name(info["DeathReason"])
        found.append(info)
    return found


def drain(gcs_address: str, node_id_hex: str, reason: str, message: str,
          deadline_s: float, at: float = 0.0) -> dict:
    """Ask the GCS to drain a node, as a spot-notice agent would. The node id
    must be hex: a binary id decodes to Nil, which the GCS accepts silently and
    never drains (ray/_private/node.py says so)."""
    import ray
    from ray.core.generated import autoscaler_pb2

    client = ray._raylet.GcsClient(address=gcs_address)
    # Starting this process and importing Ray takes most of a second; the caller
    # starts it early and names the wall-clock time the drain is due (the
    # container's clock is the host's).
    time.sleep(max(0.0, at - time.time()))
    sent = time.time()
    deadline_ms = int((sent + deadline_s) * 1000) if deadline_s > 0 else 0
    accepted, rejection = client.drain_node(
        node_id_hex, autoscaler_pb2.DrainNodeReason.Value(f"DRAIN_NODE_REASON_{reason}"),
        message, deadline_ms)
    return {"accepted": accepted, "rejection": rejection, "sent": sent,
            "deadline": deadline_ms / 1000 if deadline_ms else None}


def actors() -> list[dict]:
    """Every actor the GCS knows, alive or dead, with its node, pid and times.
    From the GCS directly: the state API would need the dashboard."""
    ray = _connect()
    table = ray._private.state.actors()
    return [{"id": a["ActorID"], "class": a["ActorClassName"], "name": a["Name"],
             "state": a["State"], "node_id": a["Address"]["NodeID"], "pid": a["Pid"],
             "start": a["StartTime"] / 1000 if a["StartTime"] else None,
             "end": a["EndTime"] / 1000 if a["EndTime"] else None}
            for a in table.values()]


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


def controller_health() -> dict:
    """The Serve controller's own health metrics (`get_health_metrics`): rolling
    means of its control loop and of the deployment-state update within it."""
    ray = _connect()
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    metrics = ray.get(controller.get_health_metrics.remote())
    return {key: (metrics.get(key) or {}).get("mean") for key in
            ("loop_duration_s", "deployment_state_update_duration_s")}


HAPROXY_LOG = "/tmp/haproxy.log"


def syslog(path: str = HAPROXY_LOG) -> None:
    """Receive HAProxy's log on 127.0.0.1:514/udp (Serve's default log target)
    and append it to a file, stamped with the receive time. Runs until killed."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 514))
    with open(path, "a", buffering=1) as out:
        while True:
            data, _ = sock.recvfrom(65535)
            out.write(f"{time.time():.3f} {data.decode(errors='replace').strip()}\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.incluster")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_deploy = sub.add_parser("deploy")
    p_deploy.add_argument("config_json")
    p_deploy.add_argument("--timeout", type=float, default=180.0)
    sub.add_parser("nodes")
    p_churn = sub.add_parser("churn")
    p_churn.add_argument("config_json", help="the deploy config the churn starts from")
    p_churn.add_argument("--apps", required=True, help="comma-separated apps to churn")
    p_churn.add_argument("--low", type=int, default=2)
    p_churn.add_argument("--high", type=int, default=3)
    p_churn.add_argument("--interval", type=float, default=1.0)
    p_churn.add_argument("--duration", type=float, default=60.0)
    sub.add_parser("actors")
    sub.add_parser("serve-status")
    sub.add_parser("controller-health")
    sub.add_parser("syslog")
    p_drain = sub.add_parser("drain")
    p_drain.add_argument("gcs_address")
    p_drain.add_argument("node_id_hex")
    p_drain.add_argument("--reason", default="PREEMPTION",
                         choices=["PREEMPTION", "IDLE_TERMINATION"])
    p_drain.add_argument("--message", default="spot interruption (harness)")
    p_drain.add_argument("--deadline-s", type=float, default=0.0, help="0: no deadline")
    p_drain.add_argument("--at", type=float, default=0.0, help="send at this time.time()")
    args = parser.parse_args(argv)
    if args.cmd == "deploy":
        result = deploy(json.loads(args.config_json), args.timeout)
    elif args.cmd == "nodes":
        result = nodes()
    elif args.cmd == "churn":
        result = churn(json.loads(args.config_json), args.apps.split(","), args.low,
                       args.high, args.interval, args.duration)
    elif args.cmd == "syslog":
        syslog()
        return 0
    elif args.cmd == "actors":
        result = actors()
    elif args.cmd == "controller-health":
        result = controller_health()
    elif args.cmd == "drain":
        result = drain(args.gcs_address, args.node_id_hex, args.reason, args.message,
                       args.deadline_s, args.at)
    else:
        result = serve_status()
    print(json.dumps(result))
    return 1 if isinstance(result, dict) and result.get("error") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
