"""bench-health counts the controller's health path by wrapping its functions
by name (cluster/agent/health_cpu) and refuses totals that lack one; each name
it requires must still be a plain function of the patched Ray, or every run of
the bench would stop."""

import importlib.util
import inspect
from pathlib import Path

import pytest

from harness.bench.health import COUNTED

COUNTER = Path(__file__).resolve().parents[2] / "harness/cluster/agent/health_cpu/sitecustomize.py"
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


def test_the_counter_knows_a_relays_batch_as_the_relay_encodes_it():
    from ray.serve._private.common import ReplicaHealthBatch, ReplicaHealthReport

    spec = importlib.util.spec_from_file_location("health_cpu_counter", COUNTER)
    counter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(counter)
    reports = [ReplicaHealthReport(f"{i:08x}", 1.0, True, 0) for i in range(64)]
    batch = ReplicaHealthBatch(reports, ["gone"], "node-1", 2.0).to_bytes()
    # Ray decodes a call's positional argument after a marker value.
    assert counter.carries_health_reports(None, [b"__RAY_DUMMY__", batch]) == "-"
