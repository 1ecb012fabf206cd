"""What the GCS and the Serve controller report: nodes, actors, and the
controller's own health metrics."""

from __future__ import annotations

from harness.cluster.agent.session import connect, gcs_tables


def nodes() -> list[dict]:
    # Ray ships its generated protobuf modules without .pyi.
    from ray.core.generated.common_pb2 import NodeDeathInfo

    keep = ("NodeID", "Alive", "NodeManagerAddress", "NodeManagerHostname", "Resources")
    found = []
    for node in gcs_tables().node_table():
        info = {k: v for k, v in node.items() if k in keep or k.startswith("Death")}
        if isinstance(info.get("DeathReason"), int):  # the enum's number; name it
            info["DeathReason"] = NodeDeathInfo.Reason.Name(info["DeathReason"])
        found.append(info)
    return found


def actors() -> list[dict]:
    """Every actor the GCS knows, alive or dead, with its node, pid and times.
    From the GCS directly: the state API would need the dashboard."""
    table = gcs_tables().actor_table(actor_id=None)
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


def gcs_health_config() -> dict:
    """How the GCS checks that nodes are alive, as this node's Ray reads its
    settings (`RAY_health_check_*` overrides included): a node is declared dead
    after `failure_threshold` checks in a row fail, one every `period_ms`."""
    from ray._raylet import Config  # type: ignore[attr-defined]  # a Cython class

    return {
        "period_ms": Config.health_check_period_ms(),
        "timeout_ms": Config.health_check_timeout_ms(),
        "failure_threshold": Config.health_check_failure_threshold(),
        "initial_delay_ms": Config.health_check_initial_delay_ms(),
    }


def controller_health() -> dict:
    """The Serve controller's own health metrics (`get_health_metrics`): rolling
    means of its control loop and of the deployment-state update within it."""
    ray = connect()
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    metrics = ray.get(controller.get_health_metrics.remote())
    return {
        key: (metrics.get(key) or {}).get("mean")
        for key in ("loop_duration_s", "deployment_state_update_duration_s")
    }


def ray_info(settings: list[str]) -> dict:
    """Which Ray this node runs, which of `settings` (env var names) its Serve
    knows (a patched Serve reads settings stock does not), and the node's
    Serve and Ray environment: how the cluster is configured, as found."""
    import inspect
    import os
    import time

    import ray
    from ray.serve._private import constants

    source = inspect.getsource(constants)
    return {
        "version": ray.__version__,
        "commit": ray.__commit__,
        "known": [name for name in settings if f'"{name}"' in source],
        # How this node's clock and zone stand to the harness's: Ray writes
        # log times in local time.
        "time": time.time(),
        "utc_offset_s": time.localtime().tm_gmtoff,
        "env": {
            k: v
            for k, v in sorted(os.environ.items())
            if k.startswith(("RAY_SERVE_", "RAY_health", "RAY_metrics"))
        },
    }
