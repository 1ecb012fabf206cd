"""The arithmetic of bench-controller-loop's table."""

import pytest

from harness.bench.controller_loop import LoopCost, RayCallCosts, slope_per_1000, total_cpu_s_per_s

CALLS = RayCallCosts(probe_submit_s=100e-6, probe_reply_s=50e-6, batch_receive_s=20e-6)


def test_pull_pays_a_submit_and_a_reply_per_probe():
    pull = LoopCost(1000, "pull", 0.01, 0.0, probes_per_s=100, batches_per_s=0)
    assert total_cpu_s_per_s(pull, CALLS) == pytest.approx(0.01 + 100 * 150e-6)


def test_push_pays_its_handler_and_a_receipt_per_batch():
    push = LoopCost(1000, "push", 0.01, 0.002, probes_per_s=0, batches_per_s=3)
    assert total_cpu_s_per_s(push, CALLS) == pytest.approx(0.012 + 3 * 20e-6)


def test_slope_per_thousand_replicas():
    assert slope_per_1000([(1000, 0.01), (4000, 0.04), (8000, 0.08)]) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="two sizes"):
        slope_per_1000([(1000, 0.01), (1000, 0.02)])
