"""Ctrl-C at any point of a cluster's life leaves no container or network
behind: the harness is interrupted like a user would (SIGINT to the process)
while it creates the network, starts nodes, and deploys the app. A run killed
outright (SIGKILL, no teardown) leaves its containers, and the next run's
reaper removes them."""

import signal
import subprocess
import sys
import time

import pytest

from harness.cluster import engine, runs
from harness.core.paths import ROOT

pytestmark = pytest.mark.integration

NAME = "rayspot-interrupt"


def _output_when_it_exits(proc, timeout_s: float = 120) -> str:
    """The rest of an interrupted run's output once it has exited. One that
    has not exited within `timeout_s` fails the test with its threads' stacks
    (the CLI prints them on SIGUSR1) and what it printed, and is killed."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return out
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f"still running {timeout_s:.0f} s after Ctrl-C; its stacks and output:\n{out}")


def _start_harness(*args: str) -> subprocess.Popen:
    """`python -m harness ARGS` as a shell at a terminal starts it: with Ctrl-C's
    SIGINT at its default, even when this test runs where SIGINT is ignored (a
    background job, `nohup`), which every child would otherwise inherit."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


# When to interrupt: a fixed time into the start (the network and the head are
# being created), or a moment after a progress line (workers joining; the app
# deploying). Progress lines, not fixed times, because how long each phase
# takes depends on the machine's load.
@pytest.mark.parametrize(
    "after_line, delay_s", [(None, 1.5), ("head up at", 1.0), ("front load balancer on", 2.0)]
)
def test_ctrl_c_during_up_leaves_nothing(patched_image, after_line, delay_s):
    proc = _start_harness("up", "--name", NAME, "--image", "2.60.0-patched", "--port", "0")
    seen = []
    if after_line is not None:
        for line in proc.stdout:
            seen.append(line)
            if after_line in line:
                break
        assert proc.poll() is None, "".join(seen)
    time.sleep(delay_s)
    created = len(engine.labelled_containers(NAME))
    proc.send_signal(signal.SIGINT)
    out = "".join(seen) + _output_when_it_exits(proc)
    print(
        f"\ninterrupted {delay_s}s after {after_line or 'the start'!r} with {created} "
        f"containers up; exit {proc.returncode}"
    )
    assert engine.labelled_containers(NAME) == [], out
    assert engine.labelled_networks(NAME) == [], out
    if created:
        assert proc.returncode == 130, out


def test_ctrl_c_during_a_scenario_leaves_nothing(patched_image):
    """Interrupted in the middle of its first event, with load in flight."""
    proc = _start_harness("run", "stale_worker_drain")
    seen = []
    for line in proc.stdout:  # cluster up, app deployed: the first event starts
        seen.append(line)
        if "event 1 of" in line:
            break
    assert proc.poll() is None, "".join(seen)
    time.sleep(2)  # its priming requests sent, its pins in flight
    assert engine.labelled_containers("rayspot-stale"), "".join(seen)
    proc.send_signal(signal.SIGINT)
    out = "".join(seen) + _output_when_it_exits(proc)
    assert engine.labelled_containers("rayspot-stale") == [], out
    assert engine.labelled_networks("rayspot-stale") == [], out
    assert proc.returncode == 130, out


def test_a_killed_run_is_reaped_by_the_next(patched_image):
    """SIGKILL once the head is up: no teardown runs, the containers stay;
    the reaper every Cluster.up starts with (and `python -m harness down`)
    finds their owner gone and removes them, and only them."""
    name = "rayspot-killed"
    start = (
        "import time\n"
        "from harness.cluster.cluster import Cluster, ClusterConfig\n"
        f"Cluster(ClusterConfig(image={patched_image!r}, name={name!r}, workers=0)).up()\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", start],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "head up at" in line:
            break
    assert proc.poll() is None, "".join(seen)
    proc.kill()
    proc.wait(timeout=30)
    left = engine.labelled_containers(name)
    assert left, "".join(seen)
    assert all(not runs.owner_alive(c.labels[engine.OWNER_LABEL]) for c in left)
    containers, networks = runs.reap()
    assert containers >= len(left) and networks >= 1
    assert engine.labelled_containers(name) == []
    assert engine.labelled_networks(name) == []
