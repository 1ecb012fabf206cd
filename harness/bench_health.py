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

A third run, stock with a health period longer than the window, gives the
controller's cost without any health traffic; the marginal cost of a probe and
of a received push are measured against it, and the 8k-replica extrapolation
multiplies those.
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
    PUSH_ENV,
    TIMEOUT_S,
    wait_for_unhealthy,
)

EXTRAPOLATE_TO = 8000
DEFAULT_PERIOD_S = 10.0  # Serve's default health_check_period_s, used for the 8k figures
REPORTS_PER_PERIOD = 2  # patch 0002: a replica self-checks, and pushes, twice a period
IDLE_PERIOD_S = 3600.0  # no probe falls in the window: the controller's cost without health
ENV = {"RAY_metrics_report_interval_ms": "1000"}


def _app(replicas: int, period_s: float) -> dict:
    return appconfigs.deploy_config(appconfigs.echo_app(
        num_replicas=replicas, max_replicas_per_node=None,
        ray_actor_options={"num_cpus": 0, "resources": {"w": 0.001}},
        health_check_period_s=period_s, health_check_timeout_s=TIMEOUT_S))


def measure(tag: str, label: str, replicas: int, window_s: float, push: bool = False,
            period_s: float = PERIOD_S) -> dict:
    """One cluster: the controller's steady-state cost over `window_s`, then (if
    the replicas are health-checked at all) the time to detect a failing one."""
    config = ClusterConfig(image=tag, name="rayspot-bench-health", workers=2,
                           env={**ENV, **(PUSH_ENV if push else {})}, worker_resources={"w": 10},
                           metrics_port=METRICS_PORT)
    started = time.monotonic()
    with Cluster(config) as cluster:
        print(f"bench-health {label}: deploying {replicas} replicas", flush=True)
        cluster.deploy(_app(replicas, period_s), timeout_s=900)
        pid = cluster.controller_pid()
        time.sleep(3 * PERIOD_S + 3)  # let the metrics export catch up
        probes0, cpu0, t0 = (cluster.metric_total(PROBES),
                              cluster.process_cpu_s(cluster.head, pid), time.time())
        print(f"bench-health {label}: measuring {window_s:.0f}s "
              f"({time.monotonic() - started:.0f}s so far)", flush=True)
        time.sleep(window_s)
        probes1, cpu1, t1 = (cluster.metric_total(PROBES),
                              cluster.process_cpu_s(cluster.head, pid), time.time())
        loop = cluster.exec_head(["controller-health"])
        periods = (t1 - t0) / PERIOD_S
        detect_s: float | str = "-"  # not measured: nothing is health-checked
        if period_s == PERIOD_S:
            history = History()
            flipped_replica = asyncio.run(fail_health_check(history, "127.0.0.1",
                                                            cluster.config.lb_port))
            flipped = history.events[-1].time
            detected = wait_for_unhealthy(cluster, flipped_replica, flipped - 1, 60)
            detect_s = detected - flipped if detected else "not detected"
    return {
        "label": label, "replicas": replicas,
        "probes_per_period": (probes1 - probes0) / periods,
        "reports_per_period": replicas * REPORTS_PER_PERIOD if push else 0,
        "cpu_s_per_period": (cpu1 - cpu0) / periods,
        "loop_ms": loop["loop_duration_s"] * 1000,
        "dsm_update_ms": loop["deployment_state_update_duration_s"] * 1000,
        "detect_s": detect_s,
    }


def bench_health(replicas: int = 48, window_s: float = 40.0) -> list[dict]:
    pin = load_pin()
    stock = images.ensure_node_image(images.ImageSpec(pin.ray.version, "stock"))
    patched = images.ensure_node_image(images.ImageSpec(pin.ray.version, "patched"))
    return [
        measure(stock, f"no health checks (stock, period {IDLE_PERIOD_S:g} s)", replicas,
                window_s, period_s=IDLE_PERIOD_S),
        measure(stock, "pull (stock 2.60.0)", replicas, window_s),
        measure(patched, "push (patched, RAY_SERVE_ENABLE_PUSH_HEALTH=1)", replicas,
                window_s, push=True),
    ]


def print_health(results: list[dict]) -> None:
    idle, pull, push = results
    print()
    print(f"health period {PERIOD_S:g} s, {pull['replicas']} zero-CPU replicas on 2 workers")
    print()
    print("| mode | probes / period | pushes / period | controller CPU s / period "
          "| control loop, mean | deployment-state update, mean | time to detect |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        detect = r["detect_s"] if isinstance(r["detect_s"], str) else f"{r['detect_s']:.1f} s"
        print(f"| {r['label']} | {r['probes_per_period']:.1f} | {r['reports_per_period']} "
              f"| {r['cpu_s_per_period']:.3f} | {r['loop_ms']:.1f} ms "
              f"| {r['dsm_update_ms']:.2f} ms | {detect} |")
    print()
    print(f"probe submissions: {1 - push['probes_per_period'] / pull['probes_per_period']:.1%}"
          f" fewer with push (target: at least 90%)")
    print(f"deployment-state update: {pull['dsm_update_ms'] / push['dsm_update_ms']:.1f}x "
          f"shorter with push")
    # Marginal costs against the run without health checks; pushes are nominal
    # (two per replica per period), the probes are counted.
    per_probe = (pull["cpu_s_per_period"] - idle["cpu_s_per_period"]) / pull["probes_per_period"]
    per_push = ((push["cpu_s_per_period"] - idle["cpu_s_per_period"]
                 - push["probes_per_period"] * per_probe) / push["reports_per_period"])
    print(f"controller CPU per probe: {per_probe * 1e6:.0f} us; per received push: "
          f"{per_push * 1e6:.0f} us ({per_push / per_probe:.1f}x a probe)")
    rate = EXTRAPOLATE_TO / DEFAULT_PERIOD_S
    print(f"extrapolated to {EXTRAPOLATE_TO} replicas at the default {DEFAULT_PERIOD_S:g} s "
          f"period: pull {rate:.0f} probes/s = {rate * per_probe:.2f} CPU-s/s; push "
          f"{rate * REPORTS_PER_PERIOD:.0f} pushes/s = "
          f"{rate * REPORTS_PER_PERIOD * per_push:.2f} CPU-s/s of the controller")
