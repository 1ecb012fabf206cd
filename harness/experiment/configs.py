"""The node environments that turn the patch set's features on, shared by the
scenarios and the benchmarks that compare a run with and without them.

Values are the env vars each node starts with (on top of the cluster's Serve
environment), so a scenario and a benchmark that name the same configuration
start the same nodes.
"""

from __future__ import annotations

# The head's HAProxy follows replica changes over its admin socket, without a reload.
DYNAMIC_MEMBERSHIP = {"RAY_SERVE_HAPROXY_DYNAMIC_SERVERS_ENABLED": "1"}
# Dynamic membership, and HAProxy in master-worker mode: a reload that still
# happens starts a new worker, not a new process tree.
DYNAMIC_MEMBERSHIP_MASTER_WORKER = {
    **DYNAMIC_MEMBERSHIP,
    "RAY_SERVE_HAPROXY_MASTER_WORKER_ENABLED": "1",
}
# Replicas report their health to their node's proxy instead of being probed.
PUSH_HEALTH = {"RAY_SERVE_ENABLE_PUSH_HEALTH": "1"}
# Ray exports its metrics every second, so a run reads counters that are current.
FAST_METRICS = {"RAY_metrics_report_interval_ms": "1000"}

# Membership churn's nodes: an old HAProxy worker is hard-stopped 3 s after a
# reload (sooner than the churn's 4 s requests end), and a removed replica
# goes after 2 s, so the churn never runs out of room for new ones.
CHURN_HARD_STOP_AFTER_S = 3
MEMBERSHIP_CHURN = {
    "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": str(CHURN_HARD_STOP_AFTER_S),
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
}
