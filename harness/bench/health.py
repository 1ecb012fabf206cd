"""`make bench-health`: what health checking costs the Serve controller, pull
probes against push-based health, side by side in one run and at several sizes.

One patched cluster (a head and two workers, RAY_SERVE_ENABLE_PUSH_HEALTH on
for the controller and the proxies) holds two copies of the echo app, N
zero-CPU replicas each: one whose replicas have the flag off in their runtime
env (the controller probes them, as stock 2.60.0 does), one with it on (they
report to their node's proxy, which batches for the controller). A mode only
changes health periods, so no replica restarts between modes:

  no health checks   both apps at a 3,600 s period: nothing is checked in the
                     window; the controller's cost without health
  pull               the pull app at the 2 s period
  push               the push app at the 2 s period

Each size is measured `repeats` times with the modes interleaved (their order
rotates every repeat). Per run: controller CPU (utime + stime of its process),
the thread CPU of the controller's health functions, counted in the
controller by cluster/agent/health_cpu (at these sizes the whole process's CPU
varies more between windows than health costs, and a sampling profiler on this
2-core machine missed a varying half of the samples), the probes it
completed (its `serve_health_check_latency_ms` count), the probes a fresh
report stood in for, the batches and reports it received (its own counters),
and its control-loop and deployment-state update means. Health's cost is a mode's CPU less the
no-health run's of the same repeat. A stock 2.60.0 cluster probes the middle
size once as a cross-check that the patched image's pull is stock's.

Then the controller's ingest at 8,000 replicas: simulated relays send it what
250 nodes x 32 replicas at Serve's default 10 s period would, into the real
controller and registry; its CPU is measured against a window without them.
The registry's memory at 8,000 entries is measured on the host with the
patched registry class.

Last, on a cluster of their own at the middle size (the faults replace
replicas): the time to detect a replica whose check fails, one whose actor is
killed, and one whose event loop is blocked, `repeats` samples for pull and
push, interleaved; every fault waits until the app is whole again. `--detect-
again` repeats only this part, into the saved run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import tracemalloc

from harness.cluster import appconfigs, images
from harness.cluster.boundary import Node
from harness.cluster.cluster import HARNESS_MOUNT, METRICS_PORT, Cluster, ClusterConfig
from harness.core.errors import HarnessError
from harness.core.paths import RESULTS_DIR
from harness.core.pin import load_pin
from harness.core.progress import Progress
from harness.experiment.configs import FAST_METRICS, PUSH_HEALTH
from harness.experiment.health import (
    PERIOD_S,
    TIMEOUT_S,
    health_counters,
    wait_for_unhealthy,
    wait_replaced,
)
from harness.experiment.history import History
from harness.experiment.nemesis import fail_health_check

SIZES = (16, 32, 48)  # 64 per mode saturates a 2-core machine; 96 did not deploy
REPEATS = 3
WINDOW_S = 30.0
IDLE_PERIOD_S = 3600.0  # no check falls in a window
MODES = ("no health checks", "pull", "push")
APPS = {"pull": "0", "push": "1"}  # app name -> RAY_SERVE_ENABLE_PUSH_HEALTH
INGEST = {"nodes": 250, "replicas_per_node": 32, "period_s": 10.0, "senders": 4}
INGEST_WINDOW_S = 60.0
DETECT_TIMEOUT_S = 90.0
SETTLE_S = 3 * PERIOD_S + 3  # three periods for the cadence to settle, plus the metrics export
# For the estimate of the time left only, a guess: a sample of the times to
# detect is a settle, then three faults, each detected and its replica
# replaced. The pace corrects it.
DETECT_SAMPLE_S = 100.0
# The counter of the controller's health-path CPU (cluster/agent/health_cpu):
# on the nodes' Python path, and where it writes its totals.
HEALTH_CPU_PATH = f"{HARNESS_MOUNT}/harness/cluster/agent/health_cpu"
HEALTH_CPU_DIR = "/tmp/rayspot-health-cpu"


def _app(name: str, replicas: int, period_s: float) -> dict:
    app = appconfigs.echo_app(
        num_replicas=replicas,
        max_replicas_per_node=None,
        ray_actor_options={
            "num_cpus": 0,
            "resources": {"w": 0.001},
            "runtime_env": {"env_vars": {"RAY_SERVE_ENABLE_PUSH_HEALTH": APPS[name]}},
        },
        health_check_period_s=period_s,
        health_check_timeout_s=TIMEOUT_S,
    )
    return {**app, "name": name, "route_prefix": f"/{name}"}


def _config(replicas: int, mode: str) -> dict:
    return appconfigs.deploy_config(
        *(_app(name, replicas, PERIOD_S if mode == name else IDLE_PERIOD_S) for name in APPS)
    )


def _save(partial: dict) -> None:
    """Keep what was measured so far: a later failure must not lose it."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench-health.json").write_text(json.dumps(partial, indent=1))


def _counters(cluster: Cluster, pid: int) -> dict:
    cpu_s, now = cluster.process_cpu_s(cluster.head, pid), time.monotonic()
    # One fetch for all four counters: on a loaded node a fetch can take seconds.
    return {"cpu_s": cpu_s, "time": now, **health_counters(cluster.metrics_text())}


# Functions stock 2.60.0 does not have: a pull app's visits pay for them only
# because the bench's controller runs with push health on.
PUSH_ONLY = ("DeploymentState._apply_pushed_health", "DeploymentState._record_probe_metrics")
# What the counter must have wrapped in the controller, or a figure would
# silently lack a part: all of its functions on the patched image, those
# stock 2.60.0 has on stock.
COUNTED_ON_STOCK = (
    "ActorReplicaWrapper.check_health",
    "DeploymentState._record_health_check_metrics",
    "Worker.deserialize_objects",
)
COUNTED = (*COUNTED_ON_STOCK, *PUSH_ONLY, "ServeController.record_replica_health_reports")
# The counter writes every 0.2 s, later when the controller's loop holds the
# GIL; this only tells a writer that stopped (a window is divided by the
# snapshots' own times, so a late one costs nothing).
STALE_AFTER_S = 5.0


def _health_cpu(cluster: Cluster, pid: int, counted: tuple[str, ...] = COUNTED) -> dict:
    """The controller's running totals: calls and thread CPU per health function
    and application, as its counter last wrote them."""
    path = f"{HEALTH_CPU_DIR}/{pid}.json"
    asked = time.time()
    code, text = cluster.exec_in(cluster.head, ["cat", path], check=False)
    if code != 0:
        raise HarnessError(
            f"the controller (pid {pid}) wrote no health CPU totals to {path}: was the "
            f"cluster started with {HEALTH_CPU_PATH} on its PYTHONPATH?"
        )
    totals = json.loads(text)
    # The nodes share the host's clock; taken before the read, so a slow exec
    # does not age the file.
    age_s = asked - totals["written_at"]
    if age_s > STALE_AFTER_S:
        raise HarnessError(
            f"the controller's health CPU totals in {path} are {age_s:.1f} s old: its "
            "counter stopped writing, so a window's figures would be wrong"
        )
    if totals["nested_calls"]:
        raise HarnessError(
            f"{totals['nested_calls']} counted health function calls ran inside another: "
            "their CPU was counted twice; the counter's list of functions needs fixing"
        )
    missing = set(counted) - set(totals["wrapped"])
    if missing:
        raise HarnessError(
            f"the controller's counter did not wrap {', '.join(sorted(missing))}: the "
            "figures would lack their cost (a Ray whose functions moved?)"
        )
    return totals


def health_cpu_between(before: dict, after: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Calls and CPU seconds per health function and application between two
    totals, less what the counter's wrapper added to each call. What was first
    called in between started from zero."""
    overhead_s = after["overhead_s_per_call"]
    spent: dict[str, dict[str, dict[str, float]]] = {}
    for name, by_app in after["functions"].items():
        for app, total in by_app.items():
            earlier = before["functions"].get(name, {}).get(app, {"calls": 0, "cpu_s": 0.0})
            calls = total["calls"] - earlier["calls"]
            cpu_s = total["cpu_s"] - earlier["cpu_s"] - calls * overhead_s
            spent.setdefault(name, {})[app] = {"calls": calls, "cpu_s": cpu_s}
    return spent


def mode_cpu_s(health_path: dict, mode: str) -> float:
    """What a mode's health checking cost. With no health checks, everything
    (both apps' sweep visits). In pull, the pull app's functions that stock
    2.60.0 has too. In push, the push app's functions and the relays' batches
    ("-": the handler and the decoding of its arguments). Neither counts the
    idle app's visits."""
    return sum(
        spent["cpu_s"]
        for name, by_app in health_path.items()
        for app, spent in by_app.items()
        if mode == MODES[0]
        or (mode == "pull" and app == "pull" and name not in PUSH_ONLY)
        or (mode == "push" and app in ("push", "-"))
    )


def _window(
    cluster: Cluster, pid: int, window_s: float, mode: str, counted: tuple[str, ...] = COUNTED
) -> dict:
    """The controller's counters over `window_s`, per health period, and the
    CPU its health functions took over the same window."""
    before, cpu_before = _counters(cluster, pid), _health_cpu(cluster, pid, counted)
    time.sleep(window_s)
    after, cpu_after = _counters(cluster, pid), _health_cpu(cluster, pid, counted)
    if cpu_after["written_at"] <= cpu_before["written_at"]:
        raise HarnessError("the controller's health CPU totals did not move over a window")
    periods = (after["time"] - before["time"]) / PERIOD_S
    # The totals' own window: a metrics fetch between them can take seconds.
    counted_periods = (cpu_after["written_at"] - cpu_before["written_at"]) / PERIOD_S
    health_path = {
        name: {
            app: {key: value / counted_periods for key, value in spent.items()}
            for app, spent in by_app.items()
        }
        for name, by_app in health_cpu_between(cpu_before, cpu_after).items()
    }
    loop = cluster.exec_head(["controller-health"])
    return {
        "health_path": health_path,
        "health_path_cpu_s": mode_cpu_s(health_path, mode),
        "health_path_all_cpu_s": mode_cpu_s(health_path, MODES[0]),
        "cpu_s": (after["cpu_s"] - before["cpu_s"]) / periods,
        **{
            key: (after[key] - before[key]) / periods
            for key in ("probes", "deferred", "batches", "reports")
        },
        "loop_ms": loop["loop_duration_s"] * 1000,
        "dsm_update_ms": loop["deployment_state_update_duration_s"] * 1000,
    }


def _settle(cluster: Cluster) -> None:
    time.sleep(SETTLE_S)


def _cluster(tag: str) -> Cluster:
    return Cluster(
        ClusterConfig(
            image=tag,
            name="rayspot-bench-health",
            workers=2,
            # Push health on for the controller and the proxies (they keep the
            # registry and the relays); each app's replicas set their own flag.
            # The controller counts its health functions' CPU.
            env={
                **FAST_METRICS,
                **PUSH_HEALTH,
                "PYTHONPATH": f"{HARNESS_MOUNT}:{HEALTH_CPU_PATH}",
                "RAYSPOT_HEALTH_CPU_DIR": HEALTH_CPU_DIR,
            },
            worker_resources={"w": 10},
            metrics_port=METRICS_PORT,
        )
    )


def planned_s(
    sizes: tuple[int, ...], repeats: int, window_s: float, cost_only: bool = False
) -> float:
    """The seconds a run plans (its progress estimates the time left from
    them): every settle and window it waits through, and DETECT_SAMPLE_S per
    sample of the times to detect. Cluster starts and deploys are left to the
    pace. Each part's pieces below begin with their share of this."""
    run_s = SETTLE_S + window_s
    total = len(sizes) * repeats * len(MODES) * run_s
    if cost_only:
        return total
    stock = 2 * run_s
    ingest = (SETTLE_S + INGEST_WINDOW_S) + (INGEST_WINDOW_S + 3)
    return total + stock + ingest + detect_planned_s(repeats)


def detect_planned_s(repeats: int) -> float:
    return repeats * len(APPS) * DETECT_SAMPLE_S


def measure_sizes(
    tag: str,
    sizes: tuple[int, ...],
    repeats: int,
    window_s: float,
    progress: Progress,
) -> list[dict]:
    """Every mode at every size, `repeats` times, interleaved."""
    runs: list[dict] = []
    progress.begin("starting a cluster")
    with _cluster(tag) as cluster:
        for replicas in sizes:
            progress.begin(f"size {replicas}: deploying 2 x {replicas} replicas")
            cluster.deploy(_config(replicas, "no health checks"), timeout_s=1200)
            pid = cluster.controller_pid()
            for repeat in range(repeats):
                order = MODES[repeat % len(MODES) :] + MODES[: repeat % len(MODES)]
                for mode in order:
                    progress.begin(
                        f"size {replicas}, repeat {repeat + 1}/{repeats}: {mode}",
                        SETTLE_S + window_s,
                    )
                    cluster.deploy(_config(replicas, mode), timeout_s=600)
                    _settle(cluster)
                    runs.append(
                        {
                            "replicas": replicas,
                            "repeat": repeat,
                            "mode": mode,
                            **_window(cluster, pid, window_s, mode),
                        }
                    )
                    _save({"runs": runs})
    return runs


def measure_detection(tag: str, replicas: int, repeats: int, progress: Progress, save) -> dict:
    """`repeats` samples of the times to detect per mode, the modes interleaved,
    on a cluster of their own: the faults replace replicas, and a deployment
    whose replicas failed is not one to measure costs on afterwards.
    `save(detect)` after every sample."""
    detect: dict = {}
    progress.begin("times to detect: starting a cluster")
    with _cluster(tag) as cluster:
        progress.begin(f"times to detect: deploying 2 x {replicas} replicas")
        cluster.deploy(_config(replicas, "no health checks"), timeout_s=1200)
        for repeat in range(repeats):
            order = ("pull", "push") if repeat % 2 == 0 else ("push", "pull")
            for mode in order:
                progress.begin(
                    f"size {replicas}, repeat {repeat + 1}/{repeats}: times to detect, {mode}",
                    DETECT_SAMPLE_S,
                )
                detect.setdefault(mode, []).append(detection_times(cluster, replicas, mode))
                save(detect)
    return detect


def detect_again(repeats: int = REPEATS) -> dict:
    """Measure the times to detect again, into the saved finished run (at its
    middle size), leaving its cost figures as they are."""
    path = RESULTS_DIR / "bench-health.json"
    try:
        result = json.loads(path.read_text())
        replicas = result["stock"]["replicas"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise HarnessError(
            f"{path} holds no finished bench-health run to measure "
            f"detection into ({e!r}); run `make bench-health` first."
        ) from e
    pin = load_pin()
    patched = images.ensure_node_image(images.ImageSpec(pin.ray.version, "patched"))
    with Progress("bench-health", detect_planned_s(repeats)) as p:
        result["detect"] = measure_detection(
            patched,
            replicas,
            repeats,
            p,
            lambda d: _save({**result, "detect": d, "detect_partial": True}),
        )
    _save(result)
    return result


def measure_stock(tag: str, replicas: int, window_s: float, progress: Progress) -> dict:
    """Stock 2.60.0 probing `replicas` replicas (the pull app alone at the 2 s
    period), against its own no-health window."""
    config = appconfigs.deploy_config(_app("pull", replicas, IDLE_PERIOD_S))
    progress.begin("stock 2.60.0: starting a cluster")
    with _cluster(tag) as cluster:
        progress.begin(f"stock 2.60.0: deploying {replicas} replicas")
        cluster.deploy(config, timeout_s=1200)
        pid = cluster.controller_pid()
        progress.begin(f"stock 2.60.0, size {replicas}: no health checks", SETTLE_S + window_s)
        _settle(cluster)
        idle = _window(cluster, pid, window_s, MODES[0], COUNTED_ON_STOCK)
        progress.begin(f"stock 2.60.0, size {replicas}: pull", SETTLE_S + window_s)
        cluster.deploy(appconfigs.deploy_config(_app("pull", replicas, PERIOD_S)), timeout_s=600)
        _settle(cluster)
        pull = _window(cluster, pid, window_s, "pull", COUNTED_ON_STOCK)
    return {"replicas": replicas, "idle": idle, "pull": pull}


def _replica_node(cluster: Cluster, hostname: str) -> Node:
    for node in cluster.nodes:
        if node.role == "lb":
            continue
        if cluster.exec_in(node, ["hostname"])[1].strip() == hostname:
            return node
    raise HarnessError(f"no node of the cluster has hostname {hostname!r}")


def _wait_recovered(cluster: Cluster, mode: str, replicas: int, faulted: set[str]) -> None:
    """Until the `mode` app runs `replicas` replicas again, none of them one a
    fault hit, and the newest has reported: every sample starts from a whole,
    settled app, and no fault lands on a replica that is already stopping."""
    if wait_replaced(cluster, mode, replicas, faulted, DETECT_TIMEOUT_S) is None:
        raise HarnessError(
            f"the {mode} app did not get back to {replicas} replicas within "
            f"{DETECT_TIMEOUT_S:.0f}s of a detection fault"
        )
    time.sleep(2 * PERIOD_S)


def detection_times(cluster: Cluster, replicas: int, mode: str) -> dict:
    """Seconds from each fault to the controller's verdict that the replica is
    unhealthy (not a single strike), for one replica of the `mode` app each:
    its check starts failing; its actor's process is killed; its event loop is
    blocked past the timeout. Returns {"seconds": {fault: s or None},
    "replicas": {fault: replica id}}, the ids so that a miss can be traced."""
    from harness.experiment.load import HTTPConnection

    cluster.deploy(_config(replicas, mode), timeout_s=600)
    _settle(cluster)
    seconds: dict[str, float | None] = {}
    victims: dict[str, str] = {}

    async def get(path: str, timeout_s: float):
        conn = HTTPConnection("127.0.0.1", cluster.lb_port, -1)
        try:
            return await conn.get(path, "bench", timeout_s)
        finally:
            conn.close()

    history = History()
    replica = asyncio.run(
        fail_health_check(history, "127.0.0.1", cluster.lb_port, prefix=f"/{mode}")
    )
    flipped = history.events[-1].time
    detected = wait_for_unhealthy(cluster, replica, flipped - 1, DETECT_TIMEOUT_S)
    seconds["check fails"], victims["check fails"] = (
        (detected - flipped if detected else None),
        replica,
    )

    _wait_recovered(cluster, mode, replicas, set(victims.values()))
    row = asyncio.run(get(f"/{mode}/", 10.0))
    actor = next(
        a
        for actors in cluster.replicas_by_node(mode, "Echo").values()
        for a in actors
        if row.replica in a["name"]
    )
    killed = time.time()
    cluster.exec_in(_replica_node(cluster, row.node), ["kill", "-9", str(actor["pid"])])
    detected = wait_for_unhealthy(cluster, row.replica, killed - 1, DETECT_TIMEOUT_S)
    seconds["actor killed"], victims["actor killed"] = (
        (detected - killed if detected else None),
        row.replica,
    )

    _wait_recovered(cluster, mode, replicas, set(victims.values()))
    blocked = time.time()
    # Blocks the loop the replica's user code runs on for longer than the
    # detection can take; the request itself is abandoned.
    asyncio.run(get(f"/{mode}/admin/block-loop?s={DETECT_TIMEOUT_S:.0f}", 1.0))
    # Which replica the front LB sent it to is unknown: any of the app's that
    # the controller marks after the block.
    detected = wait_for_unhealthy(cluster, f"app='{mode}'", blocked, DETECT_TIMEOUT_S)
    seconds["event loop blocked"] = detected - blocked if detected else None
    _wait_recovered(cluster, mode, replicas, set(victims.values()))
    return {"seconds": seconds, "replicas": victims}


def measure_ingest(tag: str, window_s: float, progress: Progress) -> dict:
    """The real controller ingesting 8,000 replicas' reports from simulated relays."""
    progress.begin("ingest: starting a cluster, deploying")
    with _cluster(tag) as cluster:
        cluster.deploy(appconfigs.deploy_config(_app("push", 2, IDLE_PERIOD_S)), timeout_s=600)
        pid = cluster.controller_pid()
        progress.begin("ingest: controller without reports", SETTLE_S + window_s)
        _settle(cluster)
        idle = _window(cluster, pid, window_s, MODES[0])
        progress.begin(
            f"ingest: {INGEST['nodes']} simulated nodes x {INGEST['replicas_per_node']} replicas",
            window_s + 3,
        )
        before = _counters(cluster, pid)
        sent = cluster.exec_head(
            [
                "health-ingest",
                "--nodes",
                str(INGEST["nodes"]),
                "--replicas-per-node",
                str(INGEST["replicas_per_node"]),
                "--period",
                str(INGEST["period_s"]),
                "--duration",
                str(window_s),
                "--senders",
                str(INGEST["senders"]),
            ]
        )
        time.sleep(3)  # the metrics export
        after = _counters(cluster, pid)
    seconds = after["time"] - before["time"] - 3
    idle_cpu_per_s = idle["cpu_s"] / PERIOD_S
    return {
        "sent": sent,
        "seconds": seconds,
        "calls": after["batches"] - before["batches"],
        "reports": after["reports"] - before["reports"],
        "cpu_s_per_s": (after["cpu_s"] - before["cpu_s"]) / seconds - idle_cpu_per_s,
        "idle_cpu_s_per_s": idle_cpu_per_s,
    }


def registry_memory(entries: int = 8000) -> int:
    """Bytes the patched `ReplicaHealthPushRegistry` holds for `entries` replicas,
    measured with tracemalloc in this process (the host's patched venv)."""
    from ray.serve._private.common import ReplicaHealthReport
    from ray.serve._private.deployment_state import ReplicaHealthPushRegistry
    from ray.serve._private.utils import get_random_string

    ids = [get_random_string() for _ in range(entries)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        registry = ReplicaHealthPushRegistry()
        registry.record_reports(ReplicaHealthReport(rid, time.monotonic(), True, 0) for rid in ids)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert len(registry) == entries
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


def bench_health(
    sizes: tuple[int, ...] = SIZES,
    repeats: int = REPEATS,
    window_s: float = WINDOW_S,
    cost_only: bool = False,
) -> dict:
    pin = load_pin()
    stock = images.ensure_node_image(images.ImageSpec(pin.ray.version, "stock"))
    patched = images.ensure_node_image(images.ImageSpec(pin.ray.version, "patched"))
    middle = sizes[len(sizes) // 2]
    with Progress("bench-health", planned_s(sizes, repeats, window_s, cost_only)) as p:
        runs = measure_sizes(patched, sizes, repeats, window_s, p)
        if cost_only:
            result = {"runs": runs, "sizes": sizes, "repeats": repeats}
            _save(result)
            return result
        stock_run = measure_stock(stock, middle, window_s, p)
        ingest = measure_ingest(patched, INGEST_WINDOW_S, p)
        p.begin("registry memory at 8000 entries")
        result = {
            "runs": runs,
            "stock": stock_run,
            "ingest": ingest,
            "registry_bytes": registry_memory(),
            "sizes": sizes,
            "repeats": repeats,
        }
        _save(result)
        result["detect"] = measure_detection(
            patched,
            middle,
            repeats,
            p,
            lambda d: _save({**result, "detect": d, "detect_partial": True}),
        )
    _save(result)
    return result


def _per_repeat(runs: list[dict], replicas: int, mode: str, key: str) -> list[float]:
    """One figure of a size and mode, per repeat in order."""
    by_repeat = {
        r["repeat"]: r[key] for r in runs if r["replicas"] == replicas and r["mode"] == mode
    }
    return [by_repeat[k] for k in sorted(by_repeat)]


def _health_cost(runs: list[dict], replicas: int, mode: str) -> list[float]:
    """Per repeat: the mode's controller CPU per period less the no-health run's."""
    return [
        cpu_s - idle_s
        for cpu_s, idle_s in zip(
            _per_repeat(runs, replicas, mode, "cpu_s"),
            _per_repeat(runs, replicas, "no health checks", "cpu_s"),
            strict=True,
        )
    ]


def _ratios(push: list[float], pull: list[float]) -> list[float]:
    """push / pull per repeat (infinite where pull's figure is not above 0)."""
    return [s / p if p > 0 else float("inf") for s, p in zip(push, pull, strict=True)]


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept."""
    return tuple(statistics.linear_regression(xs, ys))  # type: ignore[return-value]


def median_range(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    """'median (min-max)' of `values` times `scale`, as the benches print it."""
    middle = statistics.median(values) * scale
    return (
        f"{middle:.{digits}f} ({min(values) * scale:.{digits}f}-{max(values) * scale:.{digits}f})"
    )


def _print_health_path(runs: list[dict], sizes: tuple[int, ...]) -> None:
    """The health functions' own CPU, counted in the controller, push against
    pull per repeat."""
    if not all("health_path_all_cpu_s" in r for r in runs):
        return  # a run saved before the controller counted it per app
    print()
    print(
        "health path: thread CPU-s per period of the controller's health functions, "
        "counted in the controller (the sweep's checks, which send probes and decode "
        "replies; the batches' handler and the decoding of their arguments; not the "
        "core worker's C++ threads). pull counts its app's functions that stock "
        "2.60.0 has, push its app's and the batches; 'both apps' adds the idle app's "
        "sweep visits and the push-only functions; median (min-max)"
    )
    print()
    print(
        "| replicas | no health checks (both apps) | pull | push | push / pull per repeat "
        "| both apps: pull | both apps: push | both apps: push / pull | target |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for replicas in sizes:
        idle, pull, push = (
            _per_repeat(runs, replicas, mode, "health_path_cpu_s") for mode in MODES
        )
        all_pull, all_push = (
            _per_repeat(runs, replicas, mode, "health_path_all_cpu_s") for mode in MODES[1:]
        )
        ratios = _ratios(push, pull)
        verdict = "met" if max(ratios) <= 0.2 else "not met"
        print(
            f"| {replicas} | {median_range(idle, digits=5)} | {median_range(pull, digits=5)} "
            f"| {median_range(push, digits=5)} | {median_range(ratios, digits=3)} "
            f"| {median_range(all_pull, digits=5)} | {median_range(all_push, digits=5)} "
            f"| {median_range(_ratios(all_push, all_pull), digits=3)} | at most 0.20: {verdict} |"
        )


def print_health(result: dict) -> None:
    runs, sizes = result["runs"], result["sizes"]
    print()
    print(
        f"health period {PERIOD_S:g} s; zero-CPU replicas on 2 workers; "
        f"{result['repeats']} repeats per size, modes interleaved; median (min-max)"
    )
    print()
    print(
        "| replicas | mode | controller CPU s / period | health CPU s / period "
        "| probes / period | deferred probes / period | batches / period "
        "| reports / period | control loop ms | deployment-state update ms |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for replicas in sizes:
        for mode in MODES:
            rows = [r for r in runs if r["replicas"] == replicas and r["mode"] == mode]
            health = "-" if mode == MODES[0] else median_range(_health_cost(runs, replicas, mode))
            print(
                f"| {replicas} | {mode} | {median_range([r['cpu_s'] for r in rows])} | {health} "
                f"| {median_range([r['probes'] for r in rows], digits=1)} "
                # Runs saved before the deferred count was read have none.
                f"| {median_range([r.get('deferred', 0.0) for r in rows], digits=1)} "
                f"| {median_range([r['batches'] for r in rows], digits=1)} "
                f"| {median_range([r['reports'] for r in rows], digits=1)} "
                f"| {median_range([r['loop_ms'] for r in rows], digits=1)} "
                f"| {median_range([r['dsm_update_ms'] for r in rows], digits=2)} |"
            )
    print()
    print("| replicas | push / pull health CPU (median; worst repeat) | target |")
    print("|---:|---:|---|")
    for replicas in sizes:
        pull, push = (_health_cost(runs, replicas, m) for m in ("pull", "push"))
        ratios = _ratios(push, pull)
        print(
            f"| {replicas} | {statistics.median(push) / statistics.median(pull):.2f}; "
            f"{max(ratios):.2f} | at most 0.20 |"
        )
    _print_health_path(runs, sizes)
    if "stock" not in result:
        return  # --cost-only
    print()
    slopes = {}
    for mode in ("pull", "push"):
        xs = [float(n) for n in sizes for _ in _health_cost(runs, n, mode)]
        ys = [c for n in sizes for c in _health_cost(runs, n, mode)]
        slopes[mode], intercept = _fit(xs, ys)
        print(
            f"{mode}: health CPU per period = {slopes[mode] * 1e3:.3f} ms x replicas "
            f"{intercept * 1e3:+.1f} ms (least squares over {len(ys)} runs)"
        )
    stock = result["stock"]
    stock_cost = stock["pull"]["cpu_s"] - stock["idle"]["cpu_s"]
    patched_pull = statistics.median(_health_cost(runs, stock["replicas"], "pull"))
    print(
        f"cross-check, stock 2.60.0 pull at {stock['replicas']} replicas: health CPU "
        f"{stock_cost:.3f} s / period, {stock['pull']['probes']:.1f} probes / period "
        f"(patched image, flag off: {patched_pull:.3f} s)"
    )
    print()
    detect = result["detect"]
    print(
        f"time to detect (s), {stock['replicas']} replicas, "
        f"{len(detect.get('pull', []))} samples each; fault to the controller's verdict "
        "(threshold reached, or actor crashed); median (min-max)"
    )
    print()
    print("| fault | pull | push |")
    print("|---|---:|---:|")
    for fault in detect["pull"][0]["seconds"] if detect.get("pull") else {}:
        cells = []
        for mode in ("pull", "push"):
            times = [sample["seconds"][fault] for sample in detect[mode]]
            found = [t for t in times if t is not None]
            missed = len(times) - len(found)
            cells.append(
                (median_range(found, digits=1) if found else "")
                + (f" ({missed} not detected)" if missed else "")
            )
        print(f"| {fault} | " + " | ".join(cells) + " |")
    ingest = result["ingest"]
    print()
    print(
        f"ingest at {INGEST['nodes'] * INGEST['replicas_per_node']} replicas "
        f"({INGEST['nodes']} simulated nodes x {INGEST['replicas_per_node']}, period "
        f"{INGEST['period_s']:g} s, {ingest['seconds']:.0f} s): the controller received "
        f"{ingest['calls']:.0f} calls and {ingest['reports']:.0f} reports "
        f"(senders sent {ingest['sent']['calls']} and {ingest['sent']['reports']}); "
        f"{ingest['cpu_s_per_s']:.3f} controller CPU-s/s above its "
        f"{ingest['idle_cpu_s_per_s']:.3f} without them (target: under 0.1)"
    )
    print(f"registry memory at 8000 entries: {result['registry_bytes'] / 1024:.0f} KiB")
    replicas = INGEST["nodes"] * INGEST["replicas_per_node"]
    print(
        f"extrapolated from pull's slope: {replicas} replicas at {INGEST['period_s']:g} s "
        f"cost pull {slopes['pull'] * replicas / INGEST['period_s']:.2f} CPU-s/s"
    )
