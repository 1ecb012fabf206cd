"""bench-membership's run loops with the clusters replaced: each part reports
its progress, and the pieces it begins add up to the plan. No Docker."""

from types import SimpleNamespace

from bench_offline import ClusterStandIn
from progress_spy import record

from harness.bench import membership


class FakeCluster(ClusterStandIn):
    """The agent's two probes, answering at once with one round's figures."""

    def __init__(self, config):
        pass

    def deploy(self, config):
        pass

    def metric_total(self, name):
        return 0.0

    def exec_head(self, args, check=True):
        if args[0] == "membership-latency":
            return {"started_s": 1.5, "routed_s": 0.04, "haproxy_processes_started": 1}
        size = int(args[args.index("--size") + 1])
        add = {"kind": "add", "update_s": 0.01, "routed_s": 0.02, "probe_rate": 100.0}
        remove = {"kind": "remove", "update_s": 0.01}
        return {
            "size": size,
            "changes": [add, remove],
            "haproxy_started": 0,
            "haproxy_rss_kib": 8192,
            "haproxy_processes": 1,
            "config_server_lines": size,
        }


def test_each_part_reports_its_progress_and_its_rounds_are_the_plan(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(membership, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(
        membership,
        "_configs",
        lambda: [
            SimpleNamespace(image="2.60.0-stock", label="stock", env={}),
            SimpleNamespace(image="2.60.0-patched", label="runtime servers", env={}),
        ],
    )
    monkeypatch.setattr(membership.images, "ensure_node_image", lambda image: f"node:{image}")
    monkeypatch.setattr(membership, "Cluster", FakeCluster)
    monkeypatch.setattr(membership.time, "sleep", lambda s: None)
    made = record(monkeypatch, membership)

    result = membership.bench_membership(rounds=3, sizes=[16, 64])

    assert [row["size"] for row in result["sizes"]] == [16, 64, 16, 64]
    (progress,) = made
    rounds_s, size_s = 3 * membership.ROUND_S, membership.SIZE_ROUNDS * membership.SIZE_ROUND_S
    assert progress.begun == [
        ("stock: starting a cluster", 0.0),
        ("stock: through the controller, 3 rounds", rounds_s),
        ("runtime servers: starting a cluster", 0.0),
        ("runtime servers: through the controller, 3 rounds", rounds_s),
        ("stock: starting a head-only cluster", 0.0),
        ("stock: 16 servers, 10 rounds", size_s),
        ("stock: 64 servers, 10 rounds", size_s),
        ("runtime servers: starting a head-only cluster", 0.0),
        ("runtime servers: 16 servers, 10 rounds", size_s),
        ("runtime servers: 64 servers, 10 rounds", size_s),
    ]
    assert progress.begun_s() == progress.planned_s
    lines = capsys.readouterr().err.splitlines()
    # The rounds' own figures still come between the progress lines.
    assert any(
        line.startswith("bench-membership stock: round 3/3: replica RUNNING") for line in lines
    )
    assert any(
        line.startswith("bench-membership [") and line.endswith("] stock: 64 servers, 10 rounds")
        for line in lines
    )
    assert lines[-1] == "bench-membership: done in 0s"
