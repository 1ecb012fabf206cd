"""`make bench-keepalive`: what RAY_SERVE_HAPROXY_CLOSE_AFTER_CHUNKED_RESPONSE
(patch 0007) costs the clients of a node's HAProxy, with it off and on side by
side in one run.

For each setting, one patched cluster (head and one worker, two echo replicas
on the worker) and keep-alive clients straight to the head's HAProxy, closed
loop, at two client counts so the slope shows, each measured REPEATS times
(the table shows medians, the saved result every run):

  short     GET /, a response with a Content-Length: the setting must cost
            nothing here (requests/s, latency, connections opened)
  stream    GET /stream?chunks=2, a chunked response of two lines 0.2 s
            apart: with the setting on, every stream costs its client a new
            connection; this measures what that costs per stream

No fault is injected: this is the steady-state price of the fix.
"""

from __future__ import annotations

import asyncio
import json
import statistics

from harness.cluster import appconfigs, images
from harness.cluster.cluster import SERVE_PORT, Cluster, ClusterConfig
from harness.core.paths import RESULTS_DIR
from harness.core.pin import load_pin
from harness.core.progress import Progress
from harness.experiment.checker import percentile
from harness.experiment.history import History
from harness.experiment.load import closed_loop

SETTING = "RAY_SERVE_HAPROXY_CLOSE_AFTER_CHUNKED_RESPONSE"
CLIENTS = (8, 32)
KINDS = {"short": ("/", 300), "stream": ("/stream?chunks=2", 20)}  # path, requests per client
REPEATS = 3  # runs per kind and client count; the table shows their medians
# For the estimate of the time left only, a guess the pace corrects: one
# measured closed loop, a kind at a client count.
LOOP_S = 10.0


def _app() -> dict:
    return appconfigs.deploy_config(
        appconfigs.echo_app(
            num_replicas=2,
            max_replicas_per_node=None,
            max_ongoing_requests=200,
            ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
        )
    )


def _row(history: History, connections: int) -> dict:
    rows = history.requests
    span = max(r.end for r in rows) - min(r.start for r in rows)
    latencies = sorted(r.end - r.start for r in rows)
    return {
        "requests": len(rows),
        "failed": sum(not r.ok for r in rows),
        "per_s": len(rows) / span,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "connections_per_request": connections / len(rows),
    }


def _median(runs: list[dict]) -> dict:
    """Each measure's median over the repeats; counts summed."""
    return {
        key: (
            sum(r[key] for r in runs)
            if key in ("requests", "failed")
            else statistics.median(r[key] for r in runs)
        )
        for key in runs[0]
    }


def measure(tag: str, enabled: bool, progress: Progress) -> dict:
    config = ClusterConfig(
        image=tag,
        name="rayspot-bench-keepalive",
        workers=1,
        env={SETTING: "1" if enabled else "0"},
        worker_resources={"w": 10},
    )
    result = {}
    progress.begin(f"{SETTING}={int(enabled)}: starting a cluster, deploying")
    with Cluster(config) as cluster:
        cluster.deploy(_app())
        for kind, (path, per_client) in KINDS.items():
            for clients in CLIENTS:
                progress.begin(
                    f"{SETTING}={int(enabled)}: {kind}, {clients} clients", REPEATS * LOOP_S
                )
                # A short warm-up, not measured: the first connections and replicas' caches.
                asyncio.run(
                    closed_loop(
                        cluster.head.ip, SERVE_PORT, clients, clients, History(), path, kind=kind
                    )
                )
                runs = []
                for _ in range(REPEATS):
                    history = History()
                    opened = asyncio.run(
                        closed_loop(
                            cluster.head.ip,
                            SERVE_PORT,
                            clients * per_client,
                            clients,
                            history,
                            path,
                            kind=kind,
                        )
                    )
                    runs.append(_row(history, opened))
                result[f"{kind}/{clients}"] = {**_median(runs), "runs": runs}
    return result


def bench_keepalive() -> dict:
    tag = images.ensure_node_image(images.ImageSpec(load_pin().ray.version, "patched"))
    # The plan: every measured loop of both settings, at LOOP_S each.
    planned_s = 2 * len(KINDS) * len(CLIENTS) * REPEATS * LOOP_S
    with Progress("bench-keepalive", planned_s) as progress:
        result = {"off": measure(tag, False, progress), "on": measure(tag, True, progress)}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "bench-keepalive.json").write_text(json.dumps(result, indent=1))
    return result


def print_keepalive(result: dict) -> None:
    print()
    print(f"Medians of {REPEATS} runs; requests and failed are totals.")
    print(
        f"| kind / clients | {SETTING} | requests | failed | per s | p50 ms | p99 ms "
        f"| connections per request |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for key in result["off"]:
        for setting in ("off", "on"):
            row = result[setting][key]
            print(
                f"| {key} | {setting} | {row['requests']} | {row['failed']} "
                f"| {row['per_s']:,.1f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} "
                f"| {row['connections_per_request']:.3f} |"
            )
    print()
    for key in result["off"]:
        off, on = result["off"][key], result["on"][key]
        print(
            f"{key}: on/off requests per s {on['per_s'] / off['per_s']:.2f}x, "
            f"p50 {on['p50_ms'] / off['p50_ms']:.2f}x, connections per request "
            f"{off['connections_per_request']:.3f} -> {on['connections_per_request']:.3f}"
        )
