"""The controller's replica-shutdown metrics, read from a node's Prometheus
text into an observation and shown as a report row."""

from harness.cluster.images import ImageSpec
from harness.experiment.configs import RunConfig
from harness.experiment.history import History
from harness.scenarios.base import SHUTDOWN_COUNTERS, _shutdown_counters, shutdowns_counted

PATCHED = RunConfig(ImageSpec("2.60.0", "patched"))
STOCK = RunConfig(ImageSpec("2.60.0", "stock"))


def _buckets(deployment: str, phase: str, counts: dict[str, int]) -> list[str]:
    return [
        f'ray_serve_replica_shutdown_phase_ms_bucket{{deployment="{deployment}",le="{le}",'
        f'phase="{phase}"}} {n}.0'
        for le, n in counts.items()
    ]


TEXT = "\n".join(
    [
        "# HELP ray_serve_replica_force_kills_total Stopping replicas killed ...",
        "# TYPE ray_serve_replica_force_kills_total counter",
        'ray_serve_replica_force_kills_total{application="app",deployment="A"} 1.0',
        'ray_serve_replica_force_kills_total{application="app",deployment="B"} 2.0',
        'ray_serve_replica_shutdown_rejected_requests_total{deployment="A"} 3.0',
        *_buckets("A", "listener_closed", {"2000.0": 0, "5000.0": 0, "10000.0": 2, "+Inf": 2}),
        *_buckets("A", "requests_drained", {"5000.0": 0, "10000.0": 0, "20000.0": 1, "+Inf": 1}),
        *_buckets("B", "requests_drained", {"5000.0": 0, "10000.0": 1, "20000.0": 1, "+Inf": 1}),
        # Ray's sum comes from the buckets, not the values: not read.
        'ray_serve_replica_shutdown_phase_ms_sum{deployment="A",phase="listener_closed"} 15000.0',
    ]
)


def test_counters_add_up_over_deployments():
    counters = _shutdown_counters(TEXT)
    assert counters["force-kills"] == 3.0
    assert counters["rejected requests"] == 3.0
    assert counters["listener_closed le 10000.0"] == 2.0
    assert counters["requests_drained le 10000.0"] == 1.0
    assert counters["requests_drained le 20000.0"] == 2.0
    assert counters["requests_drained le +Inf"] == 2.0
    assert not any("sum" in key for key in counters)


def test_a_node_without_the_metrics_counts_nothing():
    assert _shutdown_counters("ray_serve_num_http_requests_total 4.0\n") == {
        "force-kills": 0.0,
        "rejected requests": 0.0,
    }


def _history(counters: dict[str, float] | None) -> History:
    history = History()
    if counters is not None:
        history.observe(SHUTDOWN_COUNTERS, counters, 1.0, target="head")
    return history


def test_the_row_shows_force_kills_and_the_bucket_range_of_each_phase():
    row = shutdowns_counted(PATCHED, _history(_shutdown_counters(TEXT)))
    assert row == (
        "3 force-killed; listener closed: 2 in 5-10 s; requests drained: 2 in 5-20 s; "
        "3 requests rejected after the drain"
    )


def test_stock_and_unrecorded_runs_say_so():
    assert shutdowns_counted(STOCK, _history(None)).startswith("nothing: stock Ray")
    assert shutdowns_counted(PATCHED, _history(None)) == "not recorded"
