"""Each fault of the nemesis, run once against a real cluster under light
load: it records its events in the history and has the effect a user would
see (the node dies, freezes, drops off the network; the replica is replaced;
the controller stops; HAProxy reloads)."""

import asyncio
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from harness.cluster import appconfigs
from harness.cluster.cluster import SERVE_PORT, Cluster, ClusterConfig
from harness.core.errors import HarnessError
from harness.experiment import nemesis
from harness.experiment.history import History
from harness.experiment.load import HTTPConnection

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(patched_image):
    config = ClusterConfig(
        image=patched_image, name="rayspot-nemesis", workers=2, worker_resources={"w": 10}
    )
    with Cluster(config) as running:
        running.deploy(
            appconfigs.deploy_config(
                appconfigs.echo_app(
                    num_replicas=2,
                    max_replicas_per_node=None,
                    ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
                    health_check_period_s=1,
                    health_check_timeout_s=2,
                )
            )
        )
        running.wait_lb_ready()
        yield running


def _phases(history: History, fault: str) -> list[str]:
    return [e.phase for e in history.events if e.fault == fault]


def _reachable(ip: str) -> bool:
    async def probe():
        conn = HTTPConnection(ip, SERVE_PORT, 0)
        row = await conn.get("/-/healthz", "probe", 1.5)
        conn.close()
        return row.status is not None

    return asyncio.run(probe())


def test_reload_churn_reloads_haproxy(cluster):
    history = History()
    before = set(cluster.haproxy_pids(cluster.head))
    configs = [
        appconfigs.deploy_config(
            appconfigs.echo_app(
                num_replicas=n,
                max_replicas_per_node=None,
                ray_actor_options={"num_cpus": 0, "resources": {"w": 1}},
                health_check_period_s=1,
                health_check_timeout_s=2,
            )
        )
        for n in (3, 2)
    ]
    asyncio.run(nemesis.reload_churn(cluster, history, configs, interval_s=3))
    time.sleep(2)
    assert _phases(history, "reload_churn") == ["start", "mark", "mark", "end"]
    assert set(cluster.haproxy_pids(cluster.head)) - before, "HAProxy never reloaded"


def test_failing_health_check_gets_the_replica_replaced(cluster):
    history = History()
    replica = asyncio.run(nemesis.fail_health_check(history, "127.0.0.1", cluster.config.lb_port))
    assert _phases(history, "health_failure") == ["start"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = cluster.replica_names("echo", "Echo")
        if alive and not any(replica in name for name in alive):
            return
        time.sleep(1)
    pytest.fail(f"replica {replica} still alive 60 s after its health check started failing")


def test_controller_lag_stops_and_resumes_the_controller(cluster):
    history = History()
    pid = cluster.controller_pid()

    async def lag_and_look():
        task = asyncio.create_task(
            nemesis.controller_lag(cluster, history, cycles=1, stop_s=4, run_s=0)
        )
        # The fault looks the controller up first (a docker exec, ~2 s); look
        # once it says the controller is stopped.
        while "start" not in _phases(history, "controller_lag"):
            assert not task.done(), task
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)
        _, state = await asyncio.to_thread(
            cluster.exec_in, cluster.head, ["ps", "-o", "stat=", "-p", str(pid)]
        )
        await task
        return state.strip()

    assert asyncio.run(lag_and_look()).startswith("T")
    _, after = cluster.exec_in(cluster.head, ["ps", "-o", "stat=", "-p", str(pid)])
    assert not after.strip().startswith("T")
    assert _phases(history, "controller_lag") == ["start", "end"]


def test_partition_cuts_the_node_off_and_heals(cluster):
    history = History()
    node = cluster.workers[0]

    async def cut_and_look():
        task = asyncio.create_task(nemesis.partition_node(cluster, node, history, 4))
        await asyncio.sleep(1.5)
        during = await asyncio.to_thread(_reachable, node.ip)
        await task
        return during

    assert asyncio.run(cut_and_look()) is False
    assert _reachable(node.ip)
    assert _phases(history, "partition") == ["start", "end"]


async def _started(history: History, fault: str, timeout_s: float = 60):
    """The fault's start event, once it holds (a loaded host can take seconds
    to apply it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for event in history.events:
            if event.fault == fault and event.phase == "start":
                return event
        await asyncio.sleep(0.1)
    raise AssertionError(f"{fault} did not start within {timeout_s} s")


async def _end_early(fault: asyncio.Task) -> None:
    """Cut a held fault short: its finally undoes it."""
    fault.cancel()
    try:
        await fault
    except asyncio.CancelledError:
        pass


SINK_PORT = 18999
# Runs in the node: acknowledges each connection once it has read `size`
# bytes, until a connection sends nothing. A request to Serve would not do:
# its HAProxy may answer 503 before reading a body (the replicas' checks fail
# behind a slow link), so the answer would not wait for the bytes to cross.
SINK = f"""
import socket, sys
size = int(sys.argv[1])
server = socket.create_server(("0.0.0.0", {SINK_PORT}))
server.settimeout(300)
while True:
    conn, _ = server.accept()
    with conn:
        got = 0
        while got < size:
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += len(chunk)
        if got == 0:
            break
        conn.sendall(b"k")
"""


@contextmanager
def _sink(cluster: Cluster, node, size: int):
    """A byte sink listening in the node for the block's duration."""
    serving = threading.Thread(
        target=cluster.exec_in, args=(node, ["python", "-c", SINK, str(size)]), daemon=True
    )
    serving.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((node.ip, SINK_PORT), timeout=1) as conn:
                conn.sendall(b"x" * size)
                assert conn.recv(1) == b"k"
            break
        except OSError:
            assert time.monotonic() < deadline, "the sink in the node did not listen"
            time.sleep(0.2)
    try:
        yield
    finally:
        # A connection that sends nothing ends it.
        socket.create_connection((node.ip, SINK_PORT), timeout=30).close()
        serving.join(timeout=30)


def _upload_s(ip: str, size: int = 40_000) -> float:
    """Seconds to send `size` bytes to the node's sink and get its
    acknowledgement."""
    started = time.monotonic()
    with socket.create_connection((ip, SINK_PORT), timeout=30) as conn:
        conn.sendall(b"x" * size)
        assert conn.recv(1) == b"k"
    return time.monotonic() - started


def test_slow_link_throttles_the_node_and_restores_it(cluster):
    history = History()
    node = cluster.head
    with _sink(cluster, node, 40_000):
        _check_slow_link(cluster, node, history)


def _check_slow_link(cluster: Cluster, node, history: History) -> None:
    before = _upload_s(node.ip)

    async def throttle_and_time():
        task = asyncio.create_task(nemesis.slow_link(cluster, node, history, 64, 12))
        await _started(history, "slow_link")
        during = await asyncio.to_thread(_upload_s, node.ip)
        await task
        return during

    # 40 kB at 64 kbit/s is 5 s on the wire.
    during = asyncio.run(throttle_and_time())
    after = _upload_s(node.ip)
    assert during > 4.0 > 1.0 > max(before, after), (before, during, after)
    assert _phases(history, "slow_link") == ["start", "end"]


def _healthz_failures(ip: str, tries: int) -> int:
    """Of `tries` /-/healthz requests to the node with 1 s to answer, how
    many got no answer."""

    async def probe():
        failed = 0
        for i in range(tries):
            conn = HTTPConnection(ip, SERVE_PORT, i)
            row = await conn.get("/-/healthz", "probe", 1.0)
            conn.close()
            failed += row.status is None
        return failed

    return asyncio.run(probe())


def test_packet_loss_drops_some_of_the_nodes_traffic_and_stops(cluster):
    history = History()
    node = cluster.workers[1]

    async def lose_and_count():
        task = asyncio.create_task(nemesis.lossy_link(cluster, node, history, 0.6, 30))
        await _started(history, "packet_loss")
        during = await asyncio.to_thread(_healthz_failures, node.ip, 12)
        await _end_early(task)
        return during

    # A lost SYN or reply is retransmitted after 1 s: past the 1 s to answer.
    assert asyncio.run(lose_and_count()) >= 3
    assert _healthz_failures(node.ip, 10) == 0
    assert _phases(history, "packet_loss") == ["start", "end"]


def _busy_s(cluster, node) -> float:
    started = time.monotonic()
    cluster.exec_in(node, ["python3", "-c", "sum(range(2 * 10**6))"])
    return time.monotonic() - started


def test_cpu_starvation_slows_the_node_and_lifts(cluster):
    history = History()
    node = cluster.workers[1]
    before = _busy_s(cluster, node)

    async def starve_and_time():
        task = asyncio.create_task(nemesis.starve_cpu(cluster, node, history, 0.05, 60))
        await _started(history, "cpu_starvation")
        during = await asyncio.to_thread(_busy_s, cluster, node)
        await _end_early(task)
        return during

    during = asyncio.run(starve_and_time())
    after = _busy_s(cluster, node)
    assert during > 3 * max(before, after), (before, during, after)
    assert _phases(history, "cpu_starvation") == ["start", "end"]


def test_a_short_partition_stays_under_the_gcs_death_threshold(cluster):
    history = History()
    node = cluster.workers[0]
    death_after_s = cluster.node_death_after_s()
    assert death_after_s == 15.0  # Ray's defaults: 5 checks, 3 s apart
    # Too long: refused before the node is touched.
    with pytest.raises(HarnessError, match="before the GCS declares the node dead"):
        asyncio.run(nemesis.short_partition(cluster, node, history, death_after_s))
    assert history.events == []
    asyncio.run(nemesis.short_partition(cluster, node, history, 4))
    assert _phases(history, "partition") == ["start", "end"]
    assert _reachable(node.ip)
    assert node.ip in {n["NodeManagerAddress"] for n in cluster.alive_ray_nodes()}


def test_pause_freezes_the_node(cluster):
    history = History()
    node = cluster.workers[0]

    async def pause_and_look():
        task = asyncio.create_task(nemesis.pause_node(cluster, node, history, 3))
        await asyncio.sleep(1)
        status = await asyncio.to_thread(cluster.node_status, node)
        await task
        return status

    assert asyncio.run(pause_and_look()) == "paused"
    assert cluster.node_status(node) == "running"
    assert _phases(history, "pause") == ["start", "end"]


def test_a_hung_replica_is_stopped_and_resumed(cluster):
    history = History()

    async def hang_and_look():
        task = asyncio.create_task(nemesis.hang_replica(cluster, history, "echo", "Echo", 10))
        start = await _started(history, "hung_replica")
        node = await asyncio.to_thread(
            cluster.node_of,
            next(
                ray_node
                for ray_node, actors in cluster.replicas_by_node("echo", "Echo").items()
                if any(a["name"] == start.target for a in actors)
            ),
        )
        pid = start.detail["pid"]
        state = await asyncio.to_thread(cluster.exec_in, node, ["ps", "-o", "stat=", "-p", pid])
        await task
        return node, pid, state[1].strip()

    node, pid, state = asyncio.run(hang_and_look())
    assert state.startswith("T")  # stopped
    _, after = cluster.exec_in(node, ["ps", "-o", "stat=", "-p", pid], check=False)
    assert not after.strip().startswith("T")
    assert _phases(history, "hung_replica") == ["start", "end"]


def test_kill_takes_the_node_away(cluster):
    history = History()
    node = cluster.workers[1]
    node_id = cluster.ray_node_id(node)
    asyncio.run(nemesis.kill_node(cluster, node, history))
    assert cluster.node_status(node) == "exited"
    assert _phases(history, "kill") == ["start", "end"]
    deadline = time.monotonic() + 90
    while cluster.ray_node(node_id)["Alive"]:
        assert time.monotonic() < deadline, "the GCS never declared the killed node dead"
        time.sleep(2)


def test_a_replacement_worker_joins_without_a_failed_request(cluster):
    """The soak replaces every preempted node. The new node has no Serve proxy
    yet, so the front LB must not send it a request before its health check
    passes: HAProxy 2.8 counts a server it has just enabled as UP ("UP 1/2"),
    which cost 3 requests here before add_worker registered it drained and down."""
    from harness.experiment.load import LoadSpec, open_loop

    history = History()

    async def join_under_load():
        load = asyncio.create_task(
            open_loop(
                "127.0.0.1",
                cluster.config.lb_port,
                LoadSpec(rate=40, duration_s=20, connections=16),
                history,
            )
        )
        await asyncio.sleep(2)
        node = await asyncio.to_thread(cluster.add_worker)
        await load
        return node

    node = asyncio.run(join_under_load())
    assert cluster.ray_node_id(node)
    assert cluster.lb_servers()[node.name] == "DOWN"  # no Serve proxy there yet
    failed = [(r.status, r.error) for r in history.requests if r.error]
    assert len(history.requests) > 500 and not failed, failed
