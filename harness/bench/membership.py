"""`make bench-membership`: what a replica change costs HAProxy, stock 2.60.0
against patches 0005 and 0006 with both flags on, side by side in one run.

For each configuration, one cluster (head and one worker; the app's replicas
on the worker) and one app; per round a replica is added and later removed,
both controller changes the head's HAProxy has to follow (the agent's
`membership-latency`):

  reloads per change      HAProxy processes the head started during the
                          rounds, per change: a new process per reload with
                          -sf, a new worker per reload in master-worker mode
  RUNNING -> routed       from the controller listing the new replica RUNNING
                          to the first answer from it through the head's
                          HAProxy (new connections, 5 ms apart, so the
                          resolution is a few tens of ms); p50 and p99
  manager's update        Serve's own serve_haproxy_update_latency_s on the
                          head (coalesce window, queueing, then the reload or,
                          patched, the admin-socket sync), mean per update
  change -> RUNNING       the replica's own start, for scale: the same code in
                          both configurations

Both run with membership_churn's environment (a 2 s drain window, so a
removed replica is gone within seconds and a round takes ~10 s, not ~40).
"""

from __future__ import annotations

import json
import statistics
import time

from harness.cluster import appconfigs, images
from harness.cluster.cluster import METRICS_PORT, SERVE_PORT, Cluster, ClusterConfig
from harness.core import log
from harness.core.errors import HarnessError
from harness.core.pin import load_pin
from harness.experiment.checker import percentile
from harness.experiment.configs import (
    DYNAMIC_MEMBERSHIP_MASTER_WORKER,
    FAST_METRICS,
    MEMBERSHIP_CHURN,
)

_log = log.get(__name__)

REPLICAS = 2
# Serve's HAProxy manager: from the first coalesced broadcast to the update done.
UPDATE_LATENCY = "ray_serve_haproxy_update_latency_s"


def _app() -> dict:
    return appconfigs.deploy_config(
        appconfigs.echo_app(
            num_replicas=REPLICAS,
            max_replicas_per_node=None,
            ray_actor_options={"num_cpus": 0, "resources": {"w": 0.01}},
        )
    )


def _update_latency(cluster: Cluster) -> tuple[float, float]:
    """The head HAProxy manager's own update histogram: (sum, count)."""
    return (
        cluster.metric_total(f"{UPDATE_LATENCY}_sum"),
        cluster.metric_total(f"{UPDATE_LATENCY}_count"),
    )


def measure(tag: str, label: str, rounds: int, env: dict[str, str]) -> dict:
    config = ClusterConfig(
        image=tag,
        name="rayspot-bench-membership",
        workers=1,
        env={**env, **FAST_METRICS},
        worker_resources={"w": 10},
        metrics_port=METRICS_PORT,
    )
    started = time.monotonic()
    samples = []
    with Cluster(config) as cluster:
        cluster.deploy(_app())
        time.sleep(3)  # the metrics export catches up with the deploy's updates
        before = _update_latency(cluster)
        args = ["membership-latency", json.dumps(_app()), "--port", str(SERVE_PORT)]
        for number in range(rounds):
            sample = cluster.exec_head(args, check=False)
            if sample.get("error"):
                raise HarnessError(
                    f"bench-membership {label}, round {number + 1}: {sample['error']}"
                )
            samples.append(sample)
            log.progress(
                _log,
                f"bench-membership {label}: round {number + 1}/{rounds}: replica RUNNING "
                f"{sample['started_s']:.2f}s after the change, routed "
                f"{sample['routed_s'] * 1000:+.0f} ms later, "
                f"{sample['haproxy_processes_started']} HAProxy processes started",
                started,
            )
        time.sleep(3)
        after = _update_latency(cluster)
    updates = after[1] - before[1]
    routed = sorted(s["routed_s"] for s in samples)
    return {
        "label": label,
        "changes": 2 * len(samples),
        "reloads": sum(s["haproxy_processes_started"] for s in samples),
        "routed_p50": percentile(routed, 50),
        "routed_p99": percentile(routed, 99),
        "routed_mean": statistics.fmean(routed),
        "started_p50": percentile(sorted(s["started_s"] for s in samples), 50),
        "updates": updates,
        "update_mean": (after[0] - before[0]) / updates if updates else None,
    }


def bench_membership(rounds: int = 20) -> list[dict]:
    pin = load_pin()
    stock = images.ensure_node_image(images.ImageSpec(pin.ray.version, "stock"))
    patched = images.ensure_node_image(images.ImageSpec(pin.ray.version, "patched"))
    return [
        measure(stock, f"stock {pin.ray.version}", rounds, dict(MEMBERSHIP_CHURN)),
        measure(
            patched,
            "patched, both flags on",
            rounds,
            {**MEMBERSHIP_CHURN, **DYNAMIC_MEMBERSHIP_MASTER_WORKER},
        ),
    ]


def print_membership(results: list[dict]) -> None:
    stock, patched = results
    print()
    print(f"one app, {REPLICAS} <-> {REPLICAS + 1} replicas on a worker; the head's HAProxy")
    print()
    print(
        "| configuration | changes | HAProxy reloads | reloads / change "
        "| RUNNING -> routed p50 | p99 | mean | manager's update, mean (n) "
        "| change -> RUNNING p50 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        update = (
            "-"
            if r["update_mean"] is None
            else f"{r['update_mean'] * 1000:.0f} ms ({r['updates']:.0f})"
        )
        print(
            f"| {r['label']} | {r['changes']} | {r['reloads']} "
            f"| {r['reloads'] / r['changes']:.2f} | {r['routed_p50'] * 1000:.0f} ms "
            f"| {r['routed_p99'] * 1000:.0f} ms | {r['routed_mean'] * 1000:.0f} ms "
            f"| {update} | {r['started_p50']:.2f} s |"
        )
    print()
    print(
        f"RUNNING -> routed, patched / stock: p50 "
        f"{patched['routed_p50'] / stock['routed_p50']:.2f}x, p99 "
        f"{patched['routed_p99'] / stock['routed_p99']:.2f}x"
    )
