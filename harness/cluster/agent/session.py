"""The agent's connection to the local Ray cluster and Serve's client."""

from __future__ import annotations

import logging
import os

# The agent runs in the head, beside the GCS (`ray start --head --port`), or
# as a Ray job on a cluster the harness did not start, where Ray tells it the
# GCS's address in RAY_ADDRESS.
GCS_ADDRESS = os.environ.get("RAY_ADDRESS", "127.0.0.1:6379")


def gcs_tables():
    """Ray's view of the GCS tables (nodes, actors) without joining the cluster
    as a driver. `ray.init` starts a core worker and registers a job, seconds of
    CPU on a busy node for every question, where reading a table takes
    milliseconds; the harness asks such questions every second while it waits."""
    import ray

    # Ray's _raylet.pyi declares only the id types.
    from ray._raylet import GcsClientOptions  # type: ignore[attr-defined]

    state = ray._private.state.state
    state._initialize_global_state(
        GcsClientOptions.create(
            GCS_ADDRESS, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=False
        )
    )
    return state


def connect():
    import ray

    ray.init(address="auto", logging_level=logging.ERROR, log_to_driver=False)
    return ray


def serve_client(schema):
    """Serve's client, Serve started with the config's HTTP options if it is not
    running yet (what `serve deploy` does)."""
    from ray.serve._private.api import serve_start

    return serve_start(
        http_options=schema.http_options.dict(), proxy_location=schema.proxy_location
    )
