"""streaming_drain: streams across the HAProxy reloads a spot preemption causes
on a node that survives it.

A worker gets a spot notice (the spot-notice ladder at `scale`, the node
killed at its drain deadline); its replicas move, and the head node's HAProxy
reloads several times. A soft-stopped
HAProxy worker keeps the connections it holds until `hard-stop-after`, and two
kinds of keep-alive connection can still carry a request into it:

  stream loops  connections that carry one long stream after another,
                straight to the head's HAProxy. A stream whose response
                headers went out before a reload leaves its connection
                reusable (soft-stop marks a connection to close only through
                the next response headers it writes), so the old worker
                admits the next stream, and the hard stop cuts it.
  idle          connections that carried one short request before the
                preemption and then sat idle across the head's first reload;
                each then carries a long stream, from 4 s after that reload.
                Serve renders `option idle-close-on-response`, so an old
                worker keeps idle connections open for one last request, up to
                the hard stop.

Plus natural traffic through the front LB for the whole event (short requests
and 40-chunk streams), as users send it.

Pass: no request fails. The report counts the HAProxy processes the head
started after the notice (several on the reload path, none with runtime
servers). Streams are at most the ladder's request timeout long, so each
one is a request the cluster promised to finish.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from harness.cluster import appconfigs, images
from harness.cluster.boundary import Node, RayCluster
from harness.cluster.cluster import ClusterConfig
from harness.experiment.configs import RunConfig
from harness.experiment.history import History
from harness.experiment.load import HTTPConnection, LoadSpec, Mix, open_loop, send
from harness.experiment.nemesis import spot_preemption
from harness.ladder.model import Ladder
from harness.scenarios.base import (
    PATCHED,
    STOCK,
    Facts,
    ImageRun,
    Scenario,
    fact,
    haproxy_starts,
    lb_errors,
    observe_lb_errors,
    watch_head_haproxy,
    with_runtime_servers,
)
from harness.scenarios.spot_preemption import preemption_target

LEAD_S = 4.0  # traffic before the notice
TAIL_S = 6.0  # traffic after the node is gone
IDLE_AFTER_RELOAD_S = 4.0  # the first idle connection's stream, after the head's first reload
IDLE_STAGGER_S = 0.4  # and the next ones, this much apart
# Observation: the moment the idle connections' streams were due from.
IDLE_FROM = "idle streams due from"
LOOP, IDLE, PRIME = "stream loop", "idle stream", "prime"  # request kinds
CHUNK_S = 0.2  # the echo app's stream sends a chunk this often


@dataclass
class StreamingFacts(Facts):
    failed_by_kind: dict[str, str] = fact("failed / sent, by kind")  # kind -> "failed / sent"
    started_after_notice: int = fact("HAProxy processes started on the head after the notice")
    idle_sent_from: str = fact("idle streams sent from")
    lb_errors: str = fact("front LB's errors, by node")


class StreamingDrain(Scenario[StreamingFacts]):
    name = "streaming_drain"
    title = "Streams across the reloads a spot preemption causes on a surviving node"

    def __init__(
        self,
        scale: float = 0.5,
        loops: int = 8,
        idle: int = 8,
        rate: float = 10.0,
        runtime_servers: bool = True,
        margin_s: float = 1.0,
    ) -> None:
        self.ladder = Ladder().scaled(scale)
        self.scale, self.loops, self.idle, self.rate = scale, loops, idle, rate
        # Also run the patched image with runtime servers.
        self.runtime_servers = runtime_servers
        # Long, but `margin_s` inside the request timeout: on a busy host (two
        # runs at once) a stream takes longer than its chunks' sum.
        self.margin_s = margin_s
        self.chunks = round((self.ladder.known_request_timeout_s - margin_s) / CHUNK_S)

    runs_on = (STOCK, PATCHED)
    needs = frozenset({"terminate"})  # the preemption's end

    def configs(self, spec: images.ImageSpec) -> list[RunConfig]:
        return with_runtime_servers(spec, self.runtime_servers)

    def cluster_config(self, image_tag: str, config: RunConfig) -> ClusterConfig:
        """Two workers, the ladder's node env."""
        return ClusterConfig(
            image=image_tag,
            name="rayspot-streaming",
            workers=2,
            env={**self.ladder.node_env(), **config.env},
            worker_resources={"w": 10},
        )

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        history = History({"ladder_scale": self.scale, "chunks": self.chunks})
        app = appconfigs.deploy_config(
            appconfigs.echo_app(
                num_replicas=4,
                max_replicas_per_node=None,
                ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
                max_ongoing_requests=100,
                **self.ladder.deployment_options(),
            ),
            http_options=self.ladder.http_options(),
        )
        with self.open_cluster(image_tag, config) as cluster:
            cluster.deploy(app)
            cluster.wait_lb_ready()
            target, _, _ = preemption_target(cluster)
            asyncio.run(self._experiment(cluster, target, history))
            observe_lb_errors(cluster, history)
        return history

    async def _experiment(self, cluster: RayCluster, target: Node, history: History) -> None:
        # The node goes at its drain deadline: the streams meet every reload
        # of the drain, and nothing happens in the rest of a longer notice.
        notice = self.ladder.notice.ending_at_deadline()
        timeout_s = self.ladder.known_request_timeout_s + 10
        stream = f"/stream?chunks={self.chunks}"
        head, port = cluster.head.ip, cluster.serve_port
        idle = [HTTPConnection(head, port, 1000 + i) for i in range(self.idle)]
        await asyncio.gather(*(send(history, c, "/", PRIME, 10) for c in idle))

        stop = asyncio.Event()
        first_reload = asyncio.get_running_loop().create_future()
        preempted = asyncio.Event()

        def reloaded(now: float) -> None:
            if preempted.is_set() and not first_reload.done():
                first_reload.set_result(now)

        watcher = asyncio.create_task(watch_head_haproxy(cluster, history, stop, reloaded))
        loops = [
            asyncio.create_task(
                self._loop(
                    HTTPConnection(head, port, 2000 + i),
                    history,
                    stream,
                    timeout_s,
                    stop,
                    i * self.chunks * CHUNK_S / self.loops,
                )
            )
            for i in range(self.loops)
        ]
        spec = LoadSpec(
            rate=self.rate,
            duration_s=LEAD_S + notice.notice_s + TAIL_S,
            connections=64,
            timeout_s=timeout_s,
            mix=Mix(short=0.7, stream=0.3, stream_chunks=40),
        )
        lb = asyncio.create_task(open_loop(*cluster.ingress, spec, history))
        await asyncio.sleep(LEAD_S)
        preempted.set()
        preemption = asyncio.create_task(spot_preemption(cluster, target, history, notice))
        idle_streams = asyncio.create_task(
            self._idle_streams(
                idle,
                history,
                stream,
                timeout_s,
                first_reload,
                time.time() + notice.detection_s + notice.drain_deadline_s / 2,
            )
        )
        await preemption
        await asyncio.sleep(TAIL_S)
        stop.set()
        await asyncio.gather(lb, idle_streams, *loops)
        await watcher
        for conn in idle:
            conn.close()

    async def _loop(
        self,
        conn: HTTPConnection,
        history: History,
        path: str,
        timeout_s: float,
        stop: asyncio.Event,
        delay_s: float,
    ) -> None:
        """One stream after another on one connection, until `stop`."""
        await asyncio.sleep(delay_s)
        while not stop.is_set():
            await send(history, conn, path, LOOP, timeout_s)
        conn.close()

    async def _idle_streams(
        self,
        idle: list[HTTPConnection],
        history: History,
        path: str,
        timeout_s: float,
        first_reload: asyncio.Future,
        fallback: float,
    ) -> None:
        """A stream on each idle connection, staggered from IDLE_AFTER_RELOAD_S
        after the head's first reload; with no reload (runtime servers),
        from `fallback`, in the middle of the drain."""
        try:
            since = await asyncio.wait_for(
                asyncio.shield(first_reload), max(0.0, fallback - time.time())
            )
        except TimeoutError:
            since = fallback - IDLE_AFTER_RELOAD_S
        history.observe(
            IDLE_FROM, {"first_reload": first_reload.done(), "since": since}, time.time()
        )

        async def one(index: int, conn: HTTPConnection) -> None:
            due = since + IDLE_AFTER_RELOAD_S + index * IDLE_STAGGER_S
            await asyncio.sleep(max(0.0, due - time.time()))
            await send(history, conn, path, IDLE, timeout_s)

        await asyncio.gather(*(one(i, c) for i, c in enumerate(idle)))

    def judge(self, config: RunConfig, history: History) -> ImageRun[StreamingFacts]:
        by_kind: dict[str, list] = {}
        for row in history.requests:
            by_kind.setdefault(row.kind, []).append(row)
        notice = next(e.time for e in history.events if e.fault == "spot_preemption")
        started = [pid for t, pids in haproxy_starts(history) if t >= notice for pid in pids]
        idle_from = history.value(IDLE_FROM)
        facts = StreamingFacts(
            failed_by_kind={
                kind: f"{sum(not r.ok for r in rows)} / {len(rows)}"
                for kind, rows in sorted(by_kind.items())
            },
            started_after_notice=len(started),
            idle_sent_from=(
                f"{IDLE_AFTER_RELOAD_S:g} s after the head's first reload"
                if idle_from and idle_from["first_reload"]
                else "the middle of the drain (no reload)"
            ),
            lb_errors=lb_errors(history),
        )
        failed = sum(not r.ok for r in history.requests)
        checks = [(f"no request failed ({failed} did)", failed == 0)]
        return ImageRun(config.label, history, facts, config, checks=checks)

    def expect(self, runs: dict[str, ImageRun[StreamingFacts]]) -> tuple[bool, list[str]]:
        """Stock must fail (else the scenario reproduced nothing); every
        configuration of the patched image must pass."""
        findings, ok = [], True
        for run in runs.values():
            assert run.config is not None  # judge gave every run its configuration
            expected = run.config.image.flavor != "stock"
            ok &= run.passed == expected
            findings.append(
                f"{run.label}: {'PASSED' if run.passed else 'FAILED'} "
                f"(expected to {'pass' if expected else 'fail'}); failed / sent: "
                f"{run.facts.failed_by_kind}; front LB's errors: {run.facts.lb_errors}"
            )
        return ok, findings
