"""The membership-latency probe (bench-membership): how long one replica change
takes to reach this node's HAProxy, and how many HAProxy processes it starts."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time

from harness.cluster.agent.deploy import replicas_ready
from harness.cluster.agent.session import connect, serve_client


def haproxy_pids() -> set[int]:
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
    connect()
    from ray import serve
    from ray.serve.schema import ServeDeploySchema

    app = config["applications"][0]
    deployment = app["deployments"][0]
    low = deployment["num_replicas"]
    client = serve_client(ServeDeploySchema.parse_obj(config))
    answers: list[tuple[float, str]] = []  # (received at, replica)
    pids_before = haproxy_pids()
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
            pids_seen.update(haproxy_pids())
            time.sleep(0.005)

    def ready(wanted: int) -> bool:
        status = serve.status().applications.get(app["name"])
        return status is not None and replicas_ready(status, wanted)

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
        assert routed is not None  # wait_until just saw it, and answers only grow
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
