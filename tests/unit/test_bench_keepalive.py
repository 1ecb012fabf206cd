"""bench-keepalive's run loop with the clusters and clients replaced: it
reports each kind and client count, and the pieces add up to the plan. No
Docker."""

from types import SimpleNamespace

from bench_offline import ClusterStandIn, offline
from progress_spy import record

from harness.bench import keepalive
from harness.experiment.history import Request

T = 1_700_000_000.0


class FakeCluster(ClusterStandIn):
    def __init__(self, config):
        self.head = SimpleNamespace(ip="10.0.0.2")

    def deploy(self, config):
        pass


async def closed_loop(host, port, count, connections, history, path, kind="short"):
    """Two requests, one connection."""
    history.add_request(Request(kind, T, T + 0.1, 200, None))
    history.add_request(Request(kind, T + 0.1, T + 0.2, 200, None))
    return 1


def test_the_run_loop_reports_each_kind_and_client_count(monkeypatch, tmp_path, capsys):
    offline(monkeypatch, keepalive, tmp_path)
    monkeypatch.setattr(keepalive, "Cluster", FakeCluster)
    monkeypatch.setattr(keepalive, "closed_loop", closed_loop)
    made = record(monkeypatch, keepalive)

    result = keepalive.bench_keepalive()

    assert set(result) == {"off", "on"}
    (progress,) = made
    loops_s = keepalive.REPEATS * keepalive.LOOP_S
    off = f"{keepalive.SETTING}=0"
    assert progress.begun[:5] == [
        (f"{off}: starting a cluster, deploying", 0.0),
        (f"{off}: short, 8 clients", loops_s),
        (f"{off}: short, 32 clients", loops_s),
        (f"{off}: stream, 8 clients", loops_s),
        (f"{off}: stream, 32 clients", loops_s),
    ]
    assert len(progress.begun) == 10
    assert progress.begun_s() == progress.planned_s
    lines = capsys.readouterr().err.splitlines()
    assert any(
        line.startswith("bench-keepalive [") and line.endswith(f"] {off}: stream, 8 clients")
        for line in lines
    )
    assert lines[-1] == "bench-keepalive: done in 0s"
