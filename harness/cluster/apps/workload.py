"""The spot-notice workload: short requests, and long-runners that hold a
replica for 8-20 s, served by separate deployments so each has its own warm
floor (`min_replicas`) and its own drain.

    GET /long/?sleep=S   the long-runner: sleeps S seconds, clamped to
                         [0, LONG_RUNNER_MAX_S], then answers who served it

Short and streaming requests go to the echo app (harness/cluster/apps/echo.py) at /.
`harness/cluster/appconfigs.py:workload_apps` deploys both; `harness/experiment/load.py:Mix`
with `long_path="/long/"` is the traffic model that mixes them.
"""

import asyncio
from typing import cast

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from harness.cluster.apps.echo import replica_identity

# The spot-notice ladder's longest request. Ordering A (long-runner < request
# timeout) is only as good as this clamp.
LONG_RUNNER_MAX_S = 20.0


@serve.deployment(ray_actor_options={"num_cpus": 0})
class LongRunner:
    def __init__(self) -> None:
        self._identity = replica_identity()

    async def __call__(self, request: Request):
        asked = float(request.query_params.get("sleep", 0) or 0)
        sleep_s = min(max(asked, 0.0), LONG_RUNNER_MAX_S)
        await asyncio.sleep(sleep_s)
        return JSONResponse({**self._identity, "slept": sleep_s})


# The decorator made LongRunner a Deployment; mypy keeps a decorated class's own type.
app = cast(serve.Deployment, LongRunner).bind()
