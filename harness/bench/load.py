"""Benchmarks: measured side by side in one run and printed as ratios, never
asserted against a time limit.

`load`: can the generator outrun the cluster? In one run it measures
  1. the cluster's rate: the most the cluster serves through the front LB
     (closed loop, enough connections to saturate it);
  2. the generator's capacity: the same client against an endpoint the front
     LB answers itself (`/-/null`), so nothing but the client limits it;
  3. the open loop at three times the cluster's rate against `/-/null`:
     does it keep its schedule (achieved rate, how late requests started)?
  4. the open loop in one process against the same loop split over one
     process per core (`open_loop_processes`), against `/-/null`, offered at
     0.5, 1 and 1.5 times the generator's capacity (2.): requests/s achieved,
     start lag and failures side by side at each, and what the record costs
     (bytes a row in the saved history, the time to save it).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from harness.cluster import appconfigs, images
from harness.cluster.cluster import Cluster, ClusterConfig
from harness.core import log
from harness.core.pin import load_pin
from harness.experiment.checker import percentile
from harness.experiment.history import History
from harness.experiment.load import LoadSpec, Mix, closed_loop, open_loop, open_loop_processes

_log = log.get(__name__)


def _rate(history: History) -> float:
    span = max(r.end for r in history.requests) - min(r.start for r in history.requests)
    return len(history.requests) / span


def _failures(history: History) -> int:
    return sum(1 for r in history.requests if r.error)


# Part 4's offered rates, as multiples of one process's closed-loop capacity,
# and how long each runs: long enough for a rate to settle, short enough that
# six runs of up to 1.5x a core's worth of rows stay in memory.
SPLIT_FACTORS = (0.5, 1.0, 1.5)
SPLIT_S = 5.0


def _paced(history: History) -> dict:
    """Achieved rate, start lag and failures of an open loop's record."""
    # A request that never got a connection was not sent: it has no lag.
    sent = [r for r in history.requests if r.sent]
    lags = sorted(r.start - r.scheduled for r in sent if r.scheduled)
    starts = [r.start for r in sent]
    return {
        "sent": len(sent),
        "achieved_rps": len(starts) / (max(starts) - min(starts)),
        "lag_p50_ms": percentile(lags, 50) * 1000 if lags else None,
        "lag_p99_ms": percentile(lags, 99) * 1000 if lags else None,
        "failures": _failures(history),
    }


def _split(port: int, rate: float, seconds: float, connections: int, processes: int) -> dict:
    """The open loop at `rate` against /-/null over `processes` processes."""
    history = History()
    spec = LoadSpec(
        rate=rate,
        duration_s=seconds,
        connections=connections,
        mix=Mix(short_path="/-/null"),
        timeout_s=10,
    )
    asyncio.run(open_loop_processes("127.0.0.1", port, spec, history, processes))
    result = _paced(history) | {"processes": processes, "scheduled": history.scheduled}
    # What the record costs: the saved history's bytes a row, and the time to
    # write it (the processes' rows are merged in the run above).
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.jsonl"
        started = time.perf_counter()
        history.save(path)
        result["save_s"] = time.perf_counter() - started
        result["bytes_per_row"] = path.stat().st_size / max(len(history.requests), 1)
    return result


def bench_load(requests: int = 3000, connections: int = 32, open_loop_s: float = 10.0) -> dict:
    tag = images.ensure_node_image(images.ImageSpec(load_pin().ray.version, "patched"))
    with Cluster(ClusterConfig(image=tag, name="rayspot-bench")) as cluster:
        cluster.deploy(appconfigs.deploy_config(appconfigs.echo_app()))
        cluster.wait_lb_ready()
        port = cluster.lb_port

        _log.info("bench: 1/3 cluster rate, %d requests over %d connections", requests, connections)
        served = History()
        asyncio.run(closed_loop("127.0.0.1", port, requests, connections, served))
        cluster_rps = _rate(served)

        _log.info("bench: 2/3 generator capacity against /-/null, %d requests", requests * 3)
        null = History()
        asyncio.run(closed_loop("127.0.0.1", port, requests * 3, connections, null, path="/-/null"))
        generator_rps = _rate(null)

        offered = 3 * cluster_rps
        _log.info(
            "bench: 3/3 open loop at 3x the cluster rate (%.0f/s) for %.0fs against /-/null",
            offered,
            open_loop_s,
        )
        paced = History()
        spec = LoadSpec(
            rate=offered,
            duration_s=open_loop_s,
            connections=connections * 2,
            mix=Mix(short_path="/-/null"),
            timeout_s=10,
        )
        asyncio.run(open_loop("127.0.0.1", port, spec, paced))
        paced_result = _paced(paced)

        cores = max(os.cpu_count() or 1, 2)
        split = []
        for factor in SPLIT_FACTORS:
            rate = factor * generator_rps
            for processes in (1, cores):
                _log.info(
                    "bench: 4/4 open loop at %.1fx the generator's capacity (%.0f/s) for "
                    "%.0fs, %d process(es)",
                    factor,
                    rate,
                    SPLIT_S,
                    processes,
                )
                split.append(
                    _split(port, rate, SPLIT_S, connections * 2, processes) | {"factor": factor}
                )
    return {
        "cluster_rps": cluster_rps,
        "cluster_failures": _failures(served),
        "generator_rps": generator_rps,
        "generator_failures": _failures(null),
        "ratio": generator_rps / cluster_rps,
        "open_loop_offered_rps": offered,
        "open_loop_sent": paced_result["sent"],
        "open_loop_achieved_rps": paced_result["achieved_rps"],
        "open_loop_lag_p50_ms": paced_result["lag_p50_ms"],
        "open_loop_lag_p99_ms": paced_result["lag_p99_ms"],
        "open_loop_failures": paced_result["failures"],
        "split": split,
    }


def print_load(result: dict) -> None:
    print()
    print("| measure | requests/s | failures |")
    print("|---|---:|---:|")
    print(
        f"| cluster (echo through the front LB, closed loop) | {result['cluster_rps']:,.0f} "
        f"| {result['cluster_failures']} |"
    )
    print(
        f"| generator alone (front LB answers /-/null) | {result['generator_rps']:,.0f} "
        f"| {result['generator_failures']} |"
    )
    print(f"| open loop offered at 3x cluster | {result['open_loop_offered_rps']:,.0f} | |")
    print(
        f"| open loop achieved | {result['open_loop_achieved_rps']:,.0f} "
        f"| {result['open_loop_failures']} |"
    )
    print()
    print(f"generator capacity / cluster rate = {result['ratio']:.1f}x (target: at least 3x)")
    print(
        f"open loop at 3x: start lag p50 {result['open_loop_lag_p50_ms']:.1f} ms, "
        f"p99 {result['open_loop_lag_p99_ms']:.1f} ms"
    )
    print()
    print(
        "open loop split over processes (against /-/null), offered at multiples of one "
        "process's capacity:"
    )
    print()
    print(
        "| offered | processes | requests | achieved/s | start lag p50 | p99 | failures "
        "| history bytes/row | save |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in result["split"]:
        lag = [row[k] for k in ("lag_p50_ms", "lag_p99_ms")]
        print(
            f"| {row['factor']:g}x | {row['processes']} | {row['scheduled']:,} "
            f"| {row['achieved_rps']:,.0f} | "
            + " | ".join(f"{v:.1f} ms" if v is not None else "-" for v in lag)
            + f" | {row['failures']:,} | {row['bytes_per_row']:.0f} | {row['save_s']:.2f} s |"
        )
