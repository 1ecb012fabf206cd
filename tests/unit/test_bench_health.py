"""bench-health measures the controller's health path from its counted totals,
and its run loop reports its progress."""

import itertools
import json
import time

import pytest
from bench_offline import ClusterStandIn, offline
from progress_spy import record

from harness.bench import health
from harness.bench.health import health_cpu_between
from harness.core.errors import HarnessError

CHECK = "ActorReplicaWrapper.check_health"
RECEIVE = "ServeController.record_replica_health_reports"
PROBE_METRICS = "DeploymentState._record_probe_metrics"


def totals(functions: dict, overhead_s: float = 0.0) -> dict:
    return {"functions": functions, "overhead_s_per_call": overhead_s}


def test_the_health_path_is_what_each_function_took_between_two_totals():
    before = totals(
        {
            CHECK: {"pull": {"calls": 100, "cpu_s": 0.5}, "push": {"calls": 90, "cpu_s": 0.1}},
            RECEIVE: {"-": {"calls": 2, "cpu_s": 0.01}},
        }
    )
    after = totals(
        {
            CHECK: {"pull": {"calls": 160, "cpu_s": 0.8}, "push": {"calls": 90, "cpu_s": 0.1}},
            RECEIVE: {"-": {"calls": 2, "cpu_s": 0.01}},
            # First called inside the window: its totals started at zero.
            PROBE_METRICS: {"push": {"calls": 3, "cpu_s": 0.002}},
        }
    )
    spent = health_cpu_between(before, after)
    assert spent[CHECK]["pull"] == pytest.approx({"calls": 60, "cpu_s": 0.3})
    assert spent[CHECK]["push"] == {"calls": 0, "cpu_s": 0.0}
    assert spent[RECEIVE]["-"] == {"calls": 0, "cpu_s": 0.0}
    assert spent[PROBE_METRICS]["push"] == {"calls": 3, "cpu_s": 0.002}


def test_what_the_counter_adds_to_each_call_is_taken_off():
    before = totals({CHECK: {"pull": {"calls": 0, "cpu_s": 0.0}}}, overhead_s=1e-6)
    after = totals({CHECK: {"pull": {"calls": 1000, "cpu_s": 0.004}}}, overhead_s=1e-6)
    assert health_cpu_between(before, after)[CHECK]["pull"]["cpu_s"] == pytest.approx(0.003)


def test_a_mode_counts_its_own_app_not_the_idle_one_and_pull_only_what_stock_has():
    path = {
        CHECK: {"pull": {"calls": 60, "cpu_s": 0.004}, "push": {"calls": 20, "cpu_s": 0.0003}},
        PROBE_METRICS: {"pull": {"calls": 19, "cpu_s": 0.0001}},
        RECEIVE: {"-": {"calls": 2, "cpu_s": 0.0002}},
        "Worker.deserialize_objects": {"-": {"calls": 2, "cpu_s": 0.00005}},
    }
    # Stock 2.60.0 has no _record_probe_metrics: pull is what stock would spend.
    assert health.mode_cpu_s(path, "pull") == pytest.approx(0.004)
    assert health.mode_cpu_s(path, "push") == pytest.approx(0.00055)
    assert health.mode_cpu_s(path, "no health checks") == pytest.approx(0.00465)


class CounterFile:
    """A head whose counter file says `totals`."""

    head = "head"

    def __init__(self, **totals):
        self.totals = {
            "written_at": time.time(),
            "nested_calls": 0,
            "wrapped": list(health.COUNTED),
            "overhead_s_per_call": 0.0,
            "functions": {},
            **totals,
        }

    def exec_in(self, node, cmd, check=True):
        return 0, json.dumps(self.totals)


def test_fresh_whole_totals_are_read():
    assert health._health_cpu(CounterFile(), 7)["functions"] == {}


@pytest.mark.parametrize(
    "totals, says",
    [
        ({"written_at": time.time() - 5}, "old"),
        ({"nested_calls": 3}, "inside another"),
        ({"wrapped": list(health.COUNTED_ON_STOCK)}, "did not wrap"),
    ],
)
def test_stale_nested_or_incomplete_totals_are_refused(totals, says):
    with pytest.raises(HarnessError, match=says):
        health._health_cpu(CounterFile(**totals), 7)


def test_stock_needs_only_what_stock_has():
    cluster = CounterFile(wrapped=list(health.COUNTED_ON_STOCK))
    health._health_cpu(cluster, 7, health.COUNTED_ON_STOCK)


class FakeCluster(ClusterStandIn):
    """What the run loops ask of a cluster, answering at once."""

    def deploy(self, config, timeout_s=None):
        pass

    def controller_pid(self):
        return 1

    def exec_head(self, args):
        return {"calls": 0, "reports": 0}


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    """bench-health with its clusters, waits and measurements replaced."""
    offline(monkeypatch, health, tmp_path)
    monkeypatch.setattr(health, "_cluster", lambda tag: FakeCluster())
    monkeypatch.setattr(health, "_settle", lambda cluster: None)
    monkeypatch.setattr(
        health, "_window", lambda cluster, pid, window_s, mode, counted=None: {"cpu_s": 0.1}
    )
    clock = itertools.count(start=1000.0)
    monkeypatch.setattr(
        health,
        "_counters",
        lambda cluster, pid: {"cpu_s": 0.0, "time": next(clock) * 10, "batches": 0, "reports": 0},
    )
    monkeypatch.setattr(health.time, "sleep", lambda s: None)
    monkeypatch.setattr(health, "registry_memory", lambda: 0)
    monkeypatch.setattr(
        health, "detection_times", lambda cluster, replicas, mode: {"seconds": {}, "replicas": {}}
    )
    return record(monkeypatch, health)


def test_the_run_loop_reports_each_run_and_its_pieces_add_up_to_the_plan(no_cluster, capsys):
    health.bench_health(sizes=(16, 32), repeats=2, window_s=20.0)
    (progress,) = no_cluster
    run_s = health.SETTLE_S + 20.0
    assert progress.begun[:9] == [
        ("starting a cluster", 0.0),
        ("size 16: deploying 2 x 16 replicas", 0.0),
        ("size 16, repeat 1/2: no health checks", run_s),
        ("size 16, repeat 1/2: pull", run_s),
        ("size 16, repeat 1/2: push", run_s),
        # The modes' order rotates every repeat.
        ("size 16, repeat 2/2: pull", run_s),
        ("size 16, repeat 2/2: push", run_s),
        ("size 16, repeat 2/2: no health checks", run_s),
        ("size 32: deploying 2 x 32 replicas", 0.0),
    ]
    assert progress.begun[-1] == (
        "size 32, repeat 2/2: times to detect, pull",
        health.DETECT_SAMPLE_S,
    )
    # The time left is estimated from the plan: every piece has its share of it.
    assert progress.begun_s() == pytest.approx(progress.planned_s)
    assert progress.planned_s == health.planned_s((16, 32), 2, 20.0)
    lines = capsys.readouterr().err.splitlines()
    assert any(
        line.startswith("bench-health [0s elapsed, ")
        and line.endswith("] size 16, repeat 1/2: pull")
        for line in lines
    )
    assert lines[-1] == "bench-health: done in 0s"


def test_cost_only_plans_only_the_cost_runs(no_cluster):
    health.bench_health(sizes=(16, 32), repeats=1, window_s=20.0, cost_only=True)
    (progress,) = no_cluster
    assert progress.begun_s() == progress.planned_s == 2 * 3 * (health.SETTLE_S + 20.0)
