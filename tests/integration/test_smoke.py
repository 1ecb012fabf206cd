"""Smoke: a 3-node cluster behind the front LB serves real traffic with no
errors, spreads replicas over nodes, runs HAProxy on every node, and leaves
nothing behind when it is torn down."""

import asyncio
import json
import time

import pytest

from harness.cluster import appconfigs, engine, runs
from harness.cluster.cluster import Cluster, ClusterConfig
from harness.core.paths import BUILD_DIR
from harness.experiment.history import History
from harness.experiment.load import closed_loop

pytestmark = pytest.mark.integration

REQUESTS = 1000
CLUSTER = "rayspot-smoke"
# What the controller logs when a step of its control loop raises.
LOOP_ERRORS = ["Exception updating", "Exception during shutdown"]


def test_three_node_cluster_serves_1000_requests_and_tears_down(patched_image):
    figures = {}
    t0 = time.monotonic()
    with Cluster(ClusterConfig(image=patched_image, name=CLUSTER, workers=2)) as cluster:
        figures["cluster_up_s"] = round(time.monotonic() - t0, 1)
        t1 = time.monotonic()
        cluster.deploy(appconfigs.deploy_config(appconfigs.echo_app()))
        cluster.wait_lb_ready()
        figures["app_ready_s"] = round(time.monotonic() - t1, 1)

        history = History()
        asyncio.run(closed_loop("127.0.0.1", cluster.config.lb_port, REQUESTS, 8, history))
        rows = history.requests
        failures = [r for r in rows if r.error]
        span = max(r.end for r in rows) - min(r.start for r in rows)
        figures.update(requests=len(rows), failures=len(failures), rps=round(len(rows) / span, 1))
        serving_nodes = {r.node for r in rows if r.node}
        haproxy = {node.name: cluster.haproxy_pids(node) for node in cluster.nodes}
        figures["serving_nodes"] = sorted(serving_nodes)
        # The controller's loop catches what a step raises and logs it with its
        # traceback; a step that raises on every loop still lets requests through
        # but skips the rest of that step, every 0.1 s.
        loop_errors = cluster.log_lines(cluster.head, LOOP_ERRORS, "/logs/serve/controller_")

        assert len(rows) == REQUESTS
        assert not failures, f"{len(failures)} failed requests, e.g. {failures[:3]}"
        assert len(serving_nodes) >= 2, f"replicas served from {serving_nodes} only"
        assert all(haproxy.values()), f"a node runs no HAProxy: {haproxy}"
        assert not loop_errors, (
            f"the Serve controller's loop raised {len(loop_errors)} times, first: "
            f"{loop_errors[0][1]}"
        )

        # Everything is named and labelled with this run, so a second run of
        # the same name collides with nothing; its start-up reaper leaves this
        # live run alone.
        mine = engine.labelled_containers(CLUSTER)
        prefix = f"{CLUSTER}-{cluster.run}-"
        assert all(c.name.startswith(prefix) for c in mine), [c.name for c in mine]
        assert all(c.labels[engine.RUN_LABEL] == cluster.run for c in mine)
        runs.reap()
        assert len(engine.labelled_containers(CLUSTER)) == 4
        t2 = time.monotonic()
    figures["teardown_s"] = round(time.monotonic() - t2, 1)

    assert engine.labelled_containers(CLUSTER) == []
    assert engine.labelled_networks(CLUSTER) == []
    BUILD_DIR.mkdir(exist_ok=True)
    (BUILD_DIR / "smoke.json").write_text(json.dumps(figures, indent=2))
    print(f"\nsmoke figures: {figures}")
