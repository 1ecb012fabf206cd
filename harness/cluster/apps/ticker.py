"""Ticker: a WebSocket endpoint, so the harness can hold a long-lived
connection open across a drain or a preemption and see how it ends.

    WS /ticks?n=N    accept, then send N JSON ticks (who is answering, the
                     tick's index), TICK_INTERVAL_S apart, then close 1000

Served through a FastAPI ingress: Serve routes WebSockets only to those.
"""

import asyncio
import json
from typing import cast

from fastapi import FastAPI, WebSocket
from ray import serve

from harness.cluster.apps.echo import replica_identity

TICK_INTERVAL_S = 0.2
MAX_TICKS = 10_000

api = FastAPI()


@serve.deployment(ray_actor_options={"num_cpus": 0})
@serve.ingress(api)
class Ticker:
    def __init__(self) -> None:
        self._identity = replica_identity()

    @api.websocket("/ticks")
    async def ticks(self, websocket: WebSocket, n: int = 100) -> None:
        await websocket.accept()
        for index in range(min(n, MAX_TICKS)):
            if index:
                await asyncio.sleep(TICK_INTERVAL_S)
            await websocket.send_text(json.dumps({**self._identity, "tick": index}))
        await websocket.close(1000)


# The decorator made Ticker a Deployment; mypy keeps a decorated class's own type.
app = cast(serve.Deployment, Ticker).bind()
