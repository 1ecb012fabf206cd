"""Faults, injected into a running cluster on a schedule. Each fault writes its
own timed events into the history (`start`, `end`, and `mark`s for the steps in
between), so the checker can attribute failures to it.

All are coroutines: they run beside the load generator on one event loop, and
the blocking Docker calls go to a thread so that they never stall the load.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from harness.cluster.boundary import Node, RayCluster
from harness.cluster.cluster import Cluster
from harness.core.errors import HarnessError
from harness.experiment.history import Event, History
from harness.ladder.notice import SpotNotice


def _event(
    history: History,
    fault: str,
    phase: str,
    target: str | None = None,
    label: str | None = None,
    **detail,
) -> float:
    now = time.time()
    if label:
        detail["label"] = label
    history.add_event(Event(now, fault, phase, target, detail))
    return now


async def _sleep_until(when: float) -> None:
    delay = when - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


# ------------------------------------------------------------------ spot preemption


async def spot_preemption(
    cluster: RayCluster, node: Node, history: History, notice: SpotNotice
) -> dict:
    """Notice, detection delay, a GCS drain with reason PREEMPTION and a deadline,
    then the container killed when the notice ends (never before the deadline)."""
    node_id = await asyncio.to_thread(cluster.ray_node_id, node)
    t0 = _event(
        history,
        "spot_preemption",
        "start",
        node.name,
        label="notice",
        notice_s=notice.notice_s,
        detection_s=notice.detection_s,
        drain_deadline_s=notice.drain_deadline_s,
        node_id=node_id,
    )
    due = t0 + notice.detection_s
    # The drain command starts early and waits for its due time in the cluster.
    await _sleep_until(due - cluster.command_lead_s)
    drain = await asyncio.to_thread(cluster.drain_node, node_id, notice.drain_deadline_s, due)
    _event(history, "spot_preemption", "mark", node.name, label="drain sent", **drain)
    if not drain["accepted"]:
        _event(history, "spot_preemption", "end", node.name, label="drain rejected")
        raise HarnessError(
            f"the GCS rejected the PREEMPTION drain of {node.name}: {drain['rejection']}"
        )
    kill_at = max(t0 + notice.notice_s, drain["deadline"])
    await _sleep_until(kill_at)
    exited_before = await asyncio.to_thread(cluster.kill, node)
    killed = _event(
        history,
        "spot_preemption",
        "mark",
        node.name,
        label="terminated",
        already_exited=exited_before,
    )
    _event(history, "spot_preemption", "end", node.name)
    return {"t0": t0, "drain": drain, "killed": killed, "exited_before_kill": exited_before}


# ------------------------------------------------------------------ other faults


async def reload_churn(
    cluster: Cluster, history: History, configs: list[dict], interval_s: float
) -> None:
    """Redeploy a sequence of configs (replica counts up and down), each change
    making every node's HAProxy reload."""
    start = _event(history, "reload_churn", "start", label=f"{len(configs)} changes")
    for number, config in enumerate(configs):
        await _sleep_until(start + number * interval_s)
        await asyncio.to_thread(cluster.deploy, config)
        _event(history, "reload_churn", "mark", label=f"deploy {number + 1}")
    _event(history, "reload_churn", "end")


async def kill_node(cluster: Cluster, node: Node, history: History) -> None:
    """kill -9 of the whole node, unannounced."""
    _event(history, "kill", "start", node.name)
    await asyncio.to_thread(cluster.kill, node)
    _event(history, "kill", "end", node.name)


async def pause_node(cluster: Cluster, node: Node, history: History, duration_s: float) -> None:
    """Freeze every process of the node (SIGSTOP-like cgroup freeze), then thaw."""
    _event(history, "pause", "start", node.name)
    await asyncio.to_thread(cluster.pause, node)
    try:
        await asyncio.sleep(duration_s)
    finally:
        await asyncio.to_thread(cluster.unpause, node)
        _event(history, "pause", "end", node.name)


async def partition_node(cluster: Cluster, node: Node, history: History, duration_s: float) -> None:
    """Cut the node off the cluster network, then reconnect it with its old IP."""
    _event(history, "partition", "start", node.name)
    await asyncio.to_thread(cluster.partition, node)
    try:
        await asyncio.sleep(duration_s)
    finally:
        await asyncio.to_thread(cluster.heal, node)
        _event(history, "partition", "end", node.name)


async def _held_fault(
    history: History,
    fault: str,
    target: str,
    apply: Callable[[], object],
    undo: Callable[[], object],
    duration_s: float,
    **detail,
) -> None:
    """Apply a fault, hold it for `duration_s`, undo it whatever happens. The
    fault starts once it holds: the host commands that apply it can take a
    while on a loaded machine."""
    await asyncio.to_thread(apply)
    _event(history, fault, "start", target, **detail)
    try:
        await asyncio.sleep(duration_s)
    finally:
        await asyncio.to_thread(undo)
        _event(history, fault, "end", target)


async def slow_link(
    cluster: Cluster, node: Node, history: History, rate_kbit: int, duration_s: float
) -> None:
    """Throttle the node's link (a token bucket, both directions) for a while:
    what a saturated or degraded network path does to everything the node sends
    and receives."""
    await _held_fault(
        history,
        "slow_link",
        node.name,
        lambda: cluster.slow_link(node, rate_kbit),
        lambda: cluster.restore_link(node),
        duration_s,
        rate_kbit=rate_kbit,
    )


async def lossy_link(
    cluster: Cluster, node: Node, history: History, fraction: float, duration_s: float
) -> None:
    """Drop a fraction of the node's packets each way, at random, for a while."""
    await _held_fault(
        history,
        "packet_loss",
        node.name,
        lambda: cluster.drop_packets(node, fraction),
        lambda: cluster.stop_dropping_packets(node),
        duration_s,
        fraction=fraction,
    )


async def starve_cpu(
    cluster: Cluster, node: Node, history: History, cpus: float, duration_s: float
) -> None:
    """Cap the node's CPU (a cgroup quota) for a while: a noisy neighbour."""
    await _held_fault(
        history,
        "cpu_starvation",
        node.name,
        lambda: cluster.limit_cpu(node, cpus),
        lambda: cluster.unlimit_cpu(node),
        duration_s,
        cpus=cpus,
    )


async def hang_replica(
    cluster: Cluster, history: History, app: str, deployment: str, duration_s: float
) -> str:
    """Stop one replica's worker process (SIGSTOP) for a while: its
    connections open and nothing answers, not even its health check. Resumed
    whatever happens. Returns the replica's actor name."""
    # The actor table can still list a replica whose process just went (one
    # being replaced): take one whose process is there.
    for _ in range(10):
        by_node = await asyncio.to_thread(cluster.replicas_by_node, app, deployment)
        candidates = [
            (ray_node_id, actor)
            for ray_node_id, actors in sorted(by_node.items())
            for actor in sorted(actors, key=lambda a: a["name"])
        ]
        for ray_node_id, replica in candidates:
            node = await asyncio.to_thread(cluster.node_of, ray_node_id)
            pid = str(replica["pid"])
            code, _ = await asyncio.to_thread(cluster.exec_in, node, ["kill", "-0", pid], False)
            if code == 0:
                break
        else:
            await asyncio.sleep(1)
            continue
        break
    else:
        raise HarnessError(f"no alive replica process of {app}/{deployment} to hang")
    await _held_fault(
        history,
        "hung_replica",
        replica["name"],
        lambda: cluster.exec_in(node, ["kill", "-STOP", pid]),
        # A replica replaced meanwhile took its process with it.
        lambda: cluster.exec_in(node, ["kill", "-CONT", pid], False),
        duration_s,
        pid=pid,
    )
    return replica["name"]


# How far below the GCS's node-death threshold a short partition stays.
PARTITION_MARGIN_S = 3.0


async def short_partition(
    cluster: Cluster, node: Node, history: History, duration_s: float
) -> None:
    """Cut the node off for less than the GCS takes to declare it dead (read
    from the cluster), so that what follows is Serve's doing, not the node's
    death: a flaky link, a switch failover. Refused before anything changes
    if `duration_s` would reach that threshold."""
    death_after_s = await asyncio.to_thread(cluster.node_death_after_s)
    if duration_s > death_after_s - PARTITION_MARGIN_S:
        raise HarnessError(
            f"a short partition must end {PARTITION_MARGIN_S:g} s before the GCS "
            f"declares the node dead ({death_after_s:g} s here: "
            f"health_check_failure_threshold x health_check_period_ms); "
            f"{duration_s:g} s is too long. Use partition_node for a node that dies."
        )
    await partition_node(cluster, node, history, duration_s)


async def fail_health_check(history: History, host: str, port: int, prefix: str = "") -> str:
    """Flip the echo app's switch on whichever replica gets this request (of the
    app at route `prefix`): from then on its `check_health` raises. Returns that
    replica's id."""
    from harness.experiment.load import HTTPConnection

    conn = HTTPConnection(host, port, -1)
    row = await conn.get(f"{prefix}/admin/fail-health", "admin", 10.0)
    conn.close()
    if row.error:
        raise HarnessError(f"could not reach the app to fail a health check: {row.error}")
    if row.replica is None:
        raise HarnessError(
            "the app that was to fail a health check did not say which replica it is"
        )
    _event(history, "health_failure", "start", row.replica, label="check_health fails")
    return row.replica


async def controller_lag(
    cluster: Cluster, history: History, cycles: int, stop_s: float, run_s: float
) -> None:
    """SIGSTOP/SIGCONT cycles on the Serve controller's process: it stops
    probing, broadcasting and reconciling while stopped."""
    pid = await asyncio.to_thread(cluster.controller_pid)
    for _ in range(cycles):
        _event(history, "controller_lag", "start", f"pid {pid}")
        await asyncio.to_thread(cluster.exec_in, cluster.head, ["kill", "-STOP", str(pid)])
        try:
            await asyncio.sleep(stop_s)
        finally:
            await asyncio.to_thread(cluster.exec_in, cluster.head, ["kill", "-CONT", str(pid)])
            _event(history, "controller_lag", "end", f"pid {pid}")
        await asyncio.sleep(run_s)
