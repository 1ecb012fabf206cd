"""bench-controller-loop runs the patched controller's sweep on faked Ray
calls; at a small size, each mode must do what the controller does on a
cluster, or the figures at 8,000 replicas would measure something else."""

from harness.bench.controller_loop import PERIOD_S, REPLICAS_PER_NODE, measure_mode

REPLICAS = 2 * REPLICAS_PER_NODE


def test_pull_probes_every_replica_about_once_a_period():
    cost = measure_mode(REPLICAS, "pull")
    # The sweep visits each replica twice a period and probes it once its
    # jittered period has passed.
    assert 0.5 * REPLICAS <= cost.probes_per_s * PERIOD_S <= 1.1 * REPLICAS
    assert cost.batches_per_s == 0 and cost.receive_cpu_s_per_s == 0


def test_push_defers_every_probe_to_the_relays_reports():
    cost = measure_mode(REPLICAS, "push")
    assert cost.probes_per_s == 0
    # One batch per node per period.
    assert cost.batches_per_s * PERIOD_S == 2
    assert cost.receive_cpu_s_per_s > 0
