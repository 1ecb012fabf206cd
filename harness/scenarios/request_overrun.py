"""request_overrun (ordering B): where a request that runs past its
budget surfaces, and as what.

Two clusters of the same image, differing only in the ladder:

    B holds     request_timeout_s 3 < HAProxy `timeout server` 5: the replica
                gives up first and answers 408, with Serve's own message
    B violated  request_timeout_s 5 > HAProxy `timeout server` 3: HAProxy gives
                up first; its 504 is rewritten to a bare 500 by Ray's config

On each, requests of 4 s (overrun the shorter bound, not the longer) and
requests of 1 s (within both, the control) are sent straight to the head
node's HAProxy. A client that sees a 500 cannot tell an overrun from a crash,
which is why ordering B puts the replica's bound first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from harness.cluster import appconfigs, runs
from harness.cluster.cluster import SERVE_PORT, Cluster, ClusterConfig
from harness.experiment.configs import RunConfig
from harness.experiment.history import History
from harness.experiment.load import HTTPConnection, send
from harness.scenarios.base import STOCK, Facts, ImageRun, Scenario

OVERRUN_S, CONTROL_S = 4.0, 1.0
# name -> (request_timeout_s, RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S, expected status)
LADDERS = {"B holds": (3.0, 5, 408), "B violated": (5.0, 3, 500)}


@dataclass
class Overruns:
    """How one ladder answered the requests that overran it."""

    statuses: list  # distinct statuses, sorted (None: no answer)
    answered_after: str  # "min-max s" of their latency, "-" with none


@dataclass
class OverrunFacts(Facts):
    ladders: dict[str, Overruns] = field(default_factory=dict)

    def rows(self) -> dict[str, Any]:
        rows: dict[str, Any] = {}
        for ladder, overruns in self.ladders.items():
            rows[f"{ladder}: overrun statuses"] = overruns.statuses
            rows[f"{ladder}: overrun answered after"] = overruns.answered_after
        return rows


class RequestOverrun(Scenario[OverrunFacts]):
    name = "request_overrun"
    title = "A request that overruns its budget: 408 from the replica or 500 from HAProxy"

    def __init__(self, requests: int = 10) -> None:
        self.requests = requests

    runs_on = (STOCK,)

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        # The ladders and the status each should give, as they were for this run.
        history = History({"ladders": LADDERS})

        def on_its_own_cluster(_order: int, ladder: str) -> None:
            request_timeout_s, timeout_server_s, _ = LADDERS[ladder]
            cluster_config = ClusterConfig(
                image=image_tag,
                name="rayspot-overrun",
                workers=1,
                env={"RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S": str(timeout_server_s), **config.env},
            )
            with Cluster(cluster_config) as cluster:
                cluster.deploy(
                    appconfigs.deploy_config(
                        # Room for every request at once: a queued control would
                        # time out too, for a reason that is not its own.
                        appconfigs.echo_app(
                            num_replicas=2, max_replicas_per_node=None, max_ongoing_requests=100
                        ),
                        http_options={"request_timeout_s": request_timeout_s},
                    )
                )
                asyncio.run(self._send(cluster.head.ip, ladder, history))

        # The ladders' clusters side by side: each request is timed against its
        # own cluster's bounds, whole seconds apart, so two small clusters at
        # once change no verdict (35-40 s here, against 51 s one after the other).
        runs.side_by_side(on_its_own_cluster, list(LADDERS), parallel=len(LADDERS))
        return history

    def judge(self, config: RunConfig, history: History) -> ImageRun[OverrunFacts]:
        run = ImageRun(config.label, history, OverrunFacts(), config)
        for ladder, (request_timeout_s, timeout_server_s, expected) in history.meta[
            "ladders"
        ].items():
            overruns = [r for r in history.requests if r.kind == f"overrun, {ladder}"]
            controls = [r for r in history.requests if r.kind == f"control, {ladder}"]
            statuses = sorted({r.status for r in overruns}, key=str)
            run.facts.ladders[ladder] = Overruns(
                statuses,
                f"{min(r.latency for r in overruns):.2f}-{max(r.latency for r in overruns):.2f} s"
                if overruns
                else "-",
            )
            run.checks.append(
                (
                    f"{ladder} (request_timeout_s {request_timeout_s:g}, timeout "
                    f"server {timeout_server_s}): every {OVERRUN_S:g} s request "
                    f"answered {expected}",
                    statuses == [expected],
                )
            )
            run.checks.append(
                (
                    f"{ladder}: every {CONTROL_S:g} s control request succeeded",
                    bool(controls) and all(r.ok for r in controls),
                )
            )
        return run

    async def _send(self, host: str, ladder: str, history: History) -> None:
        conns = [HTTPConnection(host, SERVE_PORT, i) for i in range(2 * self.requests)]
        try:
            await asyncio.gather(
                *(
                    send(history, c, f"/?sleep={OVERRUN_S:g}", f"overrun, {ladder}", 30)
                    for c in conns[: self.requests]
                ),
                *(
                    send(history, c, f"/?sleep={CONTROL_S:g}", f"control, {ladder}", 30)
                    for c in conns[self.requests :]
                ),
            )
        finally:
            for conn in conns:
                conn.close()

    def expect(self, runs: dict[str, ImageRun[OverrunFacts]]) -> tuple[bool, list[str]]:
        # The overruns are failures to the client by design; what is judged is
        # which status each ladder produces.
        findings = [
            f"{run.label}: {what}: {'yes' if ok else 'NO'}"
            for run in runs.values()
            for what, ok in run.checks
        ]
        findings += [
            f"{run.label}: {key}: {value}"
            for run in runs.values()
            for key, value in run.facts.rows().items()
        ]
        return all(ok for run in runs.values() for _, ok in run.checks), findings
