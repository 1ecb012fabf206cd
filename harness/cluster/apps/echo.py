"""Echo: answers every request with who served it, so a history can attribute
each request to a replica and a node (container) without asking Ray.

    GET /?sleep=S             sleep S seconds first (capped), then answer; the
                              scenarios hold requests in flight across a fault
    GET /stream?chunks=N      a chunked response of N JSON lines, 0.2 s apart
    GET /admin/fail-health    the replica that receives it fails every health
                              check from then on (the nemesis's switch)
    GET /admin/block-loop?s=S the replica that receives it blocks the event loop
                              its user code runs on for S seconds (capped)
"""

import asyncio
import json
import os
import socket
import time
from typing import cast

import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

MAX_SLEEP_S = 60.0
CHUNK_INTERVAL_S = 0.2


def replica_identity() -> dict:
    """Who is answering: every app in harness/cluster/apps/ puts this in its responses."""
    return {
        "replica": serve.get_replica_context().replica_id.unique_id,
        "node": socket.gethostname(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "pid": os.getpid(),
    }


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Echo:
    def __init__(self) -> None:
        self._identity = replica_identity()
        self._fail_health = False

    def check_health(self) -> None:
        if self._fail_health:
            raise RuntimeError("health check failing on purpose (/admin/fail-health)")

    async def __call__(self, request: Request):
        path = request.url.path.rstrip("/")
        if path.endswith("/admin/fail-health"):
            self._fail_health = True
            return JSONResponse({**self._identity, "fail_health": True})
        if path.endswith("/admin/block-loop"):
            # On purpose: a blocking call in async code stalls the whole loop.
            time.sleep(min(float(request.query_params.get("s", 1)), MAX_SLEEP_S * 2))
            return JSONResponse({**self._identity, "blocked": True})
        if path.endswith("/stream"):
            chunks = min(int(request.query_params.get("chunks", 5)), 1000)
            return StreamingResponse(self._lines(chunks), media_type="application/x-ndjson")
        sleep_s = min(float(request.query_params.get("sleep", 0) or 0), MAX_SLEEP_S)
        if sleep_s > 0:
            await asyncio.sleep(sleep_s)
        return JSONResponse({**self._identity, "slept": sleep_s})

    async def _lines(self, chunks: int):
        for index in range(chunks):
            if index:
                await asyncio.sleep(CHUNK_INTERVAL_S)
            yield json.dumps({**self._identity, "chunk": index}) + "\n"


# The decorator made Echo a Deployment; mypy keeps a decorated class's own type.
app = cast(serve.Deployment, Echo).bind()
