"""Which runs are gone, and what the reaper removes: owner labels judged against
this host's processes, and the engine's listings faked. No Docker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cluster import engine, runs

HOST = socket.gethostname()
# Above Linux's highest possible pid_max (2**22), and macOS's: no process has it.
NO_SUCH_PID = 2**22 + 1
LINUX = Path("/proc/self/stat").exists()


def test_this_process_owns_what_it_starts_and_is_alive():
    owner = runs.this_owner()
    host, pid, start = owner.rsplit(":", 2)
    assert (host, int(pid)) == (HOST, os.getpid())
    assert bool(start) is LINUX
    assert runs.owner_alive(owner)


def test_an_owner_whose_pid_no_process_has_is_gone():
    assert not runs.owner_alive(f"{HOST}:{NO_SUCH_PID}:123")
    assert not runs.owner_alive(f"{HOST}:{NO_SUCH_PID}:")


def test_an_owner_that_exited_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not runs.owner_alive(f"{HOST}:{child.pid}:")


@pytest.mark.skipif(not LINUX, reason="start times come from /proc")
def test_a_reused_pid_is_not_the_owner():
    _, pid, start = runs.this_owner().rsplit(":", 2)
    assert runs.owner_alive(f"{HOST}:{pid}:{start}")
    assert not runs.owner_alive(f"{HOST}:{pid}:{int(start) + 1}")
    assert runs.owner_alive(f"{HOST}:{pid}:")  # no start recorded: the pid is all we know


@pytest.mark.skipif(not LINUX, reason="process states come from /proc")
def test_an_owner_that_exited_unreaped_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        # Not child.poll(): that would reap the zombie this test needs.
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        assert not runs.owner_alive(f"{HOST}:{child.pid}:")
    finally:
        child.wait()


@pytest.mark.parametrize(
    "owner",
    [f"elsewhere:{NO_SUCH_PID}:1", None, "", "not-an-owner", f"{HOST}:x:1", f"{HOST}:0:"],
    ids=["another host", "no label", "empty", "no fields", "pid not a number", "pid 0"],
)
def test_an_owner_that_cannot_be_judged_here_counts_as_alive(owner):
    assert runs.owner_alive(owner)


def _labels(run: str, owner: str | None, detached: bool = False) -> dict[str, str]:
    labels = {engine.LABEL: "1", engine.CLUSTER_LABEL: "rayspot-stale", engine.RUN_LABEL: run}
    if owner is not None:
        labels[engine.OWNER_LABEL] = owner
    if detached:
        labels[engine.DETACHED_LABEL] = "1"
    return labels


DEAD = f"{HOST}:{NO_SUCH_PID}:"


def test_abandoned_is_a_dead_owners_run_unless_detached():
    assert runs.abandoned(_labels("r1", DEAD))
    assert not runs.abandoned(_labels("r1", runs.this_owner()))
    assert not runs.abandoned(_labels("r1", DEAD, detached=True))
    no_run = _labels("r1", DEAD)
    del no_run[engine.RUN_LABEL]
    assert not runs.abandoned(no_run)  # made by a harness before runs: not judged


def test_reap_removes_exactly_the_runs_of_dead_owners(monkeypatch):
    containers = [
        engine.Container("a-dead1-head", "exited", _labels("dead1", DEAD), None),
        engine.Container("a-dead1-lb", "running", _labels("dead1", DEAD), None),
        engine.Container("a-live-head", "running", _labels("live", runs.this_owner()), None),
        engine.Container("a-kept-head", "running", _labels("kept", DEAD, detached=True), None),
        engine.Container("a-far-head", "running", _labels("far", f"far:{NO_SUCH_PID}:"), None),
    ]
    # A run that died while creating its network has nothing else.
    networks = [
        engine.Network("a-dead1-net", _labels("dead1", DEAD)),
        engine.Network("a-dead2-net", _labels("dead2", DEAD)),
        engine.Network("a-live-net", _labels("live", runs.this_owner())),
    ]
    removed = []

    def remove_labelled(cluster=None, run=None, *, racing=False):
        assert cluster is None and racing
        removed.append(run)
        return (
            sum(c.labels[engine.RUN_LABEL] == run for c in containers),
            sum(n.labels[engine.RUN_LABEL] == run for n in networks),
        )

    monkeypatch.setattr(engine, "labelled_containers", lambda: containers)
    monkeypatch.setattr(engine, "labelled_networks", lambda: networks)
    monkeypatch.setattr(engine, "remove_labelled", remove_labelled)
    assert runs.reap() == (2, 2)
    assert removed == ["dead1", "dead2"]


def test_status_says_whose_each_container_is():
    assert runs.owner_summary(_labels("r", DEAD, detached=True)) == "kept"
    assert runs.owner_summary(_labels("r", DEAD)) == f"pid {NO_SUCH_PID} gone"
    assert runs.owner_summary(_labels("r", runs.this_owner())) == f"pid {os.getpid()}"
    assert runs.owner_summary(_labels("r", "far:12:")) == "far"
    assert runs.owner_summary(_labels("r", None)) == "-"


def test_run_ids_are_fresh_and_fit_a_name():
    ids = {runs.new_run_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(len(i) == 8 and i.isalnum() and i == i.lower() for i in ids)


def test_side_by_side_returns_results_in_plan_order_and_overlaps():
    import threading

    at_once = 0
    most = 0
    lock = threading.Lock()

    def run(order: int, item: float) -> tuple[int, float]:
        nonlocal at_once, most
        with lock:
            at_once += 1
            most = max(most, at_once)
        time.sleep(item)
        with lock:
            at_once -= 1
        return order, item

    # The first item finishes last: the results still come in plan order.
    assert runs.side_by_side(run, [0.6, 0.1, 0.1], parallel=2) == [(0, 0.6), (1, 0.1), (2, 0.1)]
    assert most == 2


def test_side_by_side_one_at_a_time_runs_in_this_thread():
    import threading

    threads = runs.side_by_side(lambda order, item: threading.current_thread(), [1, 2], 1)
    assert threads == [threading.current_thread()] * 2


def test_side_by_side_raises_the_first_error_and_starts_nothing_after_it():
    started: list[int] = []

    def run(order: int, item: str) -> str:
        started.append(order)
        if item == "bad":
            raise ValueError("the run broke")
        time.sleep(0.3)
        return item

    with pytest.raises(ValueError, match="the run broke"):
        runs.side_by_side(run, ["bad", "ok", "never"], parallel=2)
    assert 2 not in started
