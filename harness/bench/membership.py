"""`make bench-membership`: what a replica change costs HAProxy, stock 2.60.0
against the patched image's runtime servers (patch 0009,
RAY_SERVE_HAPROXY_RUNTIME_SERVERS_ENABLED) in master-worker mode (patch 0006),
side by side in one run.

Two parts.

Through the controller. Per configuration, one cluster (head and one worker;
the app's replicas on the worker) and one app; per round a replica is added
and later removed, both controller changes the head's HAProxy has to follow
(the agent's `membership-latency`):

  reloads per change      HAProxy processes the head started during the
                          rounds, per change: a new process per reload with
                          -sf, a new worker per reload in master-worker mode
  RUNNING -> routed       from the controller listing the new replica RUNNING
                          to the first answer from it through the head's
                          HAProxy (new connections, 5 ms apart, so the
                          resolution is a few tens of ms); p50 and p99
  manager's update        Serve's own serve_haproxy_update_latency_s on the
                          head (coalesce window, queueing, then the reload or,
                          patched, the admin-socket sync), mean per update
  change -> RUNNING       the replica's own start, for scale: the same code in
                          both configurations

By backend size. Per configuration and size (16, 64 and 256 servers by
default), the node's HAProxy manager code on its own, driven as the manager
drives it, with one backend of that many servers, each a real HTTP listener
(the agent's `haproxy-membership`): per round a server is added and the
oldest removed. Per size: the update call's time per change (p50 and p99),
change -> first answer from the added server (p50 and p99; with a request
held on every member the added server is leastconn's first choice, so a
probe's round trip bounds the resolution, except after a reload, shown),
HAProxy processes started, HAProxy's resident memory and open fds at rest,
what 8 servers draining cost the manager and HAProxy, and the slope per 1,000
servers.

Both parts run with membership_churn's environment (a 2 s drain window and
hard-stop-after 3 s, so a removed replica and a reloaded-out worker are gone
within seconds).
"""

from __future__ import annotations

import json
import statistics
import time

from harness.cluster import appconfigs, images
from harness.cluster.cluster import METRICS_PORT, SERVE_PORT, Cluster, ClusterConfig
from harness.core import log
from harness.core.errors import HarnessError
from harness.core.paths import RESULTS_DIR
from harness.core.pin import load_pin
from harness.core.progress import Progress
from harness.experiment.checker import percentile
from harness.experiment.configs import (
    FAST_METRICS,
    MEMBERSHIP_CHURN,
    RUNTIME_SERVERS_MASTER_WORKER,
    RunConfig,
)

_log = log.get(__name__)

REPLICAS = 2
SIZES = (16, 64, 256)  # servers in the backend, by-size part
SIZE_ROUNDS = 20  # rounds (an addition and a removal each) per size
DRAINING = 8  # servers removed with a request still open, by-size part
PARTS = ("controller", "sizes")
# For the estimate of the time left only, guesses the pace corrects: a round
# through the controller (a replica started, routed, and drained away) and a
# round of the by-size part (a server added and one removed).
ROUND_S = 10.0
SIZE_ROUND_S = 5.0
# Serve's HAProxy manager: from the first coalesced broadcast to the update done.
UPDATE_LATENCY = "ray_serve_haproxy_update_latency_s"


def _app() -> dict:
    return appconfigs.deploy_config(
        appconfigs.echo_app(
            num_replicas=REPLICAS,
            max_replicas_per_node=None,
            ray_actor_options={"num_cpus": 0, "resources": {"w": 0.01}},
        )
    )


def _update_latency(cluster: Cluster) -> tuple[float, float]:
    """The head HAProxy manager's own update histogram: (sum, count)."""
    return (
        cluster.metric_total(f"{UPDATE_LATENCY}_sum"),
        cluster.metric_total(f"{UPDATE_LATENCY}_count"),
    )


def measure(tag: str, label: str, rounds: int, env: dict[str, str], progress: Progress) -> dict:
    config = ClusterConfig(
        image=tag,
        name="rayspot-bench-membership",
        workers=1,
        env={**env, **FAST_METRICS},
        worker_resources={"w": 10},
        metrics_port=METRICS_PORT,
    )
    samples = []
    progress.begin(f"{label}: starting a cluster")
    with Cluster(config) as cluster:
        progress.begin(f"{label}: through the controller, {rounds} rounds", rounds * ROUND_S)
        cluster.deploy(_app())
        time.sleep(3)  # the metrics export catches up with the deploy's updates
        before = _update_latency(cluster)
        args = ["membership-latency", json.dumps(_app()), "--port", str(SERVE_PORT)]
        for number in range(rounds):
            sample = cluster.exec_head(args, check=False)
            if sample.get("error"):
                raise HarnessError(
                    f"bench-membership {label}, round {number + 1}: {sample['error']}"
                )
            samples.append(sample)
            _log.info(
                "bench-membership %s: round %d/%d: replica RUNNING %.2fs after the change, "
                "routed %+.0f ms later, %d HAProxy processes started",
                label,
                number + 1,
                rounds,
                sample["started_s"],
                sample["routed_s"] * 1000,
                sample["haproxy_processes_started"],
            )
        time.sleep(3)
        after = _update_latency(cluster)
    updates = after[1] - before[1]
    routed = sorted(s["routed_s"] for s in samples)
    return {
        "label": label,
        "changes": 2 * len(samples),
        "reloads": sum(s["haproxy_processes_started"] for s in samples),
        "routed_p50": percentile(routed, 50),
        "routed_p99": percentile(routed, 99),
        "routed_mean": statistics.fmean(routed),
        "started_p50": percentile(sorted(s["started_s"] for s in samples), 50),
        "updates": updates,
        "update_mean": (after[0] - before[0]) / updates if updates else None,
    }


def _configs() -> list[RunConfig]:
    """Stock, then the patched image's runtime servers."""
    version = load_pin().ray.version
    return [
        RunConfig(images.ImageSpec(version, "stock")),
        RunConfig(
            images.ImageSpec(version, "patched"), "runtime servers", RUNTIME_SERVERS_MASTER_WORKER
        ),
    ]


def measure_sizes(
    tag: str, label: str, sizes: list[int], rounds: int, env: dict, progress: Progress
) -> list[dict]:
    """The by-size part for one configuration: one head-only cluster, the agent's
    `haproxy-membership` once per size."""
    config = ClusterConfig(image=tag, name="rayspot-bench-membership-sizes", workers=0, env=env)
    rows = []
    progress.begin(f"{label}: starting a head-only cluster")
    with Cluster(config) as cluster:
        for size in sizes:
            progress.begin(f"{label}: {size} servers, {rounds} rounds", rounds * SIZE_ROUND_S)
            args = ["haproxy-membership", "--size", str(size), "--rounds", str(rounds)]
            args += ["--draining", str(DRAINING)]
            sample = cluster.exec_head(args, check=False)
            if sample.get("error"):
                raise HarnessError(f"bench-membership {label}, {size} servers: {sample['error']}")
            row = _size_row(label, sample)
            rows.append(row)
            _log.info(
                "bench-membership %s: %d servers: update p50 %.1f ms, added -> routed p50 "
                "%.0f ms, %d HAProxy processes started, HAProxy RSS %.0f MiB",
                label,
                size,
                row["update_p50"] * 1000,
                row["routed_p50"] * 1000,
                row["started"],
                row["rss_mib"],
            )
    return rows


def _size_row(label: str, sample: dict) -> dict:
    changes = sample["changes"]
    updates = sorted(c["update_s"] for c in changes)
    # The same updates less the time the interpreter spent collecting garbage
    # inside each: what is left is the manager's own work.
    own_work = sorted(c["update_s"] - c["collections_s"] for c in changes)
    adds = [c for c in changes if c["kind"] == "add"]
    routed = sorted(c["routed_s"] for c in adds)

    def resolution(add: dict) -> float:
        # A probe's round trip, and the probes that may land on the idle
        # servers the added one ties with under leastconn (they are taken in
        # the order they were queued, the added one last): after a reload every
        # member (the new process has none of the held requests), else none.
        ties = sample["size"] if add["reloaded"] else sample["size"] - add["anchored"]
        return add["round_trip_s"] + ties / add["completed_per_s"]

    def per_core_percent(window: str) -> dict:
        return {k: 100 * v for k, v in sample[window].items()}

    idle, drain = per_core_percent("idle"), per_core_percent("drain")
    return {
        "label": label,
        "size": sample["size"],
        "changes": len(changes),
        "started": sample["haproxy_started"],
        "update_p50": percentile(updates, 50),
        "update_p99": percentile(updates, 99),
        "update_p99_less_collections": percentile(own_work, 99),
        "longest_collection_s": max(c["longest_collection_s"] for c in changes),
        "full_collections": sum(c["full_collections"] for c in changes),
        "routed_p50": percentile(routed, 50),
        "routed_p99": percentile(routed, 99),
        "resolution_s": statistics.median(resolution(c) for c in adds),
        "rss_mib": sample["haproxy_rss_kib"] / 1024,
        "fds": sample["haproxy_fds"],
        "processes": sample["haproxy_processes"],
        "server_lines": sample["config_server_lines"],
        "draining": sample["draining"],
        # What `draining` servers cost while they drain, in % of one core: the
        # drain window's CPU less the idle window's just before it.
        "drain_manager_pct": drain["manager_cpu_per_s"] - idle["manager_cpu_per_s"],
        "drain_haproxy_pct": drain["haproxy_cpu_per_s"] - idle["haproxy_cpu_per_s"],
        "idle_manager_pct": idle["manager_cpu_per_s"],
    }


def bench_membership(
    rounds: int = 20, sizes: list[int] | None = None, parts: tuple[str, ...] = PARTS
) -> dict:
    """`parts`: "controller", "sizes" or both; a part left out is an empty list."""
    sizes = sizes or list(SIZES)
    configs = _configs()
    tags = {str(c.image): images.ensure_node_image(c.image) for c in configs}
    # Each configuration: its node image and its nodes' environment.
    runs = [(c.label, tags[str(c.image)], {**MEMBERSHIP_CHURN, **c.env}) for c in configs]
    # The plan: every round of both parts, at the guesses above.
    controller_s = rounds * ROUND_S if "controller" in parts else 0
    sizes_s = len(sizes) * SIZE_ROUNDS * SIZE_ROUND_S if "sizes" in parts else 0
    with Progress("bench-membership", len(runs) * (controller_s + sizes_s)) as progress:
        churn = [
            measure(tag, label, rounds, env, progress)
            for label, tag, env in runs
            if "controller" in parts
        ]
        by_size = [
            row
            for label, tag, env in runs
            if "sizes" in parts
            for row in measure_sizes(tag, label, sizes, SIZE_ROUNDS, env, progress)
        ]
    result = {"controller": churn, "sizes": by_size}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench-membership.json").write_text(json.dumps(result, indent=1))
    return result


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def print_membership(result: dict) -> None:
    if result["controller"]:
        _print_controller(result["controller"])
    if result["sizes"]:
        _print_sizes(result["sizes"])


def _print_controller(churn: list[dict]) -> None:
    print()
    print(
        f"through the controller: one app, {REPLICAS} <-> {REPLICAS + 1} replicas on a worker; "
        "the head's HAProxy"
    )
    print()
    print(
        "| configuration | changes | HAProxy reloads | reloads / change "
        "| RUNNING -> routed p50 | p99 | mean | manager's update, mean (n) "
        "| change -> RUNNING p50 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in churn:
        update = (
            "-" if r["update_mean"] is None else f"{_ms(r['update_mean'])} ({r['updates']:.0f})"
        )
        print(
            f"| {r['label']} | {r['changes']} | {r['reloads']} "
            f"| {r['reloads'] / r['changes']:.2f} | {_ms(r['routed_p50'])} "
            f"| {_ms(r['routed_p99'])} | {_ms(r['routed_mean'])} "
            f"| {update} | {r['started_p50']:.2f} s |"
        )
    stock = churn[0]
    print()
    for r in churn[1:]:
        print(
            f"RUNNING -> routed, {r['label']} / stock: p50 "
            f"{r['routed_p50'] / stock['routed_p50']:.2f}x, p99 "
            f"{r['routed_p99'] / stock['routed_p99']:.2f}x"
        )


def _print_sizes(rows: list[dict]) -> None:
    print()
    print(
        "by backend size: the HAProxy manager's code on its own, one backend of N real "
        "HTTP servers; per round one added, the oldest removed"
    )
    print()
    print(
        "| configuration | servers | changes | HAProxy processes started "
        "| update p50 | p99 | added -> routed p50 | p99 | probe resolution "
        "| HAProxy RSS | HAProxy fds | server lines in the config |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        processes = f"{r['processes']} process" + ("es" if r["processes"] != 1 else "")
        print(
            f"| {r['label']} | {r['size']:,} | {r['changes']} | {r['started']} "
            f"| {_ms(r['update_p50'])} | {_ms(r['update_p99'])} "
            f"| {_ms(r['routed_p50'])} | {_ms(r['routed_p99'])} | {_ms(r['resolution_s'])} "
            f"| {r['rss_mib']:.1f} MiB ({processes}) | {r['fds']:,.0f} | {r['server_lines']:,} |"
        )
    print()
    print(
        "the interpreter's garbage collections inside updates (a full one walks every "
        "object the process holds, Ray's included):"
    )
    for r in rows:
        print(
            f"  {r['label']}, {r['size']:,} servers: {r['full_collections']} full, the "
            f"longest collection {_ms(r['longest_collection_s'])}; p99 of each update less "
            f"its collections {_ms(r['update_p99_less_collections'])}"
        )
    print()
    print(
        f"while {DRAINING} servers drain (removed with a request still open), CPU in % of "
        "one core over the idle window just before"
    )
    print()
    print("| configuration | servers | the manager | HAProxy | the manager when idle |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        if r["started"]:
            # A reload hands the held requests to the retired process, which
            # the hard stop ends: nothing drains in the serving one.
            print(f"| {r['label']} | {r['size']:,} | n/a (reloads) | n/a | - |")
            continue
        print(
            f"| {r['label']} | {r['size']:,} | {r['drain_manager_pct']:+.2f}% "
            f"| {r['drain_haproxy_pct']:+.2f}% | {r['idle_manager_pct']:.2f}% |"
        )
    print(
        "\n/proc counts CPU in 10 ms ticks: 0.1% of a core over a 10 s window, the "
        "resolution of these figures."
    )
    print()
    for size in sorted({r["size"] for r in rows}):
        at = [r for r in rows if r["size"] == size]
        base = at[0]
        ratios = ", ".join(
            # Two significant digits: the runtime servers' ratios are below 0.01.
            f"{r['label']} update {r['update_p50'] / base['update_p50']:.2g}x, "
            f"routed {r['routed_p50'] / base['routed_p50']:.2g}x"
            for r in at[1:]
        )
        print(f"{size:,} servers, p50 against stock: {ratios}")
    _print_slopes(rows)


SLOPED = (
    ("update p99", "update_p99", _ms),
    ("added -> routed p99", "routed_p99", _ms),
    ("HAProxy RSS", "rss_mib", lambda v: f"{v:.1f} MiB"),
    ("HAProxy fds", "fds", lambda v: f"{v:,.0f}"),
    ("the manager's CPU while servers drain", "drain_manager_pct", lambda v: f"{v:+.2f}% core"),
)


def _print_slopes(rows: list[dict]) -> None:
    """Per configuration, each figure's change per 1,000 servers between the
    smallest and the largest size."""
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = sorted((r for r in rows if r["label"] == label), key=lambda r: r["size"])
        if len(mine) < 2:
            continue
        low, high = mine[0], mine[-1]
        thousands = (high["size"] - low["size"]) / 1000
        slopes = ", ".join(
            f"{name} {show((high[key] - low[key]) / thousands)}" for name, key, show in SLOPED
        )
        print(f"{label}, per 1,000 servers ({low['size']:,} -> {high['size']:,}): {slopes}")
