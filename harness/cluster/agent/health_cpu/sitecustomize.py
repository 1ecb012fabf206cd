"""Counts the CPU the Serve controller spends in its health-check functions,
for bench-health, which puts this folder on its nodes' PYTHONPATH; Python then
imports this file as every process on those nodes starts. It does nothing
unless RAYSPOT_HEALTH_CPU_DIR is set.

Each function in HEALTH_FUNCTIONS is wrapped to add its calls and the CPU time
of the calling thread (time.thread_time_ns: time spent waiting, for the GIL or
anything else, is not counted) to running totals, kept per Serve application
(of the replica or deployment it works on; "-" for a relay's batch, which
carries every application's reports), so that a bench running two
applications can tell one's cost from the other's. A batch's cost is the
controller's handler and Ray's decoding of its arguments; a probe's is the
sweep's check, which sends it and decodes its reply. What the wrapper adds to
each call is measured once (`overhead_s_per_call`) for the reader to subtract.

The first counted call (only the controller makes one: every Serve process
imports the modules) starts a daemon thread that writes the totals to
RAYSPOT_HEALTH_CPU_DIR/<pid>.json every WRITE_INTERVAL_S, replacing the file
whole, so a reader always sees one complete snapshot. Not counted: the core
worker's C++ threads (which send each probe, receive its reply and each
batch), and Ray's dispatch of a call around the method. A function a Ray
version lacks (stock has no pushed health) is skipped; the snapshot lists those
wrapped, for the reader to check. Every Ray process on the nodes pays for the
decode wrapper (two clock reads and a scan of the decoded list, about 2 us per
call) in both modes alike.

This file shadows Debian's sitecustomize, which only installs apport's crash
hook for the system Python.
"""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

DIR_ENV = "RAYSPOT_HEALTH_CPU_DIR"
WRITE_INTERVAL_S = 0.2
# Module -> its health-check functions, as Class.method. None calls another
# (a nested counted call is counted in `nested_calls`, which must stay 0).
HEALTH_FUNCTIONS = {
    "ray.serve._private.deployment_state": (
        "ActorReplicaWrapper.check_health",
        "DeploymentState._apply_pushed_health",
        "DeploymentState._record_health_check_metrics",
        "DeploymentState._record_probe_metrics",
    ),
    "ray.serve._private.controller": ("ServeController.record_replica_health_reports",),
    # Ray decodes an actor call's arguments before the method runs: counted
    # only for a call whose arguments hold health reports (a relay's batch).
    "ray._private.worker": ("Worker.deserialize_objects",),
}
CALIBRATION_CALLS = 400
CALIBRATION_ROUNDS = 5

_lock = threading.Lock()
# ("Class.method", application) -> [calls, thread CPU ns]
_totals: dict[tuple[str, str], list[int]] = {}
_nested_calls = 0
_wrapped: list[str] = []  # "Class.method" of every function wrapped
_depth = threading.local()
_directory: str | None = None
_writer: threading.Thread | None = None
# What the wrapper itself adds to each call's counted CPU, measured once.
_overhead_ns = 0.0


def application_of(obj: Any, result: Any = None) -> str | None:
    """The Serve application of a replica's wrapper (its `_replica_id`) or of a
    deployment's state (its `_id`); "-" for anything else."""
    replica_id = getattr(obj, "_replica_id", None)
    deployment_id = getattr(replica_id, "deployment_id", None) or getattr(obj, "_id", None)
    return str(getattr(deployment_id, "app_name", "-"))


# A relay's batch reaches the controller as one bytes argument, a pickled
# ReplicaHealthBatch; pickle writes the class's name near its start.
BATCH_MARK = b"ReplicaHealthBatch"
BATCH_MARK_WITHIN = 128


def carries_health_reports(obj: Any, result: Any) -> str | None:
    """ "-" (no one application's) for decoded arguments that hold a relay's
    batch of health reports, None (not counted) for any other."""
    for value in result if isinstance(result, list) else ():
        if isinstance(value, bytes) and BATCH_MARK in value[:BATCH_MARK_WITHIN]:
            return "-"
    return None


ATTRIBUTION: dict[str, Callable[[Any, Any], str | None]] = {
    "Worker.deserialize_objects": carries_health_reports
}
# Counted only when no other counted call is running: a probe's reply is
# decoded inside the check that sent it, and is that check's cost.
TOP_LEVEL_ONLY = ("Worker.deserialize_objects",)


def counted(
    name: str,
    function: Callable[..., Any],
    attribute: Callable[[Any, Any], str | None] = application_of,
    record: Callable[[str, str, int, bool], None] | None = None,
    top_level_only: bool = False,
) -> Callable[..., Any]:
    """`function` wrapped to pass its thread CPU, under the application
    `attribute` gives (None: not counted), to `record` (default: the totals).
    With `top_level_only`, a call inside another counted call runs unwrapped."""
    add = record or _add

    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(_depth, "value", 0)
        if top_level_only and outer:
            return function(self, *args, **kwargs)
        _depth.value = outer + 1
        result = None
        start = time.thread_time_ns()
        try:
            result = function(self, *args, **kwargs)
            return result
        finally:
            spent = time.thread_time_ns() - start
            _depth.value = outer
            # Outside the measured span: what it costs is not the function's.
            key = attribute(self, result)
            if key is not None:
                add(name, key, spent, outer > 0)

    return wrapper


def _add(name: str, application: str, spent_ns: int, nested: bool) -> None:
    global _nested_calls
    with _lock:
        totals = _totals.setdefault((name, application), [0, 0])
        totals[0] += 1
        totals[1] += spent_ns
        _nested_calls += nested
    if _writer is None and _directory is not None:
        # Only a process that runs a health function writes: every Serve
        # process imports the modules, only the controller calls them.
        _start_writer(_directory)


def wrap(module: ModuleType, names: tuple[str, ...]) -> list[str]:
    """Wrap each Class.method of `module` that exists and is a plain function
    (a coroutine's thread CPU would not be its own); returns those wrapped."""
    wrapped = []
    for name in names:
        class_name, method = name.split(".")
        cls = getattr(module, class_name, None)
        function = vars(cls).get(method) if cls is not None else None
        if function is None or inspect.iscoroutinefunction(function):
            continue
        setattr(
            cls,
            method,
            counted(
                name,
                function,
                ATTRIBUTION.get(name, application_of),
                top_level_only=name in TOP_LEVEL_ONLY,
            ),
        )
        wrapped.append(name)
    with _lock:
        _wrapped.extend(wrapped)
    return wrapped


def calibrate() -> float:
    """What the wrapper adds to each counted call, in ns: the median of
    CALIBRATION_ROUNDS means, each over CALIBRATION_CALLS calls of a function
    that does nothing (one mean moves with whatever else the machine runs)."""
    spent: list[int] = []

    def nothing(self: Any) -> None:
        return None

    counted_nothing = counted(
        "calibration", nothing, record=lambda name, app, spent_ns, nested: spent.append(spent_ns)
    )
    means = []
    for _ in range(CALIBRATION_ROUNDS):
        spent.clear()
        for _ in range(CALIBRATION_CALLS):
            counted_nothing(None)
        means.append(sum(spent) / len(spent))
    return sorted(means)[len(means) // 2]


def snapshot() -> dict:
    """The totals as "Class.method" -> application -> calls and CPU seconds,
    with what the wrapper adds per call and the count of nested calls."""
    functions: dict[str, dict[str, dict[str, float]]] = {}
    with _lock:
        for (name, application), (calls, ns) in _totals.items():
            functions.setdefault(name, {})[application] = {"calls": calls, "cpu_s": ns / 1e9}
        nested = _nested_calls
        wrapped = sorted(_wrapped)
    return {
        "wrapped": wrapped,
        "pid": os.getpid(),
        "written_at": time.time(),
        "overhead_s_per_call": _overhead_ns / 1e9,
        "nested_calls": nested,
        "functions": functions,
    }


def _write_forever(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{os.getpid()}.json")
    while True:
        with open(path + ".tmp", "w") as out:
            json.dump(snapshot(), out)
        os.replace(path + ".tmp", path)
        time.sleep(WRITE_INTERVAL_S)


def _start_writer(directory: str) -> None:
    global _writer, _overhead_ns
    with _lock:
        if _writer is not None:
            return
        _writer = threading.Thread(
            target=_write_forever, args=(directory,), name="health-cpu", daemon=True
        )
    _overhead_ns = calibrate()
    _writer.start()


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds the modules as the other finders do, and wraps their health
    functions once each module has run."""

    def find_spec(self, fullname, path, target=None):
        names = HEALTH_FUNCTIONS.get(fullname)
        if names is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run_module = loader.exec_module  # type: ignore[union-attr]

        def run_and_wrap(module: ModuleType) -> None:
            run_module(module)
            wrap(module, names)

        loader.exec_module = run_and_wrap  # type: ignore[union-attr,method-assign]
        return spec


if os.environ.get(DIR_ENV):
    _directory = os.environ[DIR_ENV]
    sys.meta_path.insert(0, _WrapOnImport())
