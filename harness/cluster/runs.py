"""Runs on one Docker engine: which run made each container and network, whether
that run's process is still alive, and the reaper that removes what dead runs left.

Every Cluster is one run. Its id is in every name the run gives (so two runs of
one scenario on one host never collide) and in the `rayspot.run` label; its
owner, the process that started it, is in `rayspot.owner` as HOST:PID:START
(START: when that process started, so a pid the kernel has since given to
another process does not pass for the owner). A run that died without tearing
down (SIGKILL, a killed CI job) leaves resources whose owner is gone; the next
run's start, or `python -m harness down`, removes them, as testcontainers'
reaper removes what a dead test session left. A cluster `python -m harness up`
starts is meant to outlive that process (`rayspot.detached`): only `down --name`
or `down --all` removes it.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from harness.cluster import engine

T = TypeVar("T")
R = TypeVar("R")


def new_run_id() -> str:
    """Eight hex digits: short enough for container names, and two runs drawing
    the same one is a one-in-four-billion chance."""
    return secrets.token_hex(4)


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of a process, from
    /proc/PID/stat; None where there is no /proc or the process is not there."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces: count fields after it.
    fields = text.rsplit(")", 1)[1].split()
    try:
        return fields[0], fields[19]
    except IndexError:
        return None


def this_owner() -> str:
    """The owner label of a run this process starts."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    return f"{socket.gethostname()}:{pid}:{stat[1] if stat else ''}"


def _parse_owner(owner: str | None) -> tuple[str, int, str] | None:
    if owner is None:
        return None
    try:
        host, pid, start = owner.rsplit(":", 2)
        return host, int(pid), start
    except ValueError:
        return None


def owner_alive(owner: str | None, host: str | None = None) -> bool:
    """Whether the process that owns a run may still be running. False only
    when that is certain: the owner ran on this host (`host`, by default this
    machine's name) and no process has its pid, or the one that has it started
    at another time (the pid was reused), or it has exited and awaits its
    parent (a zombie). An owner on another host, or a label this harness did
    not write, is never judged dead: it is not this host's to remove."""
    parsed = _parse_owner(owner)
    if parsed is None:
        return True
    owner_host, pid, start = parsed
    if owner_host != (host or socket.gethostname()) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    stat = _proc_stat(pid)
    if stat is None:  # no /proc (macOS): the pid exists, and that is all we know
        return True
    state, started = stat
    if state == "Z":
        return False
    return not start or started == start


def abandoned(labels: dict[str, str], host: str | None = None) -> bool:
    """Whether a resource belongs to a run that is gone and will not come back
    for it: the reaper removes exactly these."""
    return (
        engine.RUN_LABEL in labels
        and labels.get(engine.DETACHED_LABEL) != "1"
        and not owner_alive(labels.get(engine.OWNER_LABEL), host)
    )


def reap() -> tuple[int, int]:
    """Remove the containers and networks of every run on this host whose
    owner process is gone. Returns (containers, networks) removed. Live runs,
    detached clusters and other hosts' runs are left alone."""
    found: list[engine.Container | engine.Network] = [
        *engine.labelled_containers(),
        *engine.labelled_networks(),
    ]
    dead = sorted({r.labels[engine.RUN_LABEL] for r in found if abandoned(r.labels)})
    containers = networks = 0
    for run in dead:
        removed = engine.remove_labelled(run=run, racing=True)
        containers, networks = containers + removed[0], networks + removed[1]
    return containers, networks


def remove_mine() -> tuple[int, int]:
    """Remove every container and network this process started, whichever of
    its runs (threads) made them: what an interrupted process tears down when
    its runs cannot unwind their own clusters."""
    mine = this_owner()
    found: list[engine.Container | engine.Network] = [
        *engine.labelled_containers(),
        *engine.labelled_networks(),
    ]
    owned = sorted(
        {r.labels[engine.RUN_LABEL] for r in found if r.labels.get(engine.OWNER_LABEL) == mine}
    )
    containers = networks = 0
    for run in owned:
        removed = engine.remove_labelled(run=run, racing=True)
        containers, networks = containers + removed[0], networks + removed[1]
    return containers, networks


def owner_summary(labels: dict[str, str]) -> str:
    """Who owns a resource, for `python -m harness status`: `kept` (detached),
    `pid N`, `pid N gone` (the reaper will remove it), another host's name, or
    `-` for a resource with no owner label."""
    if labels.get(engine.DETACHED_LABEL) == "1":
        return "kept"
    parsed = _parse_owner(labels.get(engine.OWNER_LABEL))
    if parsed is None:
        return "-"
    host, pid, _ = parsed
    if host != socket.gethostname():
        return host
    return f"pid {pid}" if owner_alive(labels[engine.OWNER_LABEL]) else f"pid {pid} gone"


def side_by_side(run: Callable[[int, T], R], plan: Sequence[T], parallel: int) -> list[R]:
    """`run(order, item)` for every item of `plan`, `parallel` at a time, each
    on clusters of its own; the results in plan order. With `parallel` 1 they
    run one after the other in this thread. Otherwise they run in daemon
    threads and this thread only waits, so Ctrl-C reaches it: it then removes
    every cluster this process started (a run's own `with Cluster` cannot
    unwind from another thread) and re-raises. The first error stops new runs
    and is raised once the runs in flight are done."""
    if parallel <= 1:
        return [run(order, item) for order, item in enumerate(plan)]
    results: dict[int, R] = {}
    errors: list[BaseException] = []
    pending = list(enumerate(plan))
    running: list[threading.Thread] = []

    def work(order: int, item: T) -> None:
        try:
            results[order] = run(order, item)
        except BaseException as exc:  # re-raised in the main thread
            errors.append(exc)

    try:
        while (pending or running) and not errors:
            running = [t for t in running if t.is_alive()]
            while pending and len(running) < parallel:
                order, item = pending.pop(0)
                thread = threading.Thread(
                    target=work, args=(order, item), daemon=True, name=f"run-{order}"
                )
                thread.start()
                running.append(thread)
            time.sleep(0.2)
        for thread in running:  # the others' errors wait for the runs in flight
            thread.join()
    except KeyboardInterrupt:
        remove_mine()
        raise
    if errors:
        raise errors[0]
    return [results[order] for order in sorted(results)]
