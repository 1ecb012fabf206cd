"""The GCS drain a spot-notice agent sends when its node gets a notice."""

from __future__ import annotations

import time


def drain(
    gcs_address: str,
    node_id_hex: str,
    reason: str,
    message: str,
    deadline_s: float,
    at: float = 0.0,
) -> dict:
    """Ask the GCS to drain a node, as a spot-notice agent would ("auto": the
    GCS the agent's session reaches). The node id must be hex: a binary id
    decodes to Nil, which the GCS accepts silently and never drains
    (ray/_private/node.py says so)."""
    import ray
    from ray.core.generated import autoscaler_pb2

    from harness.cluster.agent.session import GCS_ADDRESS

    gcs_address = GCS_ADDRESS if gcs_address == "auto" else gcs_address
    # _raylet.pyi declares only the id types, not the GCS client.
    client = ray._raylet.GcsClient(address=gcs_address)
    # Starting this process and importing Ray takes most of a second; the caller
    # starts it early and names the wall-clock time the drain is due (the
    # container's clock is the host's).
    time.sleep(max(0.0, at - time.time()))
    sent = time.time()
    deadline_ms = int((sent + deadline_s) * 1000) if deadline_s > 0 else 0
    accepted, rejection = client.drain_node(
        node_id_hex,
        # Ray ships its generated protobuf modules without .pyi.
        autoscaler_pb2.DrainNodeReason.Value(f"DRAIN_NODE_REASON_{reason}"),
        message,
        deadline_ms,
    )
    return {
        "accepted": accepted,
        "rejection": rejection,
        "sent": sent,
        "deadline": deadline_ms / 1000 if deadline_ms else None,
    }
