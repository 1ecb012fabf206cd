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
        return _sample(size, reloaded=False, anchored=size)


def _setup_offline(monkeypatch, tmp_path):
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


def test_each_part_reports_its_progress_and_its_rounds_are_the_plan(monkeypatch, tmp_path, capsys):
    _setup_offline(monkeypatch, tmp_path)
    made = record(monkeypatch, membership)

    result = membership.bench_membership(rounds=3, sizes=[16, 64])

    assert [row["size"] for row in result["sizes"]] == [16, 64, 16, 64]
    (progress,) = made
    n = membership.SIZE_ROUNDS
    rounds_s, size_s = 3 * membership.ROUND_S, n * membership.SIZE_ROUND_S
    assert progress.begun == [
        ("stock: starting a cluster", 0.0),
        ("stock: through the controller, 3 rounds", rounds_s),
        ("runtime servers: starting a cluster", 0.0),
        ("runtime servers: through the controller, 3 rounds", rounds_s),
        ("stock: starting a head-only cluster", 0.0),
        (f"stock: 16 servers, {n} rounds", size_s),
        (f"stock: 64 servers, {n} rounds", size_s),
        ("runtime servers: starting a head-only cluster", 0.0),
        (f"runtime servers: 16 servers, {n} rounds", size_s),
        (f"runtime servers: 64 servers, {n} rounds", size_s),
    ]
    assert progress.begun_s() == progress.planned_s
    lines = capsys.readouterr().err.splitlines()
    # The rounds' own figures still come between the progress lines.
    assert any(
        line.startswith("bench-membership stock: round 3/3: replica RUNNING") for line in lines
    )
    assert any(
        line.startswith("bench-membership [") and line.endswith(f"] stock: 64 servers, {n} rounds")
        for line in lines
    )
    assert lines[-1] == "bench-membership: done in 0s"


def test_one_part_alone_runs_and_prints_only_that_part(monkeypatch, tmp_path, capsys):
    _setup_offline(monkeypatch, tmp_path)
    made = record(monkeypatch, membership)

    result = membership.bench_membership(rounds=3, sizes=[16, 64], parts=("sizes",))
    membership.print_membership(result)

    assert result["controller"] == []
    (progress,) = made
    assert not any("through the controller" in what for what, _ in progress.begun)
    assert progress.begun_s() == progress.planned_s
    out = capsys.readouterr().out
    assert "through the controller" not in out
    assert "by backend size" in out


NO_COLLECTIONS = {"collections_s": 0.0, "longest_collection_s": 0.0, "full_collections": 0}


def _sample(size, reloaded, anchored, rate=1000.0):
    add = {
        "kind": "add",
        "update_s": 0.01,
        **NO_COLLECTIONS,
        "routed_s": 0.02,
        "completed_per_s": rate,
        "round_trip_s": 0.002,
        "anchored": anchored,
        "reloaded": reloaded,
    }
    return {
        "size": size,
        "changes": [add, {"kind": "remove", "update_s": 0.01, **NO_COLLECTIONS}],
        "haproxy_started": int(reloaded),
        "haproxy_rss_kib": 1024 * size // 100,
        "haproxy_fds": size + 20,
        "haproxy_processes": 1,
        "config_server_lines": size,
        "draining": 8,
        "idle": {"manager_cpu_per_s": 0.010, "haproxy_cpu_per_s": 0.020},
        "drain": {"manager_cpu_per_s": 0.013, "haproxy_cpu_per_s": 0.020},
    }


def test_resolution_is_one_probe_when_every_member_is_anchored_and_a_pass_otherwise():
    anchored = membership._size_row("runtime servers", _sample(1024, False, 1024))
    reloaded = membership._size_row("stock", _sample(1024, True, 1024))
    half = membership._size_row("runtime servers", _sample(1024, False, 512))

    assert anchored["resolution_s"] == 0.002
    assert reloaded["resolution_s"] == 0.002 + 1024 / 1000
    assert half["resolution_s"] == 0.002 + 512 / 1000


def test_an_update_a_full_collection_landed_in_is_shown_with_and_without_it():
    sample = _sample(4096, False, 4096)
    sample["changes"].append(
        {
            "kind": "remove",
            "update_s": 0.09,
            "collections_s": 0.08,
            "longest_collection_s": 0.07,
            "full_collections": 1,
        }
    )

    row = membership._size_row("runtime servers", sample)

    assert row["update_p99"] > 0.08
    assert round(row["update_p99_less_collections"], 6) == 0.01
    assert row["longest_collection_s"] == 0.07
    assert row["full_collections"] == 1


def test_drain_cost_is_the_drain_window_less_the_idle_one_in_percent_of_a_core():
    row = membership._size_row("runtime servers", _sample(1024, False, 1024))

    assert round(row["drain_manager_pct"], 6) == 0.3
    assert row["drain_haproxy_pct"] == 0.0
    assert round(row["idle_manager_pct"], 6) == 1.0


def test_slopes_are_per_thousand_servers_between_the_smallest_and_largest_size(capsys):
    rows = [
        membership._size_row("runtime servers", _sample(size, False, size)) for size in (4096, 1024)
    ]

    membership._print_slopes(rows)

    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("runtime servers, per 1,000 servers (1,024 -> 4,096): ")
    assert "HAProxy fds 1,000" in line
    assert "HAProxy RSS 10.0 MiB" in line
