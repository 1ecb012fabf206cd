"""Counts the CPU the Serve controller spends in its health-check functions,
for bench-health, which puts this folder on its nodes' PYTHONPATH; Python then
imports this file as every process on those nodes starts. It does nothing
unless RAYSPOT_HEALTH_CPU_DIR is set, and then only in a process that imports
one of Serve's modules below (the controller's).

Each function in HEALTH_FUNCTIONS is wrapped to add its calls and the CPU time
of the calling thread (time.thread_time_ns: time spent waiting, for the GIL or
anything else, is not counted) to running totals, kept per Serve application
(of the replica or deployment it works on; "-" for the controller's handler of
batches, which carries every application's reports), so that a bench running
two applications can tell one's cost from the other's. A daemon thread writes the
totals to RAYSPOT_HEALTH_CPU_DIR/<pid>.json every WRITE_INTERVAL_S, replacing
the file whole, so a reader always sees one complete snapshot. Unlike a
sampling profiler it misses nothing when the machine is busy; like one, it does
not see the core worker's C++ threads, which send each probe and receive each
call. A function a Ray version lacks (stock has no pushed health) is skipped.

This file shadows Debian's sitecustomize, which only installs apport's crash
hook for the system Python.
"""

from __future__ import annotations

import functools
import importlib.abc
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
# Serve's module -> its health-check functions, as Class.method. None calls
# another, so no CPU is counted twice.
HEALTH_FUNCTIONS = {
    "ray.serve._private.deployment_state": (
        "ActorReplicaWrapper.check_health",
        "DeploymentState._apply_pushed_health",
        "DeploymentState._record_health_check_metrics",
        "DeploymentState._record_probe_metrics",
    ),
    "ray.serve._private.controller": ("ServeController.record_replica_health_reports",),
}

_lock = threading.Lock()
# ("Class.method", application) -> [calls, thread CPU ns]
_totals: dict[tuple[str, str], list[int]] = {}
_writer: threading.Thread | None = None


def application_of(obj: Any) -> str:
    """The Serve application of a replica's wrapper (its `_replica_id`) or of a
    deployment's state (its `_id`); "-" for anything else."""
    replica_id = getattr(obj, "_replica_id", None)
    deployment_id = getattr(replica_id, "deployment_id", None) or getattr(obj, "_id", None)
    return str(getattr(deployment_id, "app_name", "-"))


def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.thread_time_ns()
        try:
            return function(self, *args, **kwargs)
        finally:
            spent = time.thread_time_ns() - start
            # Outside the measured span: what it costs is not the function's.
            key = (name, application_of(self))
            with _lock:
                totals = _totals.setdefault(key, [0, 0])
                totals[0] += 1
                totals[1] += spent

    return wrapper


def wrap(module: ModuleType, names: tuple[str, ...]) -> list[str]:
    """Wrap each Class.method of `module` that exists; returns those wrapped."""
    wrapped = []
    for name in names:
        class_name, method = name.split(".")
        cls = getattr(module, class_name, None)
        if cls is None or method not in vars(cls):
            continue
        setattr(cls, method, counted(name, vars(cls)[method]))
        wrapped.append(name)
    return wrapped


def snapshot() -> dict:
    """The totals as "Class.method" -> application -> calls and CPU seconds."""
    functions: dict[str, dict[str, dict[str, float]]] = {}
    with _lock:
        for (name, application), (calls, ns) in _totals.items():
            functions.setdefault(name, {})[application] = {"calls": calls, "cpu_s": ns / 1e9}
    return {"pid": os.getpid(), "written_at": time.time(), "functions": functions}


def _write_forever(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{os.getpid()}.json")
    while True:
        with open(path + ".tmp", "w") as out:
            json.dump(snapshot(), out)
        os.replace(path + ".tmp", path)
        time.sleep(WRITE_INTERVAL_S)


def _start_writer(directory: str) -> None:
    global _writer
    if _writer is None:
        _writer = threading.Thread(
            target=_write_forever, args=(directory,), name="health-cpu", daemon=True
        )
        _writer.start()


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds Serve's modules as the other finders do, and wraps their health
    functions once each module has run."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

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
            if wrap(module, names):
                _start_writer(self._directory)

        loader.exec_module = run_and_wrap  # type: ignore[union-attr,method-assign]
        return spec


if os.environ.get(DIR_ENV):
    sys.meta_path.insert(0, _WrapOnImport(os.environ[DIR_ENV]))
