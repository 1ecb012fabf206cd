"""`make bench-controller-loop`: the controller's deployment-state update at
1,000 to 8,000 replicas, pull against push, on the patched Ray in .venv.

What runs is the controller's own code: a real `DeploymentState` holding real
`DeploymentReplica`s and `ActorReplicaWrapper`s, swept by
`check_and_update_replicas` once per control loop on a fake clock, and for push
the registry fed through `ServeController.record_replica_health_reports` with
batches encoded as the relays encode them, one per node of REPLICAS_PER_NODE
replicas per health-check period. Ray's calls are faked the way Ray's own unit
tests fake them: a replica's `check_health.remote()` returns a stand-in ref,
ready by the next visit; `check_obj_ref_ready_nowait` reads it and `ray.get`
of it returns.

The fake leaves out what Ray does around each call: submitting a probe, reading
its reply, and decoding a batch's argument on arrival. Those are measured once
per run in a real local Ray (thread CPU per call, medians of CALL_SAMPLES) and
added: pull pays a submit and a reply per probe, push a decode per batch. Also
left out: the core worker's C++ threads, the GCS, the event loop's own
scheduling, and everything else the controller does in a loop (autoscaling,
long-poll broadcasts, checkpoints), which both modes pay alike.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

from harness.core.progress import Progress

SIZES = (1000, 4000, 8000)
REPLICAS_PER_NODE = 32
PERIOD_S = 10.0  # Serve's default health_check_period_s
LOOP_S = 0.1  # Serve's CONTROL_LOOP_INTERVAL_S
# Two periods to settle (every replica probed once, or its first report in),
# then the periods measured.
WARMUP_PERIODS, MEASURED_PERIODS = 2, 1
REPEATS = 3
CALL_SAMPLES = 2000
TARGET = 0.2


class _FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


class _ReadyRef:
    """A probe's stand-in ref: answered (healthy) by the next visit."""

    __slots__ = ()
    ready = True
    error = None


class _FakeActor:
    """The replica's actor handle, as far as the sweep calls it."""

    def __init__(self, calls: list[int]) -> None:
        self._calls = calls
        self.check_health = SimpleNamespace(remote=self._probe)
        self.record_routing_stats = SimpleNamespace(remote=lambda: _ReadyRef())

    def _probe(self) -> _ReadyRef:
        self._calls[0] += 1
        return _ReadyRef()


@dataclass
class LoopCost:
    """One mode at one size: CPU per second of the faked parts, and the calls
    the real-Ray costs are added for."""

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
        # The deployment has no target state here; a plain one is not a gang.
        mock.patch.object(deployment_state.DeploymentState, "_is_gang_deployment", new=False),
        mock.patch.object(deployment_state, "check_obj_ref_ready_nowait", lambda ref: True),
        mock.patch.object(deployment_state.ray, "get", lambda ref, **kwargs: None),
    ):
        yield


def _state(replicas: int, registry: Any, probes: list[int]) -> Any:
    from ray.serve._private.common import DeploymentID, ReplicaID, ReplicaState
    from ray.serve._private.config import DeploymentConfig
    from ray.serve._private.deployment_state import DeploymentReplica, DeploymentState
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
    version = DeploymentVersion("1", DeploymentConfig(health_check_period_s=PERIOD_S), {})
    for index in range(replicas):
        replica = DeploymentReplica(ReplicaID(f"r{index:06d}", deployment_id), version)
        replica._actor._actor_handle = _FakeActor(probes)
        replica.update_actor_details(state=ReplicaState.RUNNING)
        state._replicas.add(ReplicaState.RUNNING, replica)
    return state


def _relay_batches(replicas: int, clock: _FakeClock) -> Iterator[list[tuple[float, bytes]]]:
    """Per control loop, the batches that arrive in it: each node's once per
    period, nodes spread evenly over the period, every report fresh."""
    from ray.serve._private.common import ReplicaHealthBatch, ReplicaHealthReport

    nodes = [
        [f"r{index:06d}" for index in range(start, min(start + REPLICAS_PER_NODE, replicas))]
        for start in range(0, replicas, REPLICAS_PER_NODE)
    ]
    loops_per_period = round(PERIOD_S / LOOP_S)
    loop = 0
    while True:
        due = [node for index, node in enumerate(nodes) if index % loops_per_period == loop]
        now = clock.now
        yield [
            ReplicaHealthBatch(
                [ReplicaHealthReport(rid, now, True, 0) for rid in ids], [], f"node-{n}", now
            ).to_bytes()
            for n, ids in enumerate(due)
        ]
        loop = (loop + 1) % loops_per_period


def measure_mode(replicas: int, mode: str) -> LoopCost:
    """Run the sweep for WARMUP_PERIODS + MEASURED_PERIODS on the fake clock;
    CPU counted over the measured periods only."""
    from ray.serve._private.controller import ServeController
    from ray.serve._private.deployment_state import ReplicaHealthPushRegistry

    clock = _FakeClock()
    probes = [0]
    with _faked_ray(clock):
        registry = ReplicaHealthPushRegistry() if mode == "push" else None
        state = _state(replicas, registry, probes)
        controller = SimpleNamespace(
            _health_push_registry=registry,
            _health_report_batches_counter=mock.Mock(),
            _health_reports_counter=mock.Mock(),
            _malformed_health_batch_warned_at=float("-inf"),
        )
        batches = _relay_batches(replicas, clock) if registry is not None else None
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
        replicas=replicas,
        mode=mode,
        sweep_cpu_s_per_s=sweep_ns / 1e9 / seconds,
        receive_cpu_s_per_s=receive_ns / 1e9 / seconds,
        probes_per_s=(probes[0] - probes_at_start) / seconds,
        batches_per_s=sent / seconds,
    )


@dataclass
class RayCallCosts:
    """Thread CPU per call in a real local Ray, in seconds (medians)."""

    probe_submit_s: float
    probe_reply_s: float
    batch_decode_s: float


def measure_ray_calls(samples: int = CALL_SAMPLES) -> RayCallCosts:
    """What the fake leaves out, measured on this machine: a probe's submit
    (`check_health.remote()` from the driver, the core worker's same path as
    the controller's), reading its ready reply as the sweep does
    (`check_obj_ref_ready_nowait`, then `ray.get`), and Ray decoding a batch's
    bytes argument in the receiving actor (`Worker.deserialize_objects`)."""
    import ray
    from ray.serve._private.common import ReplicaHealthBatch, ReplicaHealthReport
    from ray.serve._private.utils import check_obj_ref_ready_nowait

    @ray.remote(num_cpus=0)
    class Receiver:
        def __init__(self) -> None:
            from ray._private import worker

            decode = worker.Worker.deserialize_objects
            self.decode_ns: list[int] = []
            spent = self.decode_ns

            def counted(self_: Any, *args: Any, **kwargs: Any) -> Any:
                start = time.thread_time_ns()
                try:
                    return decode(self_, *args, **kwargs)
                finally:
                    spent.append(time.thread_time_ns() - start)

            worker.Worker.deserialize_objects = counted

        def check_health(self) -> None:
            return None

        def record_replica_health_reports(self, batch: bytes) -> None:
            return None

        def decode_times(self) -> list[int]:
            return list(self.decode_ns)

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        receiver = Receiver.remote()  # type: ignore[attr-defined]
        ray.get(receiver.check_health.remote())
        submits, replies = [], []
        for _ in range(samples):
            start = time.thread_time_ns()
            ref = receiver.check_health.remote()
            submits.append(time.thread_time_ns() - start)
            ray.wait([ref])
            start = time.thread_time_ns()
            check_obj_ref_ready_nowait(ref)
            ray.get(ref)
            replies.append(time.thread_time_ns() - start)
        reports = [ReplicaHealthReport(f"r{i:06d}", 1.0, True, 0) for i in range(REPLICAS_PER_NODE)]
        batch = ReplicaHealthBatch(reports, [], "node-0", 1.0).to_bytes()
        before = len(ray.get(receiver.decode_times.remote()))
        ray.get([receiver.record_replica_health_reports.remote(batch) for _ in range(samples)])
        # Every call decodes its arguments once, decode_times too (the last).
        decodes = ray.get(receiver.decode_times.remote())[before:-1]
    finally:
        ray.shutdown()
    return RayCallCosts(
        probe_submit_s=statistics.median(submits) / 1e9,
        probe_reply_s=statistics.median(replies) / 1e9,
        batch_decode_s=statistics.median(decodes) / 1e9,
    )


def total_cpu_s_per_s(cost: LoopCost, calls: RayCallCosts) -> float:
    """The faked parts plus Ray's per-call costs: a probe's submit and reply
    for pull, a batch's decode for push."""
    per_probe = calls.probe_submit_s + calls.probe_reply_s
    return (
        cost.sweep_cpu_s_per_s
        + cost.receive_cpu_s_per_s
        + cost.probes_per_s * per_probe
        + cost.batches_per_s * calls.batch_decode_s
    )


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of CPU-s/s against replicas, per 1,000 replicas."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        raise ValueError("a slope needs at least two sizes")
    return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def bench_controller_loop(sizes: tuple[int, ...] = SIZES, repeats: int = REPEATS) -> dict:
    """Every size, pull and push interleaved, `repeats` times; Ray's per-call
    costs measured first. Kept in RESULTS_DIR/bench-controller-loop.json."""
    import json

    from harness.core.paths import RESULTS_DIR

    # A plan in "replica-periods": the sweep's cost grows with replicas.
    plan = sum(sizes) * repeats * 2 / 1000
    with Progress("bench-controller-loop", plan + 10) as progress:
        progress.begin("Ray's per-call costs, in a local Ray", 10)
        calls = measure_ray_calls()
        runs = []
        for repeat in range(repeats):
            for size in sizes:
                for mode in ("pull", "push"):
                    progress.begin(
                        f"{size} replicas, {mode}, repeat {repeat + 1}/{repeats}", size / 1000
                    )
                    runs.append(measure_mode(size, mode).__dict__)
    result = {
        "period_s": PERIOD_S,
        "replicas_per_node": REPLICAS_PER_NODE,
        "calls": calls.__dict__,
        "runs": runs,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench-controller-loop.json").write_text(json.dumps(result, indent=1))
    return result


def _spread(values: list[float], digits: int = 4) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


def print_controller_loop(result: dict) -> None:
    calls = RayCallCosts(**result["calls"])
    runs = [LoopCost(**run) for run in result["runs"]]
    sizes = sorted({run.replicas for run in runs})
    print()
    print(
        f"The deployment-state update, CPU-s per s, health period {result['period_s']:g} s, "
        f"{result['replicas_per_node']} replicas per node; median (min-max) over repeats. "
        f"Ray's per-call costs added (thread CPU, median): probe submit "
        f"{calls.probe_submit_s * 1e6:.0f} us, reply {calls.probe_reply_s * 1e6:.0f} us, "
        f"batch decode {calls.batch_decode_s * 1e6:.0f} us."
    )
    print(
        "| replicas | mode | sweep (faked calls) | batches received | probes / s | "
        "batches / s | with Ray's calls | push / pull | target |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    totals: dict[str, list[tuple[int, float]]] = {"pull": [], "push": []}
    for size in sizes:
        by_mode = {
            mode: [run for run in runs if run.replicas == size and run.mode == mode]
            for mode in ("pull", "push")
        }
        # Pull and push of the same repeat ran one after the other.
        ratios = [
            total_cpu_s_per_s(push, calls) / total_cpu_s_per_s(pull, calls)
            for pull, push in zip(by_mode["pull"], by_mode["push"], strict=True)
        ]
        for mode, mode_runs in by_mode.items():
            mode_totals = [total_cpu_s_per_s(run, calls) for run in mode_runs]
            totals[mode].extend((size, total) for total in mode_totals)
            ratio = _spread(ratios, 3) if mode == "push" else "-"
            verdict = ("met" if max(ratios) <= TARGET else "not met") if mode == "push" else ""
            print(
                f"| {size:,} | {mode} "
                f"| {_spread([r.sweep_cpu_s_per_s for r in mode_runs])} "
                f"| {_spread([r.receive_cpu_s_per_s for r in mode_runs])} "
                f"| {statistics.median(r.probes_per_s for r in mode_runs):.1f} "
                f"| {statistics.median(r.batches_per_s for r in mode_runs):.1f} "
                f"| {_spread(mode_totals)} | {ratio} "
                f"| {f'at most {TARGET:g}: {verdict}' if verdict else ''} |"
            )
    if len(sizes) > 1:
        print()
        print(
            "Slope per 1,000 replicas (least squares, CPU-s per s): "
            + ", ".join(f"{mode} {slope_per_1000(points):.4f}" for mode, points in totals.items())
        )
