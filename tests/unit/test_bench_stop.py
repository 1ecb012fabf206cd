"""bench-stop reads each stop from the controller's log lines."""

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
