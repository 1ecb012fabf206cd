"""`make bench-health`: what pull probes cost the Serve controller, against
push-based health, measured side by side in one run.

For each image (stock 2.60.0 probing every replica; the patched image with
RAY_SERVE_ENABLE_PUSH_HEALTH=1), on a cluster holding many zero-CPU replicas:

  probes per health period   completed probes, from the controller's own
                             `serve_health_check_latency_ms` histogram count
                             (one sample per probe result; a push adds none)
  controller CPU per period  utime + stime of the controller process
  time to detect             one replica's check starts failing; until the
                             controller logs "marking it unhealthy"

The marginal cost of one probe is the CPU difference over the probe
difference, which is what the 8k-replica extrapolation multiplies.
"""

from __future__ import annotations

import asyncio
import time

from harness import appconfigs, images
from harness.cluster import Cluster, ClusterConfig
from harness.history import History
from harness.nemesis import fail_health_check
from harness.pin import load_pin
from harness.scenarios.health import (
    METRICS_PORT,
    PERIOD_S,
    PROBES,
    TIMEOUT_S,
    wait_for_unhealthy,
)

CLK_TCK = 100  # Linux's USER_HZ; /proc/<pid>/stat counts in these ticks
EXTRAPOLATE_TO = 8000
SELF_CHECK_FRACTION = 0.5  # patch 0002: a replica self-checks and pushes twice a period
ENV = {"RAY_metrics_report_interval_ms": "1000"}


def _app(replicas: int) -> dict:
    return appconfigs.deploy_config(appconfigs.echo_app(
        num_replicas=replicas, max_replicas_per_node=None,
        ray_actor_options={"num_cpus": 0, "resources": {"w": 0.001}},
        health_check_period_s=PERIOD_S, health_check_timeout_s=TIMEOUT_S))


def measure(tag: str, label: str, env: dict, replicas: int, window_s: float) -> dict:
    config = ClusterConfig(image=tag, name="rayspot-bench-health", workers=2,
                           env={**ENV, **env}, worker_resources={"w": 10},
                           metrics_port=METRICS_PORT)
    started = time.monotonic()
    with Cluster(config) as cluster:
        print(f"bench-health {label}: deploying {replicas} replicas", flush=True)
        cluster.deploy(_app(replicas), timeout_s=900)
        pid = cluster.controller_pid()
        time.sleep(3 * PERIOD_S + 3)  # let the metrics export catch up
        probes0, cpu0, t0 = (cluster.metric_total(PROBES),
                              cluster.process_cpu_s(cluster.head, pid), time.time())
        print(f"bench-health {label}: measuring {window_s:.0f}s "
              f"({time.monotonic() - started:.0f}s so far)", flush=True)
        time.sleep(window_s)
        probes1, cpu1, t1 = (cluster.metric_total(PROBES),
                              cluster.process_cpu_s(cluster.head, pid), time.time())
        periods = (t1 - t0) / PERIOD_S

        history = History()
        flipped_replica = asyncio.run(fail_health_check(history, "127.0.0.1",
                                                        cluster.config.lb_port))
        flipped = history.events[-1].time
        detected = wait_for_unhealthy(cluster, flipped_replica, flipped - 1, 60)
    return {
        "label": label, "replicas": replicas,
        "probes_per_period": (probes1 - probes0) / periods,
        "cpu_s_per_period": (cpu1 - cpu0) / periods,
        "detect_s": detected - flipped if detected else None,
    }


def bench_health(replicas: int = 48, window_s: float = 40.0) -> list[dict]:
    pin = load_pin()
    stock = images.ensure_node_image(images.ImageSpec(pin.ray.version, "stock"))
    patched = images.ensure_node_image(images.ImageSpec(pin.ray.version, "patched"))
    return [
        measure(stock, "pull (stock 2.60.0)", {}, replicas, window_s),
        measure(patched, "push (patched, RAY_SERVE_ENABLE_PUSH_HEALTH=1)",
                {"RAY_SERVE_ENABLE_PUSH_HEALTH": "1"}, replicas, window_s),
    ]


def print_health(results: list[dict]) -> None:
    pull, push = results
    print()
    print(f"health period {PERIOD_S:g} s, {pull['replicas']} zero-CPU replicas on 2 workers")
    print()
    print("| mode | probes / period | controller CPU s / period | time to detect |")
    print("|---|---:|---:|---:|")
    for r in results:
        detect = f"{r['detect_s']:.1f} s" if r["detect_s"] is not None else "not detected"
        print(f"| {r['label']} | {r['probes_per_period']:.1f} | {r['cpu_s_per_period']:.3f} "
              f"| {detect} |")
    fewer = 1 - push["probes_per_period"] / pull["probes_per_period"]
    print()
    print(f"probe submissions: {fewer:.1%} fewer with push (target: at least 90%)")
    pushes = push["replicas"] / SELF_CHECK_FRACTION
    print(f"controller CPU per period: pull {pull['cpu_s_per_period']:.3f} s, push "
          f"{push['cpu_s_per_period']:.3f} s (push receives ~{pushes:.0f} reports per "
          f"period: two per replica)")
    if push["cpu_s_per_period"] >= pull["cpu_s_per_period"]:
        # Said plainly rather than extrapolated: a per-probe saving cannot be
        # derived when receiving the pushes costs more than the probes did.
        print("push costs the controller more CPU than pull at this scale; no per-probe "
              "saving to extrapolate from this run")
        return
    per_probe = ((pull["cpu_s_per_period"] - push["cpu_s_per_period"])
                 / (pull["probes_per_period"] - push["probes_per_period"]))
    scale = EXTRAPOLATE_TO / pull["replicas"]
    print(f"marginal controller CPU per probe: {per_probe * 1e6:.0f} us; extrapolated to "
          f"{EXTRAPOLATE_TO} replicas: {pull['probes_per_period'] * scale * per_probe:.2f} s "
          f"of controller CPU per {PERIOD_S:g} s period saved")
