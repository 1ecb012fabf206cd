"""Replica health as the health scenarios and bench-health read it from a
cluster: the health-check timings both deploy the echo app with, the
controller's probe counter, and waiting for the controller to declare a
replica unhealthy and for the replacement to run.
"""

from __future__ import annotations

import time

from harness.cluster.boundary import RayCluster, Unavailable, sample_total

PERIOD_S = 2.0  # health_check_period_s
TIMEOUT_S = 2.0  # health_check_timeout_s
# The controller's count of completed probes (a histogram's count).
PROBES = "ray_serve_health_check_latency_ms_count"
# Push-based health (patched images): the calls carrying replicas' reports and
# the reports in them, and the probes that were due and not sent because a
# fresh report stood in.
BATCHES = "ray_serve_controller_health_report_batches_total"
REPORTS = "ray_serve_controller_health_reports_total"
DEFERRED = "ray_serve_health_check_probes_deferred_total"
# Probe timeouts the controller did not charge while it counted itself behind.
NOT_CHARGED = "ray_serve_health_check_timeouts_not_charged_total"
HEALTH_COUNTERS = {
    "probes": PROBES,
    "batches": BATCHES,
    "reports": REPORTS,
    "deferred": DEFERRED,
    "not_charged": NOT_CHARGED,
}
# Logged both for a strike (a probe timeout: "Didn't receive health check
# response ... marking it unhealthy") and for the verdict ("... failed the health
# check 3 times in a row, marking it unhealthy").
UNHEALTHY = "marking it unhealthy"
# Only the verdicts: a replica that failed `threshold` checks, or whose actor
# crashed. Both replace it; a single strike does not.
VERDICTS = ["times in a row, marking it unhealthy", "crashed, marking it unhealthy"]


CONTROLLER_LOGS = "/logs/serve/controller_"  # the Serve controller's log files


def wait_for_unhealthy(
    cluster: RayCluster, replica: str | None, since: float, timeout_s: float
) -> float | None:
    """When the controller decided that a replica (any, if None) is unhealthy,
    after `since`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            # The controller's log alone: it is polled every second.
            lines = cluster.log_lines(cluster.head, VERDICTS, CONTROLLER_LOGS)
        except Unavailable:  # not this time; if never, the wait ends "not detected"
            lines = []
        for stamp, line in lines:
            if stamp >= since and (replica is None or replica in line):
                return stamp
        time.sleep(1)
    return None


def wait_replaced(
    cluster: RayCluster, app: str, replicas: int, gone: set[str], timeout_s: float
) -> float | None:
    """When the app's Echo deployment ran `replicas` alive replicas again, none of
    them one in `gone` (None if not within `timeout_s`): a replaced replica is
    gone only once its actor exited, not when the controller decided."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = cluster.replica_names(app, "Echo")
        if len(alive) == replicas and not any(r in name for r in gone for name in alive):
            return time.time()
        time.sleep(1)
    return None


def health_counters(text: str) -> dict[str, float]:
    """The controller's health counters (`HEALTH_COUNTERS`' keys) in a node's
    Prometheus text, each summed over deployments; 0 where not exported."""
    return {key: sample_total(text, name) for key, name in HEALTH_COUNTERS.items()}
