"""Echo: answers every request with who served it, so a history can attribute
each request to a replica and a node (container) without asking Ray.

`GET /?sleep=S` sleeps S seconds first (capped), which the scenarios use to
hold a request in flight across a fault.
"""

import asyncio
import os
import socket

import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

MAX_SLEEP_S = 60.0


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Echo:
    def __init__(self) -> None:
        self._identity = {
            "replica": serve.get_replica_context().replica_id.unique_id,
            "node": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }

    async def __call__(self, request: Request) -> JSONResponse:
        sleep_s = min(float(request.query_params.get("sleep", 0) or 0), MAX_SLEEP_S)
        if sleep_s > 0:
            await asyncio.sleep(sleep_s)
        return JSONResponse({**self._identity, "slept": sleep_s})


app = Echo.bind()
