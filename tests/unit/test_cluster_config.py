"""A cluster's names, labels and port, and the order of its start-up, with the
engine's calls faked: no Docker. Two runs of one cluster name must not collide,
and a run removes only what it made. Also how a node's exported metrics are
read, with their labels."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest

from harness.cluster import engine, frontlb, runs
from harness.cluster.boundary import parse_samples, sample_total
from harness.cluster.cluster import RAY_STARTED, Cluster, ClusterConfig
from harness.core.errors import HarnessError


class FakeEngine:
    """The engine functions Cluster.up and down call, recording each call. Every
    container runs at once; the agent's `nodes` lists each node of its run alive."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.started: list[SimpleNamespace] = []

    def install(self, monkeypatch) -> FakeEngine:
        for name in (
            "create_network",
            "run_container",
            "create_container",
            "put_archive",
            "start",
            "ip_address",
            "status",
            "exec_in",
            "logs",
            "remove_labelled",
        ):
            monkeypatch.setattr(engine, name, getattr(self, name))
        monkeypatch.setattr(runs, "reap", self.reap)
        return self

    def reap(self):
        self.calls.append(("reap", {}))
        return 0, 0

    def create_network(self, name, labels, subnets):
        self.calls.append(("create_network", {"name": name, "labels": labels}))
        return SimpleNamespace(name=name, subnet=next(iter(subnets)))

    def _container(self, kind: str, name: str, labels: dict, **options):
        self.calls.append((kind, {"name": name, "labels": labels, **options}))
        handle = SimpleNamespace(
            name=name, ip=f"10.0.0.{len(self.started) + 2}", run=labels[engine.RUN_LABEL]
        )
        self.started.append(handle)
        return handle

    def run_container(self, image, command, *, name, labels, **options):
        return self._container("run_container", name, labels, command=command, **options)

    def create_container(self, image, command, *, name, labels, **options):
        return self._container("create_container", name, labels, command=command, **options)

    def put_archive(self, container, path, tar):
        self.calls.append(("put_archive", {"name": container.name, "path": path}))

    def start(self, container):
        pass

    def ip_address(self, container, network):
        return container.ip

    def status(self, container):
        return "running"

    def logs(self, container, tail):
        return f"Local node IP: {container.ip}\n{RAY_STARTED}\n"

    def exec_in(self, container, cmd, *, check=True):
        if cmd[-1] == "nodes":
            nodes = [
                {"Alive": True, "NodeManagerAddress": c.ip}
                for c in self.started
                if c.run == container.run
            ]
            return 0, json.dumps(nodes)
        return 0, ""

    def remove_labelled(self, cluster=None, run=None, *, racing=False):
        self.calls.append(("remove_labelled", {"cluster": cluster, "run": run}))
        return 0, 0

    def created(self) -> list[dict]:
        return [
            options
            for kind, options in self.calls
            if kind in ("create_network", "run_container", "create_container")
        ]


@pytest.fixture
def fake(monkeypatch) -> FakeEngine:
    return FakeEngine().install(monkeypatch)


def test_a_run_names_and_labels_everything_with_its_id_and_owner(fake):
    config = ClusterConfig(image="img", name="rayspot-stale", workers=1)
    cluster = Cluster(config).up()
    run = cluster.run
    assert [c["name"] for c in fake.created()] == [
        f"rayspot-stale-{run}-net",
        f"rayspot-stale-{run}-head",
        f"rayspot-stale-{run}-worker-1",
        f"rayspot-stale-{run}-lb",
    ]
    for created in fake.created():
        labels = created["labels"]
        # The base name stays the cluster label: `down --name` and the tests find runs by it.
        assert labels[engine.CLUSTER_LABEL] == "rayspot-stale"
        assert labels[engine.RUN_LABEL] == run
        assert labels[engine.OWNER_LABEL] == runs.this_owner()
        assert labels[engine.LABEL] == "1"
        assert engine.DETACHED_LABEL not in labels
    assert [n.name for n in cluster.nodes] == [
        f"rayspot-stale-{run}-head",
        f"rayspot-stale-{run}-worker-1",
    ]
    # Each node keeps its short hostname: the echo app reports it.
    assert [c.get("hostname") for c in fake.created()[1:]] == ["head", "worker-1", "lb"]


def test_the_network_subnet_is_user_set_from_the_run_s_own_name(fake):
    cluster = Cluster(ClusterConfig(image="img", workers=0)).up()
    name = f"rayspot-{cluster.run}-net"
    assert cluster._network.subnet == f"10.200.{sum(map(ord, name)) % 256}.0/24"


def test_dead_runs_are_reaped_before_anything_is_created(fake):
    Cluster(ClusterConfig(image="img", workers=0)).up()
    assert fake.calls[0][0] == "reap"
    assert sum(kind == "reap" for kind, _ in fake.calls) == 1


def test_two_runs_of_one_name_share_no_name(fake):
    first = Cluster(ClusterConfig(image="img", name="rayspot-spot", workers=0)).up()
    second = Cluster(ClusterConfig(image="img", name="rayspot-spot", workers=0)).up()
    assert first.run != second.run
    names = [c["name"] for c in fake.created()]
    assert len(names) == len(set(names)) == 6
    assert first.config.lb_port != second.config.lb_port


def test_the_lb_takes_a_free_port_unless_one_is_given(fake):
    config = ClusterConfig(image="img", workers=0)
    cluster = Cluster(config).up()
    port = cluster.config.lb_port
    assert config.lb_port is None  # the caller's config is left as it was
    assert port and cluster.url == f"http://127.0.0.1:{port}"
    lb = fake.created()[-1]
    assert lb["publish"] == {frontlb.LISTEN_PORT: ("127.0.0.1", port)}
    with socket.socket() as probe:  # nothing held it: the LB's engine can bind it
        probe.bind(("127.0.0.1", port))

    given = Cluster(ClusterConfig(image="img", workers=0, lb_port=port)).up()
    assert given.config.lb_port == port
    assert fake.created()[-1]["publish"] == {frontlb.LISTEN_PORT: ("127.0.0.1", port)}


def test_a_given_port_in_use_is_refused_before_anything_is_created(fake):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(HarnessError, match=f"port {port} on 127.0.0.1 is in use"):
            Cluster(ClusterConfig(image="img", lb_port=port)).up()
    assert fake.created() == []


def test_down_removes_this_run_only(fake):
    with Cluster(ClusterConfig(image="img", name="rayspot-spot", workers=0)) as cluster:
        pass
    assert fake.calls[-1] == ("remove_labelled", {"cluster": None, "run": cluster.run})
    assert cluster.nodes == [] and cluster.lb is None
    with pytest.raises(HarnessError, match="is not up"):
        _ = cluster.head


def test_a_detached_cluster_says_so_on_everything(fake):
    Cluster(ClusterConfig(image="img", workers=0, detached=True)).up()
    assert all(c["labels"][engine.DETACHED_LABEL] == "1" for c in fake.created())


def test_metric_samples_are_read_with_their_labels():
    text = "\n".join(
        [
            "# HELP ray_serve_haproxy_reloads_total HAProxy reloads",
            "# TYPE ray_serve_haproxy_reloads_total counter",
            'ray_serve_haproxy_reloads_total{cause="update",node_id="n1",outcome="ok"} 51.0',
            'ray_serve_haproxy_reloads_total{cause="drain",outcome="ok"} 2.0',
            "ray_serve_haproxy_reloads_total_created 1.7e9",
            "ray_serve_haproxy_membership_updates_total 89.0",
        ]
    )
    samples = parse_samples(text, "ray_serve_haproxy_reloads_total")
    assert [(s.labels, s.value) for s in samples] == [
        ({"cause": "update", "node_id": "n1", "outcome": "ok"}, 51.0),
        ({"cause": "drain", "outcome": "ok"}, 2.0),
    ]
    assert [s.value for s in parse_samples(text, "ray_serve_haproxy_membership_updates_total")] == [
        89.0
    ]
    assert parse_samples(text, "ray_serve_absent_total") == []
    assert sample_total(text, "ray_serve_haproxy_reloads_total") == 53.0
    assert sample_total(text, "ray_serve_absent_total") == 0


def _refuse(container, cmd, *, check=True):
    """The engine's answer to an exec in a container that is not running."""
    raise engine.NotRunning(f"`{cmd[0]}` cannot run in {container.name}: not running")


def _up_gives_up(monkeypatch, workers: int) -> str:
    """Start a cluster whose head has exited; the error, which must come
    without one more second of waiting."""
    monkeypatch.setattr("time.sleep", lambda s: pytest.fail("waited for a head that had exited"))
    with pytest.raises(HarnessError) as err:
        Cluster(ClusterConfig(image="img", name="rayspot-exit", workers=workers)).up()
    return str(err.value)


def test_a_head_that_exits_during_start_up_is_named_at_once_with_its_log(fake, monkeypatch):
    # The GCS port probe runs in the head; once the head has exited, the engine
    # refuses every exec. The wait must stop there, not run out its 60 s.
    monkeypatch.setattr(engine, "exec_in", _refuse)
    monkeypatch.setattr(engine, "status", lambda container: "exited")
    monkeypatch.setattr(engine, "logs", lambda container, tail: "ValueError: bad flag")
    message = _up_gives_up(monkeypatch, workers=0)
    assert "gave up waiting for the head's GCS" in message
    assert "-head is exited; last log lines:\nValueError: bad flag" in message


def test_a_head_that_exits_once_the_workers_started_ends_the_nodes_alive_wait(fake, monkeypatch):
    # Until the GCS answers, the agent's `nodes` may fail, and the wait asks
    # again. A head that has exited will never answer: the wait must stop on
    # the first refusal and name the head, not run out its 120 s.
    def head_gone_at_nodes(container, cmd, *, check=True):
        if cmd[-1] == "nodes":
            _refuse(container, cmd)
        return fake.exec_in(container, cmd, check=check)

    monkeypatch.setattr(engine, "exec_in", head_gone_at_nodes)
    monkeypatch.setattr(
        engine,
        "status",
        lambda container: "exited" if container.name.endswith("-head") else "running",
    )
    message = _up_gives_up(monkeypatch, workers=2)
    assert "gave up waiting for 3 Ray nodes alive" in message
    assert "-head is exited; last log lines:" in message
    assert "-worker-1 is" not in message
