"""The agent's connection to the local Ray cluster and Serve's client."""

from __future__ import annotations

import logging


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
