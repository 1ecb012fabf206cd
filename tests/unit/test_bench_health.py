"""bench-health attributes the controller's sampled stacks to its health path."""

from harness.bench.health import health_samples

LOOP = (
    "Thread._bootstrap (threading.py:995);Thread.run (threading.py:975);"
    "ServeController.run_control_loop (ray/serve/_private/controller.py:716)"
)


def test_samples_in_a_health_frame_are_counted_and_the_rest_only_in_the_total():
    raw = "\n".join(
        [
            f"{LOOP};DeploymentStateManager.update (ray/serve/_private/deployment_state.py:1);"
            "DeploymentReplica.check_health (ray/serve/_private/deployment_state.py:2);"
            "ActorReplicaWrapper.check_health (ray/serve/_private/deployment_state.py:3) 40",
            f"{LOOP};DeploymentStateManager.update (ray/serve/_private/deployment_state.py:1);"
            "DeploymentState._apply_pushed_health (ray/serve/_private/deployment_state.py:4) 5",
            "Thread.run (threading.py:975);"
            "ServeController.record_replica_health_reports (ray/serve/_private/controller.py:9) 7",
            f"{LOOP};ApplicationStateManager.update (application_state.py:5) 100",
            # A thread py-spy could not name a frame of, and a blank line.
            " 3",
            "",
        ]
    )
    assert health_samples(raw) == (52, 155)


def test_a_frame_named_like_a_health_frame_but_not_one_is_not_counted():
    raw = "X.check_health_later (a.py:1) 9\nActorReplicaWrapper.check_health_x (a.py:2) 1"
    assert health_samples(raw) == (0, 10)
