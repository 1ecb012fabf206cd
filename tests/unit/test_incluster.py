"""The churn driver's readiness rule (harness/cluster/incluster.py): pure logic, no Ray.

An app may be flipped again only once every replica it asked for is RUNNING;
flipping it while the new replica is still STARTING stops that replica first,
so it never reaches HAProxy and the churn changes nothing there."""

from types import SimpleNamespace

import pytest

from harness.cluster.incluster import _replicas_ready


def _app(**replica_states: int) -> SimpleNamespace:
    return SimpleNamespace(deployments={"Echo": SimpleNamespace(replica_states=replica_states)})


@pytest.mark.parametrize(
    "states, wanted, ready",
    [
        ({"RUNNING": 3}, 3, True),
        ({"RUNNING": 2, "STOPPING": 1}, 2, True),  # a stopping replica is already out of HAProxy
        ({"RUNNING": 2, "STARTING": 1}, 3, False),  # the added replica has not reached HAProxy
        ({"RUNNING": 2}, 3, False),  # the controller has not acted on the change yet
        ({"RUNNING": 3}, 2, False),  # nor on a scale-down
        ({"RUNNING": 3, "STARTING": 1}, 3, False),  # a replacement still starting
        ({"RUNNING": 2, "UPDATING": 1}, 2, False),
        ({}, 2, False),
    ],
)
def test_an_app_is_ready_only_when_every_asked_for_replica_runs(states, wanted, ready):
    assert _replicas_ready(_app(**states), wanted) is ready
