"""The controller's health-path CPU counter (cluster/agent/health_cpu), run as
bench-health runs it: as the sitecustomize of a fresh Python, with Ray's own
Serve modules imported after it."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

COUNTER_DIR = Path(__file__).resolve().parents[2] / "harness/cluster/agent/health_cpu"

# Calls one health function 500 times, waits for a write, prints what it found.
CALLS = """
import json, os, threading, time
from types import SimpleNamespace
import ray.serve._private.deployment_state as ds
record = ds.DeploymentState._record_health_check_metrics
checked = SimpleNamespace(last_health_check_latency_ms=None, last_health_check_failed=False)
for app in ["a"] * 500 + ["b"] * 20:
    record(SimpleNamespace(_id=SimpleNamespace(app_name=app)), checked)
time.sleep(0.6)
out = os.path.join(os.environ.get("RAYSPOT_HEALTH_CPU_DIR", "/nonexistent"), f"{os.getpid()}.json")
print(json.dumps({
    "wrapped": hasattr(record, "__wrapped__"),
    "threads": [t.name for t in threading.enumerate()],
    "totals": json.load(open(out)) if os.path.exists(out) else None,
}))
"""


def run(code: str, counter_dir: Path | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(COUNTER_DIR)}
    env.pop("RAYSPOT_HEALTH_CPU_DIR", None)
    if counter_dir is not None:
        env["RAYSPOT_HEALTH_CPU_DIR"] = str(counter_dir)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_counts_every_call_of_a_health_function_and_its_cpu(tmp_path: Path):
    found = run(CALLS, tmp_path)
    assert found["wrapped"]
    assert "Worker.deserialize_objects" in found["totals"]["wrapped"]
    functions = found["totals"]["functions"]
    # Per application of the deployment it ran for.
    by_app = functions["DeploymentState._record_health_check_metrics"]
    assert by_app["a"]["calls"] == 500 and by_app["a"]["cpu_s"] > 0
    assert by_app["b"]["calls"] == 20
    assert set(functions) == {"DeploymentState._record_health_check_metrics"}


def test_does_nothing_unless_asked(tmp_path: Path):
    found = run(CALLS, None)
    assert not found["wrapped"]
    assert found["totals"] is None
    assert "health-cpu" not in found["threads"]


def test_a_process_without_serve_gets_no_writer(tmp_path: Path):
    found = run(
        "import json, threading; print(json.dumps({'threads': "
        "[t.name for t in threading.enumerate()]}))",
        tmp_path,
    )
    assert found["threads"] == ["MainThread"]
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def counter(monkeypatch):
    """The counter module itself, loaded under another name (importing it as
    `sitecustomize` would replace this process's own)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "health_cpu_counter", COUNTER_DIR / "sitecustomize.py"
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.delenv("RAYSPOT_HEALTH_CPU_DIR", raising=False)
    spec.loader.exec_module(module)
    return module


def test_a_function_this_ray_lacks_is_skipped(counter):
    import types

    class DeploymentState:
        def _apply_pushed_health(self):
            return "applied"

    module = types.ModuleType("fake_deployment_state")
    module.DeploymentState = DeploymentState
    wrapped = counter.wrap(
        module, ("DeploymentState._apply_pushed_health", "DeploymentState._record_probe_metrics")
    )
    assert wrapped == ["DeploymentState._apply_pushed_health"]
    assert DeploymentState()._apply_pushed_health() == "applied"
    assert counter.snapshot()["functions"] == {
        "DeploymentState._apply_pushed_health": {
            "-": {"calls": 1, "cpu_s": pytest.approx(0, abs=0.01)}
        }
    }


def test_a_function_that_raises_is_still_counted(counter):
    import types

    class ActorReplicaWrapper:
        def check_health(self):
            raise RuntimeError("probe failed")

    module = types.ModuleType("fake")
    module.ActorReplicaWrapper = ActorReplicaWrapper
    counter.wrap(module, ("ActorReplicaWrapper.check_health",))
    with pytest.raises(RuntimeError):
        ActorReplicaWrapper().check_health()
    assert counter.snapshot()["functions"]["ActorReplicaWrapper.check_health"]["-"]["calls"] == 1


def test_a_replica_or_deployment_is_counted_under_its_application(counter):
    from types import SimpleNamespace

    deployment = SimpleNamespace(app_name="shop")
    assert counter.application_of(SimpleNamespace(_id=deployment)) == "shop"
    replica = SimpleNamespace(_replica_id=SimpleNamespace(deployment_id=deployment))
    assert counter.application_of(replica) == "shop"
    assert counter.application_of(object()) == "-"


def test_counts_thread_cpu_not_time_asleep(counter):
    import time
    import types

    class ActorReplicaWrapper:
        def check_health(self, burn_s: float, sleep_s: float) -> None:
            end = time.thread_time() + burn_s
            while time.thread_time() < end:
                pass
            time.sleep(sleep_s)

    module = types.ModuleType("fake")
    module.ActorReplicaWrapper = ActorReplicaWrapper
    counter.wrap(module, ("ActorReplicaWrapper.check_health",))
    ActorReplicaWrapper().check_health(0.05, 0.2)
    cpu_s = counter.snapshot()["functions"]["ActorReplicaWrapper.check_health"]["-"]["cpu_s"]
    assert 0.05 <= cpu_s < 0.1


def test_a_counted_call_inside_another_is_reported(counter):
    import types

    class DeploymentState:
        def outer(self):
            return self.inner()

        def inner(self):
            return 1

    module = types.ModuleType("fake")
    module.DeploymentState = DeploymentState
    counter.wrap(module, ("DeploymentState.outer", "DeploymentState.inner"))
    DeploymentState().inner()
    assert counter.snapshot()["nested_calls"] == 0
    DeploymentState().outer()
    assert counter.snapshot()["nested_calls"] == 1


def test_a_coroutine_is_not_wrapped(counter):
    import types

    class ServeController:
        async def record_replica_health_reports(self):
            return None

    module = types.ModuleType("fake")
    module.ServeController = ServeController
    assert counter.wrap(module, ("ServeController.record_replica_health_reports",)) == []


class ReplicaHealthBatch(NamedTuple):
    """Shaped as Serve's batch: a NamedTuple of that name, sent pickled."""

    reports: list
    exited_replica_ids: list


EMPTY_BATCH = pickle.dumps(ReplicaHealthBatch([], []))


def decoded_call(*args) -> list:
    """An actor call's positional arguments as Ray decodes them."""
    from ray._common.signature import DUMMY_TYPE

    return [value for arg in args for value in (DUMMY_TYPE, arg)]


def test_decoding_is_counted_only_for_a_batch_of_health_reports(counter):
    batch = ReplicaHealthBatch([("r1", 1.0, True, 0, 0.0)] * 16, [])
    assert counter.carries_health_reports(None, decoded_call(pickle.dumps(batch))) == "-"
    # A relay's own calls from replicas carry one report, not a batch: proxies
    # count nothing and start no writer.
    assert counter.carries_health_reports(None, decoded_call(("r1", 1.0), 2.0)) is None
    # Other bytes: a handle's compressed metrics, a name that only happens to
    # appear far into a payload.
    assert counter.carries_health_reports(None, decoded_call(b"x" * 200)) is None
    late = b"x" * 200 + b"ReplicaHealthBatch"
    assert counter.carries_health_reports(None, decoded_call(late)) is None
    assert counter.carries_health_reports(None, [None]) is None  # a probe's reply


def test_a_reply_decoded_inside_a_check_is_the_checks_cost(counter):
    import types

    class Worker:
        def deserialize_objects(self, values):
            return values

    class ActorReplicaWrapper:
        def check_health(self):
            return Worker().deserialize_objects(decoded_call(EMPTY_BATCH))

    worker_module, state_module = types.ModuleType("w"), types.ModuleType("s")
    worker_module.Worker, state_module.ActorReplicaWrapper = Worker, ActorReplicaWrapper
    counter.wrap(worker_module, ("Worker.deserialize_objects",))
    counter.wrap(state_module, ("ActorReplicaWrapper.check_health",))
    ActorReplicaWrapper().check_health()
    totals = counter.snapshot()
    assert "Worker.deserialize_objects" not in totals["functions"]
    assert totals["nested_calls"] == 0
    assert totals["wrapped"] == ["ActorReplicaWrapper.check_health", "Worker.deserialize_objects"]
    Worker().deserialize_objects(decoded_call(EMPTY_BATCH))
    assert counter.snapshot()["functions"]["Worker.deserialize_objects"]["-"]["calls"] == 1


def test_the_wrappers_cost_per_call_is_measured(counter):
    overhead_ns = counter.calibrate()
    # Two clock reads and a call: well under 100 microseconds, above nothing.
    assert 0 < overhead_ns < 100_000


def test_a_serve_process_that_runs_no_health_function_writes_nothing(tmp_path: Path):
    # Replicas and proxies import the controller's modules too.
    found = run(
        "import json, threading\n"
        "import ray.serve._private.replica, ray.serve._private.proxy\n"
        "print(json.dumps({'threads': [t.name for t in threading.enumerate()]}))",
        tmp_path,
    )
    assert "health-cpu" not in found["threads"]
    assert list(tmp_path.iterdir()) == []
