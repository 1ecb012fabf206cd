"""What the scenarios read from the cluster and show as report rows: the
controller's replica-shutdown metrics (stale_worker_drain,
drain_window_admission), its health counters (health_failure), and the front
LB's error counters (streaming_drain)."""

from harness.cluster.images import ImageSpec
from harness.experiment.configs import RunConfig
from harness.experiment.health import health_counters
from harness.experiment.history import History
from harness.scenarios.base import (
    LB_ERRORS,
    SHUTDOWN_COUNTERS,
    _shutdown_counters,
    lb_errors,
    shutdowns_counted,
)
from harness.scenarios.health import COUNTED, _counted

PATCHED = RunConfig(ImageSpec("2.60.0", "patched"))
STOCK = RunConfig(ImageSpec("2.60.0", "stock"))


def _history(name: str, counters: dict[str, float] | None) -> History:
    """A history holding one observation `name` of `counters`, or none."""
    history = History()
    if counters is not None:
        history.observe(name, counters, 1.0, target="head")
    return history


def _buckets(deployment: str, counts: dict[str, int]) -> list[str]:
    return [
        f'ray_serve_replica_shutdown_drain_tail_ms_bucket{{deployment="{deployment}",le="{le}"}}'
        f" {n}.0"
        for le, n in counts.items()
    ]


TEXT = "\n".join(
    [
        "# HELP ray_serve_replica_force_kills_total Stopping replicas killed ...",
        "# TYPE ray_serve_replica_force_kills_total counter",
        'ray_serve_replica_force_kills_total{application="app",deployment="A"} 1.0',
        'ray_serve_replica_force_kills_total{application="app",deployment="B"} 2.0',
        'ray_serve_replica_shutdown_rejected_requests_total{deployment="A"} 3.0',
        *_buckets("A", {"500.0": 0, "1000.0": 0, "2500.0": 1, "+Inf": 1}),
        *_buckets("B", {"500.0": 0, "1000.0": 1, "2500.0": 1, "+Inf": 1}),
        # Ray's sum comes from the buckets, not the values: not read.
        'ray_serve_replica_shutdown_drain_tail_ms_sum{deployment="A"} 1500.0',
    ]
)


def test_counters_add_up_over_deployments():
    counters = _shutdown_counters(TEXT)
    assert counters["force-kills"] == 3.0
    assert counters["rejected requests"] == 3.0
    assert counters["drain tail le 1000.0"] == 1.0
    assert counters["drain tail le 2500.0"] == 2.0
    assert counters["drain tail le +Inf"] == 2.0
    assert not any("sum" in key for key in counters)


def test_a_node_without_the_metrics_counts_nothing():
    assert _shutdown_counters("ray_serve_num_http_requests_total 4.0\n") == {
        "force-kills": 0.0,
        "rejected requests": 0.0,
    }


def test_the_row_shows_force_kills_and_the_bucket_range_of_the_drain_tail():
    row = shutdowns_counted(PATCHED, _history(SHUTDOWN_COUNTERS, _shutdown_counters(TEXT)))
    assert row == (
        "3 force-killed; drain tail after the draining period: 2 in 0.5-2.5 s; "
        "3 requests rejected after the drain"
    )


def test_stock_and_unrecorded_runs_say_so():
    assert shutdowns_counted(STOCK, _history(SHUTDOWN_COUNTERS, None)).startswith(
        "nothing: stock Ray"
    )
    assert shutdowns_counted(PATCHED, _history(SHUTDOWN_COUNTERS, None)) == "not recorded"


PATCHED_TEXT = "\n".join(
    [
        'ray_serve_health_check_latency_ms_count{application="echo",deployment="Echo"} 7.0',
        'ray_serve_health_check_latency_ms_count{application="app2",deployment="B"} 1.0',
        'ray_serve_controller_health_report_batches_total{Component="core_worker"} 15.0',
        'ray_serve_controller_health_reports_total{Component="core_worker"} 60.0',
        'ray_serve_health_check_probes_deferred_total{deployment="Echo"} 57.0',
        'ray_serve_health_check_timeouts_not_charged_total{deployment="Echo"} 2.0',
        'ray_serve_health_check_timeouts_not_charged_total{deployment="B"} 1.0',
    ]
)


def test_health_counters_are_summed_over_deployments_and_zero_when_absent():
    assert health_counters(PATCHED_TEXT) == {
        "probes": 8.0,
        "batches": 15.0,
        "reports": 60.0,
        "deferred": 57.0,
        "not_charged": 3.0,
    }
    assert health_counters("") == {
        "probes": 0,
        "batches": 0,
        "reports": 0,
        "deferred": 0,
        "not_charged": 0,
    }


def test_the_health_row_shows_pushed_reports_only_where_there_are_some():
    assert _counted(_history(COUNTED, health_counters(PATCHED_TEXT))) == (
        "8 probes; 60 pushed reports in 15 calls; 57 probes deferred for a fresh report"
    )
    stock = 'ray_serve_health_check_latency_ms_count{deployment="Echo"} 46.0\n'
    assert _counted(_history(COUNTED, health_counters(stock))) == "46 probes"
    assert _counted(_history(COUNTED, None)) == "not recorded"


def test_the_front_lb_row_shows_nonzero_errors_by_node():
    errors = {
        "c-worker-1": {"econ": 0, "eresp": 1, "cli_abrt": 0, "srv_abrt": 0},
        "c-head": {"econ": 0, "eresp": 0, "cli_abrt": 0, "srv_abrt": 0},
    }
    assert lb_errors(_history(LB_ERRORS, errors)) == "c-worker-1: eresp 1"
    quiet = {"c-head": {"econ": 0, "eresp": 0, "cli_abrt": 0, "srv_abrt": 0}}
    assert lb_errors(_history(LB_ERRORS, quiet)) == "none"
    assert lb_errors(_history(LB_ERRORS, None)) == "not recorded"
