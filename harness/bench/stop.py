"""`make bench-stop`: how long the controller takes to stop an idle ingress
replica behind HAProxy, with RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_COVERS_REQUEST_TIMEOUT
(patch 0004) off and on, side by side in one run.

The setting raises the force-kill budget of a stopping ingress replica to
cover a request admitted at the end of its draining period. The budget is an
upper bound, not a wait: a replica with nothing in flight should stop as soon
as its drain sees no request, whatever the budget. This measures that cost.

For each setting, one patched cluster (head and one worker) runs the echo app
with two replicas on the worker, `request_timeout_s` set and a short minimum
draining period (2 s, as the churn scenarios use, so a round takes seconds and
not the default 30 s; both settings get the same). Each round scales the app
to one replica, with no traffic, and back to two. A stop is read from the
controller's own log lines on the head: "Stopping Replica(...)" to "... is
stopped." for the same replica, so the figure is the controller's, to the log's
millisecond.
"""

from __future__ import annotations

import json
import statistics
import time

from harness.cluster import appconfigs, images
from harness.cluster.boundary import STOPPING, logged_replica_id
from harness.cluster.cluster import Cluster, ClusterConfig
from harness.core.errors import HarnessError
from harness.core.paths import RESULTS_DIR
from harness.core.pin import load_pin
from harness.core.progress import Progress
from harness.experiment.checker import percentile

SETTING = "RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_COVERS_REQUEST_TIMEOUT"
MIN_DRAINING_S = 2
REQUEST_TIMEOUT_S = 30
ROUNDS = 8
# For the estimate of the time left only, a guess the pace corrects: a round
# is a replica drained (MIN_DRAINING_S) and stopped, then one started.
ROUND_S = 10.0
STOPPED = " is stopped."


def _app(replicas: int) -> dict:
    return appconfigs.deploy_config(
        appconfigs.echo_app(
            num_replicas=replicas,
            max_replicas_per_node=None,
            ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
        ),
        http_options={"request_timeout_s": REQUEST_TIMEOUT_S},
    )


def _wait_for_replicas(cluster: Cluster, count: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while len(cluster.replica_names("echo", "Echo")) != count:
        if time.monotonic() > deadline:
            raise HarnessError(
                f"bench-stop: the echo app did not reach {count} replicas in {timeout_s:.0f}s"
            )
        time.sleep(0.5)


def stop_durations(lines: list[tuple[float, str]]) -> list[float]:
    """Seconds from each replica's "Stopping" line to its "is stopped" line,
    in the order the stops began; a stop with no end is left out."""
    began: dict[str, float] = {}
    ended: dict[str, float] = {}
    for at, line in lines:
        replica = logged_replica_id(line)
        if replica is None:
            continue
        if STOPPING in line:
            began.setdefault(replica, at)
        elif STOPPED in line:
            ended.setdefault(replica, at)
    return [ended[r] - at for r, at in sorted(began.items(), key=lambda kv: kv[1]) if r in ended]


def measure(tag: str, enabled: bool, rounds: int, progress: Progress) -> list[float]:
    config = ClusterConfig(
        image=tag,
        name="rayspot-bench-stop",
        workers=1,
        env={
            SETTING: "1" if enabled else "0",
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": str(MIN_DRAINING_S),
        },
        worker_resources={"w": 10},
    )
    setting = f"{SETTING}={int(enabled)}"
    progress.begin(f"{setting}: starting a cluster, deploying")
    with Cluster(config) as cluster:
        cluster.deploy(_app(2))
        for i in range(rounds):
            progress.begin(f"{setting}: round {i + 1}/{rounds}", ROUND_S)
            cluster.deploy(_app(1), wait=False)
            _wait_for_replicas(cluster, 1)
            cluster.deploy(_app(2))
        progress.begin(f"{setting}: reading the controller's log")
        durations = stop_durations(cluster.log_lines(cluster.head, [STOPPING, STOPPED]))
    if len(durations) != rounds:
        raise HarnessError(
            f"bench-stop: {len(durations)} complete stops in the controller's log, "
            f"expected {rounds}; the log format may have changed."
        )
    return durations


def bench_stop(rounds: int = ROUNDS) -> dict:
    tag = images.ensure_node_image(images.ImageSpec(load_pin().ray.version, "patched"))
    # The plan: both settings' rounds, at ROUND_S each.
    with Progress("bench-stop", 2 * rounds * ROUND_S) as progress:
        result = {
            "rounds": rounds,
            "min_draining_s": MIN_DRAINING_S,
            "request_timeout_s": REQUEST_TIMEOUT_S,
            "off": measure(tag, False, rounds, progress),
            "on": measure(tag, True, rounds, progress),
        }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench-stop.json").write_text(json.dumps(result, indent=1))
    return result


def print_stop(result: dict) -> None:
    print()
    print(
        f"Stop of an idle ingress replica behind HAProxy, controller's log, "
        f"{result['rounds']} rounds per setting (min draining {result['min_draining_s']} s, "
        f"request timeout {result['request_timeout_s']} s)."
    )
    print(f"| {SETTING} | p50 s | p99 s | min s | max s | stdev s |")
    print("|---|---:|---:|---:|---:|---:|")
    for setting in ("off", "on"):
        values = sorted(result[setting])
        print(
            f"| {setting} | {percentile(values, 50):.2f} | {percentile(values, 99):.2f} "
            f"| {values[0]:.2f} | {values[-1]:.2f} | {statistics.pstdev(values):.2f} |"
        )
    off, on = statistics.median(result["off"]), statistics.median(result["on"])
    spread = max(statistics.pstdev(result["off"]), statistics.pstdev(result["on"]))
    print()
    print(
        f"on/off median {on / off:.2f}x ({on - off:+.2f} s); the larger run-to-run "
        f"stdev is {spread:.2f} s"
        + (", so the difference is inside the noise." if abs(on - off) <= spread else ".")
    )
