"""The arithmetic of bench-controller-loop's table."""

import pytest

from harness.bench.controller_loop import (
    LoopCost,
    RayCallCosts,
    print_controller_loop,
    slope_per_1000,
    total_cpu_s_per_s,
)

CALLS = RayCallCosts(probe_s=300e-6, batch_s=500e-6)


def test_pull_pays_a_probe_and_its_reply_per_probe():
    pull = LoopCost(0, 1000, "pull", 0.01, 0.0, probes_per_s=100, batches_per_s=0)
    assert total_cpu_s_per_s(pull, CALLS) == pytest.approx(0.01 + 100 * 300e-6)


def test_push_pays_its_handler_and_a_receipt_per_batch():
    push = LoopCost(0, 1000, "push", 0.01, 0.002, probes_per_s=0, batches_per_s=3)
    assert total_cpu_s_per_s(push, CALLS) == pytest.approx(0.012 + 3 * 500e-6)


def test_slope_per_thousand_replicas():
    assert slope_per_1000([(1000, 0.01), (4000, 0.04), (8000, 0.08)]) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="two sizes"):
        slope_per_1000([(1000, 0.01), (1000, 0.02)])


def test_each_repeat_is_judged_with_its_own_call_costs(capsys):
    # Repeat 1's calls cost twice repeat 0's: its ratios differ, and the
    # target is judged on the worse one.
    runs = [
        LoopCost(repeat, size, mode, sweep, 0.0, probes, 0.0).__dict__
        for repeat in (0, 1)
        for size in (1000, 2000)
        for mode, sweep, probes in (("none", 0.01, 0), ("pull", 0.01, 100), ("push", 0.012, 0))
    ]
    calls = [RayCallCosts(probe_s=100e-6, batch_s=0).__dict__, RayCallCosts(200e-6, 0).__dict__]
    print_controller_loop({"period_s": 10.0, "replicas_per_node": 32, "calls": calls, "runs": runs})
    push_rows = [line for line in capsys.readouterr().out.splitlines() if "| push |" in line]
    # push / pull: 0.012 / 0.02 = 0.6 (repeat 0), 0.012 / 0.03 = 0.4 (repeat 1);
    # health only: 0.002 / 0.01 = 0.2 and 0.002 / 0.02 = 0.1.
    assert "0.500 (0.400-0.600)" in push_rows[0]
    assert "0.150 (0.100-0.200)" in push_rows[0]
    assert "not met" in push_rows[0]
