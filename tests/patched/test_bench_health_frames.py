"""bench-health finds the controller's health path by its frames' names: each must
still name a function of the patched Ray, or the sampled cost would read 0."""

import importlib

import pytest

from harness.bench.health import HEALTH_FRAMES

MODULES = {
    "ActorReplicaWrapper": "ray.serve._private.deployment_state",
    "DeploymentState": "ray.serve._private.deployment_state",
    "ServeController": "ray.serve._private.controller",
}


@pytest.mark.parametrize("frame", HEALTH_FRAMES)
def test_every_health_frame_is_a_function_of_the_patched_tree(frame):
    owner, _, function = frame.removesuffix(" (").partition(".")
    cls = getattr(importlib.import_module(MODULES[owner]), owner)
    assert callable(getattr(cls, function, None)), frame
