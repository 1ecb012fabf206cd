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

    return serve_start(
        http_options=schema.http_options.dict(), proxy_location=schema.proxy_location
    )


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


def _replicas_ready(app_status, wanted: int) -> bool:
    """Every replica the app asked for is RUNNING; replicas still stopping do
    not count (they are already out of HAProxy's view)."""
    return all(
        d.replica_states.get("RUNNING", 0) == wanted
        and set(d.replica_states) <= {"RUNNING", "STOPPING"}
        for d in app_status.deployments.values()
    )


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
    _connect()
    from ray import serve
    from ray.serve.schema import ServeDeploySchema

    apps = {app["name"]: app for app in config["applications"]}
    client = _serve_client(ServeDeploySchema.parse_obj(config))

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
            and _replicas_ready(status[name], apps[name]["deployments"][0]["num_replicas"])
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


def _haproxy_pids() -> set[int]:
    import os

    pids = set()
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as comm:
                if comm.read().strip() == "haproxy":
                    pids.add(int(entry))
        except (OSError, ValueError):
            continue
    return pids


def membership_latency(config: dict, port: int) -> dict:
    """One round: add one replica to the config's only app and time, on this
    node, the controller's change (deploy), the controller listing the replica
    RUNNING (serve.status polled every 20 ms) and this node's HAProxy answering
    a request from it (a new connection every 5 ms, so a stale keep-alive
    connection cannot hide a new worker); then remove it again and wait until
    the app is settled. HAProxy processes are sampled all along: each reload
    starts one (a new process with -sf, a new worker in master-worker mode)."""
    import http.client
    import threading

    _connect()
    from ray import serve
    from ray.serve.schema import ServeDeploySchema

    app = config["applications"][0]
    deployment = app["deployments"][0]
    low = deployment["num_replicas"]
    client = _serve_client(ServeDeploySchema.parse_obj(config))
    answers: list[tuple[float, str]] = []  # (received at, replica)
    pids_before = _haproxy_pids()
    pids_seen = set(pids_before)
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", app["route_prefix"])
                response = conn.getresponse()
                body = response.read()
                if response.status == 200:
                    answers.append((time.time(), json.loads(body)["replica"]))
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                pass
            finally:
                conn.close()
            pids_seen.update(_haproxy_pids())
            time.sleep(0.005)

    def ready(wanted: int) -> bool:
        status = serve.status().applications.get(app["name"])
        return status is not None and _replicas_ready(status, wanted)

    def wait_until(predicate, timeout_s: float, what: str) -> float:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(what)
            time.sleep(0.02)
        return time.time()

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        wait_until(lambda: ready(low), 120, "the app to settle")
        time.sleep(1.0)  # a second of answers from the replicas already there
        known = {replica for _, replica in answers}

        def first_answer_from_new_replica() -> float | None:
            return min(
                (at for at, replica in answers[-2000:] if at > changed and replica not in known),
                default=None,
            )

        deployment["num_replicas"] = low + 1
        changed = time.time()
        client.deploy_apps(ServeDeploySchema.parse_obj(config))
        listed = wait_until(lambda: ready(low + 1), 120, "the new replica")
        wait_until(
            lambda: first_answer_from_new_replica() is not None,
            30,
            "HAProxy to route the new replica",
        )
        routed = first_answer_from_new_replica()
        deployment["num_replicas"] = low
        client.deploy_apps(ServeDeploySchema.parse_obj(config))
        wait_until(lambda: ready(low), 120, "the replica's removal")
        time.sleep(1.0)  # the reload after the removal, if any
    except TimeoutError as error:
        return {"error": f"timed out waiting for {error}"}
    finally:
        stop.set()
        prober.join()
    return {
        "started_s": listed - changed,
        "routed_s": routed - listed,
        "haproxy_processes_started": len(pids_seen - pids_before),
    }


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


def drain(
    gcs_address: str,
    node_id_hex: str,
    reason: str,
    message: str,
    deadline_s: float,
    at: float = 0.0,
) -> dict:
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
        node_id_hex,
        autoscaler_pb2.DrainNodeReason.Value(f"DRAIN_NODE_REASON_{reason}"),
        message,
        deadline_ms,
    )
    return {
        "accepted": accepted,
        "rejection": rejection,
        "sent": sent,
        "deadline": deadline_ms / 1000 if deadline_ms else None,
    }


def actors() -> list[dict]:
    """Every actor the GCS knows, alive or dead, with its node, pid and times.
    From the GCS directly: the state API would need the dashboard."""
    ray = _connect()
    table = ray._private.state.actors()
    return [
        {
            "id": a["ActorID"],
            "class": a["ActorClassName"],
            "name": a["Name"],
            "state": a["State"],
            "node_id": a["Address"]["NodeID"],
            "pid": a["Pid"],
            "start": a["StartTime"] / 1000 if a["StartTime"] else None,
            "end": a["EndTime"] / 1000 if a["EndTime"] else None,
        }
        for a in table.values()
    ]


def serve_status() -> dict:
    _connect()
    from ray import serve

    status = serve.status()
    return {
        "applications": {
            name: {
                "status": str(app.status),
                "deployments": {
                    d: {"status": str(ds.status), "replica_states": dict(ds.replica_states)}
                    for d, ds in app.deployments.items()
                },
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
    return {
        key: (metrics.get(key) or {}).get("mean")
        for key in ("loop_duration_s", "deployment_state_update_duration_s")
    }


def health_ingest(
    nodes: int, replicas_per_node: int, period_s: float, duration_s: float, senders: int
) -> dict:
    """Feed the real controller the batches `nodes` node relays would send for
    `nodes` x `replicas_per_node` replicas with health period `period_s`: one call
    per node per period, `replicas_per_node` reports each (distinct replica ids,
    each standing for two self-checks), spread evenly over the period, one batch
    in flight per node as the relay sends them. `senders` actors (kept off the
    head) share the nodes. Returns what was sent; the controller counts what it
    received itself."""
    ray = _connect()

    @ray.remote(num_cpus=0, resources={"w": 0.001})
    class Relays:
        async def run(self, first: int, count: int) -> dict:
            import asyncio

            from ray.serve._private.common import ReplicaHealthReport
            from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

            controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
            sent = {"calls": 0, "reports": 0}
            end = time.monotonic() + duration_s

            async def node(index: int) -> None:
                ids = [f"{index:04x}{replica:04x}" for replica in range(replicas_per_node)]
                await asyncio.sleep(period_s * index / nodes)
                while time.monotonic() < end:
                    started = time.monotonic()
                    reports = [
                        ReplicaHealthReport(rid, started, True, 0, period_s / 2, 2) for rid in ids
                    ]
                    await controller.record_replica_health_reports.remote(reports, [])
                    sent["calls"] += 1
                    sent["reports"] += len(reports)
                    await asyncio.sleep(max(0.0, period_s - (time.monotonic() - started)))

            await asyncio.gather(*(node(i) for i in range(first, first + count)))
            return sent

    share = -(-nodes // senders)
    actors = [Relays.remote() for _ in range(senders)]
    results = ray.get(
        [
            actor.run.remote(i * share, min(share, nodes - i * share))
            for i, actor in enumerate(actors)
        ]
    )
    return {
        "calls": sum(r["calls"] for r in results),
        "reports": sum(r["reports"] for r in results),
    }


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
    parser = argparse.ArgumentParser(prog="python -m harness.cluster.incluster")
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
    p_latency = sub.add_parser("membership-latency")
    p_latency.add_argument("config_json", help="one app; a replica is added to it and removed")
    p_latency.add_argument("--port", type=int, default=8000)
    sub.add_parser("actors")
    sub.add_parser("serve-status")
    sub.add_parser("controller-health")
    p_ingest = sub.add_parser("health-ingest")
    for flag, kind in (
        ("--nodes", int),
        ("--replicas-per-node", int),
        ("--period", float),
        ("--duration", float),
        ("--senders", int),
    ):
        p_ingest.add_argument(flag, type=kind, required=True)
    sub.add_parser("syslog")
    p_drain = sub.add_parser("drain")
    p_drain.add_argument("gcs_address")
    p_drain.add_argument("node_id_hex")
    p_drain.add_argument(
        "--reason", default="PREEMPTION", choices=["PREEMPTION", "IDLE_TERMINATION"]
    )
    p_drain.add_argument("--message", default="spot interruption (harness)")
    p_drain.add_argument("--deadline-s", type=float, default=0.0, help="0: no deadline")
    p_drain.add_argument("--at", type=float, default=0.0, help="send at this time.time()")
    args = parser.parse_args(argv)
    if args.cmd == "deploy":
        result = deploy(json.loads(args.config_json), args.timeout)
    elif args.cmd == "nodes":
        result = nodes()
    elif args.cmd == "churn":
        result = churn(
            json.loads(args.config_json),
            args.apps.split(","),
            args.low,
            args.high,
            args.interval,
            args.duration,
        )
    elif args.cmd == "membership-latency":
        result = membership_latency(json.loads(args.config_json), args.port)
    elif args.cmd == "syslog":
        syslog()
        return 0
    elif args.cmd == "actors":
        result = actors()
    elif args.cmd == "controller-health":
        result = controller_health()
    elif args.cmd == "health-ingest":
        result = health_ingest(
            args.nodes, args.replicas_per_node, args.period, args.duration, args.senders
        )
    elif args.cmd == "drain":
        result = drain(
            args.gcs_address, args.node_id_hex, args.reason, args.message, args.deadline_s, args.at
        )
    else:
        result = serve_status()
    print(json.dumps(result))
    return 1 if isinstance(result, dict) and result.get("error") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
