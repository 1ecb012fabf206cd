"""bench-stop reads each stop from the controller's log lines, and its run
loop reports its progress."""

from bench_offline import ClusterStandIn, offline
from progress_spy import record

from harness.bench import stop
from harness.bench.stop import stop_durations

A = "Replica(id='aaa', deployment='Echo', app='echo')"
B = "Replica(id='bbb', deployment='Echo', app='echo')"


def test_each_stop_is_paired_by_replica_and_ordered_by_its_start():
    lines = [
        (10.0, f"INFO deployment_state.py:1 - Stopping {B} (currently RUNNING)."),
        (11.0, f"INFO deployment_state.py:1 - Stopping {A} (currently RUNNING)."),
        (13.5, f"INFO deployment_state.py:1 - {A} is stopped."),
        (14.0, f"INFO deployment_state.py:1 - {B} is stopped."),
        # Not a replica's own line.
        (15.0, "INFO deployment_state.py:1 - Stopping 2 replicas of Deployment(name='Echo')."),
    ]
    assert stop_durations(lines) == [4.0, 2.5]


def test_a_stop_that_never_ended_is_left_out_and_a_repeated_line_counts_once():
    lines = [
        (1.0, f"Stopping {A} (currently RUNNING)."),
        (2.0, f"Stopping {A} (currently STOPPING)."),
        (4.0, f"{A} is stopped."),
        (5.0, f"Stopping {B} (currently RUNNING)."),
    ]
    assert stop_durations(lines) == [3.0]


class FakeCluster(ClusterStandIn):
    """An echo app that scales at once, and a controller's log of its stops."""

    def __init__(self, config):
        self.head = "head"
        self.rounds = 0

    def deploy(self, config, wait=True):
        self.rounds += not wait  # each round scales down without waiting

    def replica_names(self, app, deployment):
        return ["one"]

    def log_lines(self, node, patterns):
        return [
            line
            for n in range(self.rounds)
            for line in (
                (10.0 * n, f"Stopping Replica(id='r{n}', deployment='Echo', app='echo')."),
                (10.0 * n + 2, f"Replica(id='r{n}', deployment='Echo', app='echo') is stopped."),
            )
        ]


def test_the_run_loop_reports_each_round_and_its_rounds_are_the_plan(monkeypatch, tmp_path, capsys):
    offline(monkeypatch, stop, tmp_path)
    monkeypatch.setattr(stop, "Cluster", FakeCluster)
    made = record(monkeypatch, stop)

    result = stop.bench_stop(rounds=2)

    assert result["off"] == result["on"] == [2.0, 2.0]
    (progress,) = made
    off, on = f"{stop.SETTING}=0", f"{stop.SETTING}=1"
    assert progress.begun == [
        (f"{off}: starting a cluster, deploying", 0.0),
        (f"{off}: round 1/2", stop.ROUND_S),
        (f"{off}: round 2/2", stop.ROUND_S),
        (f"{off}: reading the controller's log", 0.0),
        (f"{on}: starting a cluster, deploying", 0.0),
        (f"{on}: round 1/2", stop.ROUND_S),
        (f"{on}: round 2/2", stop.ROUND_S),
        (f"{on}: reading the controller's log", 0.0),
    ]
    assert progress.begun_s() == progress.planned_s
    lines = capsys.readouterr().err.splitlines()
    # Done at once, the pace says nothing is left; what counts here is the share.
    assert any(
        line.startswith("bench-stop [0s elapsed, 75% of plan, ")
        and line.endswith(f"] {on}: round 2/2")
        for line in lines
    )
    assert lines[-1] == "bench-stop: done in 0s"
