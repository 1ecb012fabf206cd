"""`make bench-controller-loop`: the controller's deployment-state update at
1,000 to 8,000 replicas, pull against push, on the patched Ray in .venv.
Push runs twice: "push", each relay sending when its hold ends (the default:
no send grid), and "push-grid", relays on a send grid of GRID_S s
(RAY_SERVE_PUSH_HEALTH_RELAY_SEND_GRID_S), where a slot's batches arrive
together.

What runs is the controller's own code: a real `DeploymentState` in its steady
state (HEALTHY, its target met, every replica RUNNING with a rank) holding real
`DeploymentReplica`s and `ActorReplicaWrapper`s, swept by
`check_and_update_replicas` once per control loop on a fake clock, and for push
the registry fed through `ServeController.record_replica_health_reports` with
batches encoded as the relays encode them, one per node of REPLICAS_PER_NODE
replicas per health-check period. Ray's calls are faked the way Ray's own unit
tests fake them: a replica's `check_health.remote()` returns a stand-in ref,
`check_obj_ref_ready_nowait` says it is ready by the next visit, and `ray.get`
of it returns.

The fake leaves out what Ray does around each call: sending a probe and
reading its reply, and receiving a batch. Those are measured in every repeat and
at every size, at the pace that size's modes call (probes per control loop,
batches per second, one in flight per relay), in a real local Ray, in an async
actor standing in for the controller, as its whole process's CPU per call
(every thread: the event loop, Ray's task-execution thread, the core
worker's), and added: pull pays one per probe, push one per batch. Also left
out: the GCS, and the rest of the controller's loop (autoscaling, long-poll
broadcasts, checkpoints), which all modes pay alike.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

from harness.bench.health import median_range
from harness.core.progress import Progress

SIZES = (1000, 4000, 8000)
REPLICAS_PER_NODE = 32
PERIOD_S = 10.0  # Serve's default health_check_period_s
# Mode "none": health checks an hour apart, so none falls in the window; the
# sweep keeps its cadence (set by the routing-stats period as well) and the
# loop its other per-replica work. What is left is the loop without health.
NO_HEALTH_PERIOD_S = 3600.0
MODES = ("none", "pull", "push", "push-grid")
PUSH_MODES = ("push", "push-grid")
# The send grid's step in "push-grid" (RAY_SERVE_PUSH_HEALTH_RELAY_SEND_GRID_S).
GRID_S = 1.0
LOOP_S = 0.1  # Serve's CONTROL_LOOP_INTERVAL_S
# Three periods to settle (every replica probed, or its first report in), then
# five measured: pull's probe cycle (a visit every half period, a probe once a
# jittered period passed) averages 1.25 periods.
WARMUP_PERIODS, MEASURED_PERIODS = 3, 5
REPEATS = 3
# Ray's per-call costs: measured over this long at each size's pace, with the
# probes spread over this many actors and the batches sent by this many relays.
CALL_WINDOW_S = 4.0
MIN_BATCHES = 60
# ... in this many rounds of a probe window and the batch windows taking turns,
# each round with its own idle baseline, and the median of each cost over the
# rounds kept: one window that a
# background process or a collection landed in moved a repeat's ratio by more
# than the margin to the target.
CALL_ROUNDS = 3
PROBED_ACTORS = 8
RELAYS = 4
# Batches that arrive together come from at most this many relays.
MAX_RELAYS = 8
TARGET = 0.2


class _FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


class _ReadyRef:
    """A probe's stand-in ref. Answered (healthy) by the next visit:
    `check_obj_ref_ready_nowait` is faked to say every ref is ready."""

    __slots__ = ()


class _FakeActor:
    """The replica's actor handle, as far as the sweep calls it."""

    def __init__(self, calls: list[int]) -> None:
        self._calls = calls
        self.check_health = SimpleNamespace(remote=self._probe)

    def _probe(self) -> _ReadyRef:
        self._calls[0] += 1
        return _ReadyRef()


@dataclass
class LoopCost:
    """One mode at one size: CPU per second of the faked parts, and the calls
    the real-Ray costs are added for."""

    repeat: int
    replicas: int
    mode: str
    sweep_cpu_s_per_s: float
    receive_cpu_s_per_s: float
    probes_per_s: float
    batches_per_s: float


@contextlib.contextmanager
def _faked_ray(clock: _FakeClock) -> Iterator[None]:
    from ray.serve._private import deployment_state

    with (
        mock.patch("time.time", new=clock.time),
        mock.patch.object(deployment_state, "check_obj_ref_ready_nowait", lambda ref: True),
        mock.patch.object(deployment_state.ray, "get", lambda ref, **kwargs: None),
    ):
        yield


def _state(replicas: int, registry: Any, probes: list[int], period_s: float = PERIOD_S) -> Any:
    """A deployment in its steady state: HEALTHY, not in transition, its target
    met, every replica RUNNING with a rank (so the loop's O(N) rank-membership
    check runs, as on a cluster)."""
    from ray.serve._private.common import (
        DeploymentID,
        DeploymentStatus,
        DeploymentStatusTrigger,
        ReplicaID,
        ReplicaState,
    )
    from ray.serve._private.config import DeploymentConfig, ReplicaConfig
    from ray.serve._private.deployment_info import DeploymentInfo
    from ray.serve._private.deployment_state import (
        DeploymentReplica,
        DeploymentState,
        DeploymentTargetState,
    )
    from ray.serve._private.version import DeploymentVersion

    deployment_id = DeploymentID(name="d", app_name="a")
    state = DeploymentState(
        deployment_id,
        mock.Mock(),
        mock.Mock(),
        mock.Mock(),
        mock.Mock(),
        health_push_registry=registry,
    )
    config = DeploymentConfig(health_check_period_s=period_s)
    info = DeploymentInfo(
        deployment_config=config,
        replica_config=ReplicaConfig.create(lambda: None),
        start_time_ms=0,
        deployer_job_id="",
    )
    state._target_state = DeploymentTargetState.create(info, replicas)
    state._curr_status_info = state._curr_status_info._updated_copy(
        status=DeploymentStatus.HEALTHY,
        status_trigger=DeploymentStatusTrigger.CONFIG_UPDATE_COMPLETED,
    )
    state._in_transition = False
    version = DeploymentVersion("1", config, {})
    for index in range(replicas):
        replica = DeploymentReplica(ReplicaID(f"r{index:06d}", deployment_id), version)
        replica._actor._actor_handle = _FakeActor(probes)
        replica.update_actor_details(state=ReplicaState.RUNNING)
        state._replicas.add(ReplicaState.RUNNING, replica)
        state._rank_manager.assign_rank(
            replica.replica_id.unique_id, f"node-{index // REPLICAS_PER_NODE}"
        )
    return state


def mode_grid_s(mode: str) -> float:
    """The relays' send grid in a push mode: GRID_S in "push-grid", else none."""
    return GRID_S if mode == "push-grid" else 0.0


def send_step_s(grid_s: float) -> float | None:
    """The step of a send grid of `grid_s` for a hold of one period, as the
    installed relay cuts it: a relay sends on every k-th step, from its slot,
    so a slot's batches arrive together. None where relays send when their
    hold ends (no grid, or a hold under two steps)."""
    from ray.serve._private import constants
    from ray.serve._private.replica_health_relay import _send_grid_steps

    hold_s = constants.PUSH_HEALTH_RELAY_HOLD_PERIOD_FRACTION * PERIOD_S
    steps = _send_grid_steps(hold_s, grid_s)
    return None if steps == 1 else hold_s / steps


def batches_arriving_together(batches_per_s: float, grid_s: float) -> int:
    """How many batches reach the controller at once: one at a time without a
    send grid, else a step's worth (the mean; the relays' slots spread the
    nodes about evenly). Nodes' clocks are taken to agree, as they do here."""
    step_s = send_step_s(grid_s)
    return 1 if step_s is None else max(1, round(batches_per_s * step_s))


def _send_slots(nodes: int, steps: int) -> list[int]:
    """Each node's slot on the send grid, as the installed relay picks it from
    its sender id (the bench's node names)."""
    from ray.serve._private.replica_health_relay import ReplicaHealthRelay

    return [
        ReplicaHealthRelay(lambda: None, sender_id=f"node-{n}")._send_slot(steps)
        for n in range(nodes)
    ]


def _relay_batches(
    replicas: int, clock: _FakeClock, grid_s: float
) -> Iterator[list[tuple[float, bytes]]]:
    """Per control loop, the batches that arrive in it: each node's once per
    period, nodes spread evenly over the period, or on the send grid each in
    its relay's slot; every report fresh."""
    from ray.serve._private.common import ReplicaHealthBatch, ReplicaHealthReport

    nodes = [
        [f"r{index:06d}" for index in range(start, min(start + REPLICAS_PER_NODE, replicas))]
        for start in range(0, replicas, REPLICAS_PER_NODE)
    ]
    loops_per_period = round(PERIOD_S / LOOP_S)
    step_s = send_step_s(grid_s)
    if step_s is None:
        send_loop = [index % loops_per_period for index in range(len(nodes))]
    else:
        loops_per_step = round(step_s / LOOP_S)
        slots = _send_slots(len(nodes), round(PERIOD_S / step_s))
        send_loop = [slot * loops_per_step for slot in slots]
    loop = 0
    while True:
        now = clock.now
        yield [
            ReplicaHealthBatch(
                [ReplicaHealthReport(rid, now, True, 0) for rid in ids], [], f"node-{n}", now
            ).to_bytes()
            for n, ids in enumerate(nodes)
            if send_loop[n] == loop
        ]
        loop = (loop + 1) % loops_per_period


def measure_mode(replicas: int, mode: str, repeat: int = 0) -> LoopCost:
    """Run the sweep for WARMUP_PERIODS + MEASURED_PERIODS on the fake clock;
    CPU counted over the measured periods only."""
    from ray.serve._private.controller import ServeController
    from ray.serve._private.deployment_state import ReplicaHealthPushRegistry

    clock = _FakeClock()
    probes = [0]
    with _faked_ray(clock):
        registry = ReplicaHealthPushRegistry() if mode in PUSH_MODES else None
        state = _state(
            replicas, registry, probes, NO_HEALTH_PERIOD_S if mode == "none" else PERIOD_S
        )
        controller = SimpleNamespace(
            _health_push_registry=registry,
            _health_report_batches_counter=mock.Mock(),
            _health_reports_counter=mock.Mock(),
            _malformed_health_batch_warned_at=float("-inf"),
        )
        batches = (
            _relay_batches(replicas, clock, mode_grid_s(mode)) if registry is not None else None
        )
        loops_per_period = round(PERIOD_S / LOOP_S)
        measured_from = WARMUP_PERIODS * loops_per_period
        sweep_ns = receive_ns = 0
        probes_at_start = sent = 0
        for loop in range((WARMUP_PERIODS + MEASURED_PERIODS) * loops_per_period):
            if loop == measured_from:
                probes_at_start = probes[0]
            counted = loop >= measured_from
            if batches is not None:
                arrived = next(batches)
                start = time.thread_time_ns()
                for batch in arrived:
                    ServeController.record_replica_health_reports(controller, batch)
                if counted:
                    receive_ns += time.thread_time_ns() - start
                    sent += len(arrived)
            start = time.thread_time_ns()
            state.check_and_update_replicas()
            if registry is not None:
                # The manager clears it once every deployment was swept.
                registry.clear_urgent()
            if counted:
                sweep_ns += time.thread_time_ns() - start
            clock.now += LOOP_S
    seconds = MEASURED_PERIODS * PERIOD_S
    return LoopCost(
        repeat=repeat,
        replicas=replicas,
        mode=mode,
        sweep_cpu_s_per_s=sweep_ns / 1e9 / seconds,
        receive_cpu_s_per_s=receive_ns / 1e9 / seconds,
        probes_per_s=(probes[0] - probes_at_start) / seconds,
        batches_per_s=sent / seconds,
    )


@dataclass
class RayCallCosts:
    """CPU per call of a controller stand-in in a real local Ray, in seconds."""

    probe_s: float  # a probe sent, and its reply read once ready
    batch_s: float  # a relay's batch received, batches arriving one at a time
    # ... arriving in a send-grid slot's group ("push-grid"); None in results
    # from before that mode.
    batch_grid_s: float | None = None
    # Each round's figures the medians above come from, with its idle
    # baseline and the batches each window sent, so a run can be judged again.
    rounds: list[dict] | None = None


def _stand_ins() -> tuple[Any, Any, Any]:
    """The actors of the call measurements: a replica answering probes, the
    controller's stand-in (its handler does nothing; it measures its own
    process's CPU), and a relay sending batches on a shared clock."""
    import ray

    @ray.remote(num_cpus=0)
    class Replica:
        async def check_health(self) -> None:
            return None

    @ray.remote(num_cpus=0)
    class Controller:
        def __init__(self) -> None:
            self.mark: tuple[float, float] | None = None

        async def idle_cpu_s_per_s(self, seconds: float) -> float:
            import asyncio

            cpu, wall = time.process_time(), time.monotonic()
            await asyncio.sleep(seconds)
            return (time.process_time() - cpu) / (time.monotonic() - wall)

        async def probe(self, replicas: list, per_tick: int, seconds: float, idle: float) -> float:
            import asyncio

            from ray.serve._private.utils import check_obj_ref_ready_nowait

            cpu, wall = time.process_time(), time.monotonic()
            pending: list = []
            sent = 0
            while time.monotonic() - wall < seconds:
                still = []
                for ref in pending:
                    if check_obj_ref_ready_nowait(ref):
                        ray.get(ref)
                    else:
                        still.append(ref)
                pending = still + [
                    replicas[(sent + i) % len(replicas)].check_health.remote()
                    for i in range(per_tick)
                ]
                sent += per_tick
                await asyncio.sleep(LOOP_S)
            while pending:
                await asyncio.sleep(LOOP_S)
                for ref in [r for r in pending if check_obj_ref_ready_nowait(r)]:
                    ray.get(ref)
                    pending.remove(ref)
            spent = time.process_time() - cpu - idle * (time.monotonic() - wall)
            return spent / max(sent, 1)

        async def start(self) -> None:
            self.mark = (time.process_time(), time.monotonic())

        async def record_replica_health_reports(self, batch: bytes) -> None:
            return None

        async def since_start(self, count: int, idle: float) -> float:
            assert self.mark is not None
            cpu, wall = self.mark
            spent = time.process_time() - cpu - idle * (time.monotonic() - wall)
            return spent / max(count, 1)

    @ray.remote(num_cpus=0)
    class Relay:
        async def send(
            self,
            controller: Any,
            batch: bytes,
            calls: int,
            slot_s: float,
            slot: int,
            slots: int,
            end_at: float,
            spread_s: float = 0.0,
            seed: int = 0,
        ) -> int:
            import asyncio
            import random

            # On the shared clock, as relays on the send grid are: `calls`
            # batches at the start of every `slots`-th slot from `slot`, each
            # delayed by up to `spread_s` (clocks, loops and networks that
            # spread a slot), or all at once.
            rng = random.Random(seed)

            async def send_one(delay_s: float) -> None:
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                await controller.record_replica_health_reports.remote(batch)

            sent = 0
            # Spread sends are not waited for before the next slot: a spread
            # near the slot's length would otherwise skip slots.
            spread: list = []
            while True:
                index = math.floor(time.time() / slot_s) + 1
                index += (slot - index) % slots
                if index * slot_s > end_at:
                    await asyncio.gather(*spread)
                    return sent
                await asyncio.sleep(index * slot_s - time.time())
                sends = [send_one(rng.uniform(0, spread_s)) for _ in range(calls)]
                if spread_s > 0:
                    spread.extend(asyncio.ensure_future(send) for send in sends)
                else:
                    await asyncio.gather(*sends)
                sent += calls

    return Replica, Controller, Relay


def _node_batch() -> bytes:
    """One node's batch as a relay encodes it: REPLICAS_PER_NODE healthy
    reports."""
    from ray.serve._private.common import ReplicaHealthBatch, ReplicaHealthReport

    reports = [ReplicaHealthReport(f"r{i:06d}", 1.0, True, 0) for i in range(REPLICAS_PER_NODE)]
    return ReplicaHealthBatch(reports, [], "node-0", 1.0).to_bytes()


def _shares(batches: int, relays: int) -> list[int]:
    """`batches` split among `relays` as evenly as they go."""
    return [batches // relays + (i < batches % relays) for i in range(relays)]


def _send_from_relays(
    relays: list,
    shares: list[int],
    controller: Any,
    batch: bytes,
    slot_s: float,
    window_s: float,
    in_turn: bool,
    spread_s: float = 0.0,
    seed: int = 0,
) -> int:
    """Each relay sends its share of batches at the start of its slots for
    `window_s`: in turn (relay i on every len(relays)-th slot from the i-th),
    or every relay on every slot, each batch delayed by up to `spread_s`.
    Returns how many batches were sent."""
    import ray

    end_at = time.time() + window_s
    return sum(
        ray.get(
            [
                relay.send.remote(
                    controller,
                    batch,
                    share,
                    slot_s,
                    i if in_turn else 0,
                    len(relays) if in_turn else 1,
                    end_at,
                    spread_s,
                    seed + i,
                )
                for i, (relay, share) in enumerate(zip(relays, shares, strict=True))
            ]
        )
    )


def measure_ray_calls(
    probes_per_tick: int,
    batches_per_s: float,
    seconds: float = CALL_WINDOW_S,
    batches_together: int = 1,
) -> RayCallCosts:
    """What the fake leaves out, measured on this machine at the modes' own
    pace, in an async actor standing in for the controller: its whole
    process's CPU (every thread: the event loop, Ray's task-execution thread,
    the core worker's) per call over `seconds`, less the same process's CPU
    over as long a time idle. Calls in flight together share some of Ray's
    per-call work, so the pace matters.

    Probes, as the sweep sends them: each control loop (LOOP_S) the stand-in
    reads the replies of the probes it sent in the last one
    (`check_obj_ref_ready_nowait`, then `ray.get`) and sends `probes_per_tick`
    more (`check_health.remote()`), over PROBED_ACTORS actors. Batches, as
    relays send them, together `batches_per_s`, for at least MIN_BATCHES:
    RELAYS actors in turn so batches arrive one at a time (`batch_s`), and
    `batches_together` at once from up to MAX_RELAYS actors at every step of a
    shared clock, as relays on a send grid do (`batch_grid_s`). The stand-in's
    handler does nothing. CALL_ROUNDS rounds of the three windows, taking
    turns; the median of each."""
    import ray

    Replica, Controller, Relay = _stand_ins()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        controller = Controller.remote()
        replicas = [Replica.remote() for _ in range(PROBED_ACTORS)]
        batch = _node_batch()

        def sender(together: int) -> Callable[[float], int]:
            """Relays in turn, one batch a slot, or all at every slot, sharing
            its `together` batches."""
            alone = together <= 1
            relay_count = RELAYS if alone else min(together, MAX_RELAYS)
            relays = [Relay.remote() for _ in range(relay_count)]
            slot_s = max(1, together) / batches_per_s
            shares = [1] * relay_count if alone else _shares(together, relay_count)

            def send_all(window_s: float) -> int:
                return _send_from_relays(
                    relays, shares, controller, batch, slot_s, window_s, in_turn=alone
                )

            return send_all

        senders = {"alone": sender(1), "grid": sender(batches_together)}
        # Warm every path up.
        ray.get(controller.probe.remote(replicas, probes_per_tick, 1.0, 0.0))
        for send_all in senders.values():
            send_all(1.0)
        rounds: list[dict] = []
        for _ in range(CALL_ROUNDS):
            idle = ray.get(controller.idle_cpu_s_per_s.remote(1.0))
            round_costs: dict = {
                "idle_cpu_s_per_s": idle,
                "probe_s": ray.get(
                    controller.probe.remote(replicas, probes_per_tick, seconds, idle)
                ),
            }
            for name, send_all in senders.items():
                ray.get(controller.start.remote())
                # Long enough for MIN_BATCHES over the rounds, so few batches a
                # second are not lost in the idle CPU taken off.
                sent = send_all(max(seconds, MIN_BATCHES / CALL_ROUNDS / batches_per_s))
                round_costs[f"{name}_batches"] = sent
                round_costs[f"{name}_batch_s"] = ray.get(controller.since_start.remote(sent, idle))
            rounds.append(round_costs)
    finally:
        ray.shutdown()
    return RayCallCosts(
        probe_s=statistics.median(r["probe_s"] for r in rounds),
        batch_s=statistics.median(r["alone_batch_s"] for r in rounds),
        batch_grid_s=statistics.median(r["grid_batch_s"] for r in rounds),
        rounds=rounds,
    )


# `--spread-ms`: a slot of 8,000 replicas' batches (25 every GRID_S), each
# delayed by a uniform random 0-S ms, for these S by default.
SPREADS_MS = (0.0, 1.0, 5.0, 20.0, 100.0, 1000.0)
SPREAD_BATCHES = 25
SPREAD_WINDOW_S = 6.0


def measure_slot_spread(
    spreads_ms: tuple[float, ...] = SPREADS_MS,
    rounds: int = CALL_ROUNDS,
    window_s: float = SPREAD_WINDOW_S,
) -> dict:
    """How much of Ray's receive work a send-grid slot's batches still share
    when clocks, event loops and networks spread them: the controller
    stand-in's process CPU per batch, SPREAD_BATCHES batches once a second
    from MAX_RELAYS relays, each delayed by up to S ms, for each S in turn, in
    `rounds` rounds. A spread of a whole second is no grouping at all. Kept in
    RESULTS_DIR/bench-controller-loop-spread.json."""
    import json

    import ray

    from harness.core.paths import RESULTS_DIR

    _, Controller, Relay = _stand_ins()
    per_batch_s: dict[float, list[float]] = {spread: [] for spread in spreads_ms}
    windows: list[dict] = []
    plan = rounds * len(spreads_ms) * window_s + 10
    with Progress("bench-controller-loop --spread-ms", plan) as progress:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        try:
            controller = Controller.remote()
            relays = [Relay.remote() for _ in range(MAX_RELAYS)]
            batch = _node_batch()
            shares = _shares(SPREAD_BATCHES, len(relays))

            def send_all(spread_ms: float, seconds: float, seed: int) -> int:
                return _send_from_relays(
                    relays,
                    shares,
                    controller,
                    batch,
                    GRID_S,
                    seconds,
                    in_turn=False,
                    spread_s=spread_ms / 1000,
                    seed=seed,
                )

            send_all(0.0, 2.0, 0)  # warm up
            for round_index in range(rounds):
                idle = ray.get(controller.idle_cpu_s_per_s.remote(1.0))
                for spread in spreads_ms:
                    progress.begin(
                        f"round {round_index + 1}/{rounds}: spread {spread:g} ms", window_s
                    )
                    ray.get(controller.start.remote())
                    sent = send_all(spread, window_s, 100 * round_index)
                    per_batch_s[spread].append(ray.get(controller.since_start.remote(sent, idle)))
                    windows.append(
                        {
                            "round": round_index,
                            "spread_ms": spread,
                            "idle_cpu_s_per_s": idle,
                            "batches": sent,
                        }
                    )
        finally:
            ray.shutdown()
    result = {
        "batches_at_once": SPREAD_BATCHES,
        "slot_s": GRID_S,
        "window_s": window_s,
        "relays": MAX_RELAYS,
        "windows": windows,
        "series": series_digests(),
        "per_batch_s": [
            {"spread_ms": spread, "rounds": values} for spread, values in per_batch_s.items()
        ],
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench-controller-loop-spread.json").write_text(json.dumps(result, indent=1))
    return result


def print_slot_spread(result: dict) -> None:
    print()
    print(
        f"A send-grid slot's {result['batches_at_once']} batches once a second, each delayed "
        f"by a uniform random 0-S ms: the controller stand-in's process CPU per batch, "
        f"median (min-max) over rounds. A spread of a whole slot ({result['slot_s']:g} s) "
        f"is no grouping at all."
    )
    print("| spread (ms) | per batch, us | against no spread |")
    print("|---:|---:|---:|")
    rows = result["per_batch_s"]
    if rows[0]["spread_ms"] != 0:
        raise ValueError("the first spread must be 0: the others are compared with it")
    base = statistics.median(rows[0]["rounds"])
    for row in rows:
        values = [value * 1e6 for value in row["rounds"]]
        print(
            f"| {row['spread_ms']:g} | {median_range(values, digits=0)} "
            f"| {statistics.median(row['rounds']) / base:.2f} |"
        )


def total_cpu_s_per_s(cost: LoopCost, calls: RayCallCosts) -> float:
    """The faked parts plus Ray's per-call costs: a probe's submit and reply
    for pull, a batch's receipt for push (in a slot's group for push-grid)."""
    return (
        cost.sweep_cpu_s_per_s
        + cost.receive_cpu_s_per_s
        + cost.probes_per_s * calls.probe_s
        + cost.batches_per_s * batch_cost_s(cost.mode, calls)
    )


def batch_cost_s(mode: str, calls: RayCallCosts) -> float:
    """Ray's cost of receiving a batch in a push mode: in a slot's group for
    push-grid, else arriving alone."""
    if mode != "push-grid":
        return calls.batch_s
    if calls.batch_grid_s is None:
        raise ValueError("a push-grid run needs the cost of a batch in a slot's group")
    return calls.batch_grid_s


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of CPU-s/s against replicas, per 1,000 replicas."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    if len(set(xs)) < 2:
        raise ValueError("a slope needs at least two sizes")
    return 1000 * statistics.linear_regression(xs, ys).slope


def series_digests() -> dict[str, str]:
    """The sha256 of every patch in the checkout's series when the bench ran:
    what ties a result to the code it measured (the bench runs .venv's Ray,
    which `make apply-patches` brings in line with the series)."""
    import hashlib

    from harness.core.pin import read_series

    return {patch.name: hashlib.sha256(patch.read_bytes()).hexdigest() for patch in read_series()}


def bench_controller_loop(sizes: tuple[int, ...] = SIZES, repeats: int = REPEATS) -> dict:
    """Per repeat and size, every mode one after the other, then Ray's
    per-call costs at that size's pace. Kept in
    RESULTS_DIR/bench-controller-loop.json."""
    import json

    from harness.core.paths import RESULTS_DIR

    # The plan, in seconds: the sweep's cost grows with replicas (about 0.6 s
    # per mode per 1,000 replicas here); each call measurement starts a local
    # Ray and runs CALL_ROUNDS rounds of an idle second and three windows.
    call_s = 10 + CALL_ROUNDS * (1 + 3 * CALL_WINDOW_S)
    plan = repeats * sum(len(MODES) * size * 0.6 / 1000 + call_s for size in sizes)
    with Progress("bench-controller-loop", plan) as progress:
        calls, runs = [], []
        for repeat in range(repeats):
            for size in sizes:
                by_mode = {}
                for mode in MODES:
                    progress.begin(
                        f"repeat {repeat + 1}/{repeats}: {size} replicas, {mode}",
                        size * 0.6 / 1000,
                    )
                    by_mode[mode] = measure_mode(size, mode, repeat)
                    runs.append(by_mode[mode].__dict__)
                progress.begin(
                    f"repeat {repeat + 1}/{repeats}: {size} replicas, Ray's per-call costs",
                    call_s,
                )
                together = batches_arriving_together(by_mode["push-grid"].batches_per_s, GRID_S)
                cost = measure_ray_calls(
                    max(1, round(by_mode["pull"].probes_per_s * LOOP_S)),
                    by_mode["push"].batches_per_s,
                    batches_together=together,
                )
                calls.append(
                    {
                        "repeat": repeat,
                        "replicas": size,
                        "batches_together": together,
                        **cost.__dict__,
                    }
                )
    result = {
        "period_s": PERIOD_S,
        "replicas_per_node": REPLICAS_PER_NODE,
        "grid_s": GRID_S,
        "series": series_digests(),
        "calls": calls,
        "runs": runs,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench-controller-loop.json").write_text(json.dumps(result, indent=1))
    return result


def print_controller_loop(result: dict) -> None:
    if "grid_s" not in result:
        raise ValueError(
            "this result was saved before 'push' and 'push-grid' were told apart; "
            "run make bench-controller-loop again"
        )
    grid_s = result["grid_s"]
    calls = {
        (c["repeat"], c["replicas"]): RayCallCosts(
            c["probe_s"], c["batch_s"], c.get("batch_grid_s")
        )
        for c in result["calls"]
    }
    runs = [LoopCost(**run) for run in result["runs"]]
    sizes = sorted({run.replicas for run in runs})
    modes = [mode for mode in MODES if any(run.mode == mode for run in runs)]
    # Batches that arrived together in a slot's group in the call measurement.
    together = {c["replicas"]: c.get("batches_together", 1) for c in result["calls"]}

    def total(run: LoopCost) -> float:
        return total_cpu_s_per_s(run, calls[(run.repeat, run.replicas)])

    print()
    print(
        f"The deployment-state update, CPU-s per s, health period {result['period_s']:g} s, "
        f"{result['replicas_per_node']} replicas per node; median (min-max) over repeats. "
        f"Ray's per-call costs (a controller stand-in's process CPU, at each size's pace, "
        f"in each repeat) added. 'none': health checks an hour apart; 'push': each relay "
        f"sends when its hold ends (the default); 'push-grid': relays on a {grid_s:g} s send "
        f"grid. 'health only' takes 'none' off both modes of the same repeat. The target is "
        f"judged on the worst repeat."
    )
    print(
        "| replicas | mode | sweep (faked calls) | batches received | probes / s | "
        "batches / s (at once) | Ray's cost per call, us | with Ray's calls | push / pull | "
        "health only: push / pull | target |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    totals: dict[str, list[tuple[int, float]]] = {mode: [] for mode in modes}
    for size in sizes:
        by_repeat: dict[int, dict[str, float]] = {}
        for run in runs:
            if run.replicas == size:
                by_repeat.setdefault(run.repeat, {})[run.mode] = total(run)
        for mode in modes:
            mode_runs = [run for run in runs if run.replicas == size and run.mode == mode]
            mode_totals = [total(run) for run in mode_runs]
            totals[mode].extend((size, value) for value in mode_totals)
            push = mode in PUSH_MODES
            ratios = [r[mode] / r["pull"] for r in by_repeat.values()] if push else []
            health_ratios = (
                [(r[mode] - r["none"]) / (r["pull"] - r["none"]) for r in by_repeat.values()]
                if push
                else []
            )
            per_call = [
                (batch_cost_s(mode, c) if push else c.probe_s) * 1e6
                for (_, replicas), c in calls.items()
                if replicas == size
            ]
            at_once = f" ({together[size] if mode == 'push-grid' else 1})" if push else ""
            verdict = (
                f"at most {TARGET:g}: {'met' if max(ratios) <= TARGET else 'not met'}"
                if push
                else ""
            )
            print(
                f"| {size:,} | {mode} "
                f"| {median_range([r.sweep_cpu_s_per_s for r in mode_runs], digits=4)} "
                f"| {median_range([r.receive_cpu_s_per_s for r in mode_runs], digits=4)} "
                f"| {statistics.median(r.probes_per_s for r in mode_runs):.1f} "
                f"| {statistics.median(r.batches_per_s for r in mode_runs):.1f}{at_once} "
                f"| {median_range(per_call, digits=0) if mode != 'none' else '-'} "
                f"| {median_range(mode_totals, digits=4)} "
                f"| {median_range(ratios, digits=3) if push else '-'} "
                f"| {median_range(health_ratios, digits=3) if push else '-'} "
                f"| {verdict} |"
            )
    if len(sizes) > 1:
        print()
        print(
            "Slope per 1,000 replicas (least squares, CPU-s per s): "
            + ", ".join(f"{mode} {slope_per_1000(points):.4f}" for mode, points in totals.items())
        )
