"""bench-health counts the controller's health path by wrapping its functions
by name (cluster/agent/health_cpu) and refuses totals that lack one; each name
it requires must still be a plain function of the patched Ray, or every run of
the bench would stop."""

import importlib
import inspect

import pytest

from harness.bench.health import COUNTED

MODULES = {
    "ActorReplicaWrapper": "ray.serve._private.deployment_state",
    "DeploymentState": "ray.serve._private.deployment_state",
    "ServeController": "ray.serve._private.controller",
    "Worker": "ray._private.worker",
}


@pytest.mark.parametrize("name", COUNTED)
def test_every_counted_function_is_a_plain_function_of_the_patched_tree(name):
    owner, _, function = name.partition(".")
    cls = getattr(importlib.import_module(MODULES[owner]), owner)
    defined = vars(cls).get(function)
    assert callable(defined), name
    # The counter skips coroutines: their thread CPU would not be their own.
    assert not inspect.iscoroutinefunction(defined), name
