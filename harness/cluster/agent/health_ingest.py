"""The controller-ingest load of bench-health: the health-report batches many
node relays would send, fed to the real controller."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from harness.cluster.agent.session import connect

if TYPE_CHECKING:
    from ray.actor import ActorClass


def health_ingest(
    nodes: int, replicas_per_node: int, period_s: float, duration_s: float, senders: int
) -> dict:
    """Feed the real controller the batches `nodes` node relays would send for
    `nodes` x `replicas_per_node` replicas with health period `period_s`: one call
    per node per period, `replicas_per_node` reports each (distinct replica ids),
    each node a named sender as relays are, spread evenly over the period, one batch
    in flight per node as the relay sends them. `senders` actors (kept off the
    head) share the nodes. Returns what was sent; the controller counts what it
    received itself."""
    ray = connect()

    @ray.remote(num_cpus=0, resources={"w": 0.001})
    class Relays:
        async def run(self, first: int, count: int) -> dict:
            import asyncio

            from ray.serve._private.common import ReplicaHealthBatch, ReplicaHealthReport
            from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

            controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
            sent = {"calls": 0, "reports": 0}
            end = time.monotonic() + duration_s

            async def node(index: int) -> None:
                ids = [f"{index:04x}{replica:04x}" for replica in range(replicas_per_node)]
                await asyncio.sleep(period_s * index / nodes)
                while time.monotonic() < end:
                    started = time.monotonic()
                    reports = [ReplicaHealthReport(rid, started, True, 0) for rid in ids]
                    batch = ReplicaHealthBatch(reports, [], f"node-{index}", time.time())
                    await controller.record_replica_health_reports.remote(batch.to_bytes())
                    sent["calls"] += 1
                    sent["reports"] += len(reports)
                    await asyncio.sleep(max(0.0, period_s - (time.monotonic() - started)))

            await asyncio.gather(*(node(i) for i in range(first, first + count)))
            return sent

    share = -(-nodes // senders)
    # The decorator made Relays an actor class; mypy keeps a decorated class's own type.
    actors = [cast("ActorClass[Relays]", Relays).remote() for _ in range(senders)]
    results = ray.get(
        [
            # Ray types a method not marked @ray.method as the plain method,
            # without the .remote every actor method has.
            actor.run.remote(i * share, min(share, nodes - i * share))
            for i, actor in enumerate(actors)
        ]
    )
    return {
        "calls": sum(r["calls"] for r in results),
        "reports": sum(r["reports"] for r in results),
    }
