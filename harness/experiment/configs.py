"""Run configurations: the node environments that turn the patch set's
features on, shared by the scenarios and the benchmarks that compare a run
with and without them, and RunConfig, one image under one configuration.

Environments are the env vars each node starts with (on top of the cluster's
Serve environment), so a scenario and a benchmark that name the same
configuration start the same nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.cluster.images import ImageSpec
from harness.ladder.model import FORCE_KILL_COVERS_REQUEST_TIMEOUT

# The head's HAProxy follows replica changes over its admin socket with
# `add server` / `del server`: no replica count makes HAProxy reload.
RUNTIME_SERVERS = {"RAY_SERVE_HAPROXY_RUNTIME_SERVERS_ENABLED": "1"}
# Runtime servers, and HAProxy in master-worker mode for the reloads other
# changes still cause: such a reload starts a new worker, not a new process.
RUNTIME_SERVERS_MASTER_WORKER = {
    **RUNTIME_SERVERS,
    "RAY_SERVE_HAPROXY_MASTER_WORKER_ENABLED": "1",
}
# Replicas report their health to their node's proxy instead of being probed.
PUSH_HEALTH = {"RAY_SERVE_ENABLE_PUSH_HEALTH": "1"}
# The settings the patch series adds: a Serve that reads any of them is patched.
SERIES_SETTINGS = (
    *PUSH_HEALTH,
    *RUNTIME_SERVERS_MASTER_WORKER,
    *FORCE_KILL_COVERS_REQUEST_TIMEOUT,
)
# Ray exports its metrics every second, so a run reads counters that are current.
FAST_METRICS = {"RAY_metrics_report_interval_ms": "1000"}
# And the HAProxy manager reads its counters (reloads, membership updates)
# every second for that export.
FAST_HAPROXY_METRICS = {**FAST_METRICS, "RAY_SERVE_HAPROXY_METRICS_REPORT_INTERVAL_S": "1"}

# Membership churn's nodes: an old HAProxy worker is hard-stopped 3 s after a
# reload (sooner than the churn's 4 s requests end), and a removed replica
# goes after 2 s, so the churn never runs out of room for new ones.
CHURN_HARD_STOP_AFTER_S = 3
MEMBERSHIP_CHURN = {
    "RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S": str(CHURN_HARD_STOP_AFTER_S),
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
}


@dataclass(frozen=True)
class RunConfig:
    """One run of a scenario: the image, and what this run's nodes change.
    `name` says what the change is ("" for the image as the scenario
    configures it) and `env` is the node env that makes it, added to the
    scenario's own. The label, derived from both, names the run in reports
    and its history's file; the config itself is saved in the history's meta,
    so judging again reads it instead of parsing the label."""

    image: ImageSpec
    name: str = ""
    env: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def label(self) -> str:
        return f"{self.image} {self.name}".strip()

    def sets(self, env: dict[str, str]) -> bool:
        """Whether this run's nodes get every variable of `env`, with its value."""
        return env.items() <= self.env.items()

    def to_meta(self) -> dict:
        return {"image": str(self.image), "name": self.name, "env": dict(self.env)}

    @classmethod
    def from_meta(cls, meta: dict) -> RunConfig:
        return cls(ImageSpec.parse(meta["image"]), meta.get("name", ""), dict(meta.get("env", {})))
