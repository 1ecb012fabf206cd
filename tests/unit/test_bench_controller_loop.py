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


def table(capsys, sweeps, probe_costs) -> list[str]:
    """The push rows of the table for repeats whose (none, pull, push) sweeps
    and per-probe costs are given; pull sends 100 probes a second."""
    runs = [
        LoopCost(repeat, size, mode, sweep, 0.0, 100 if mode == "pull" else 0, 0.0).__dict__
        for repeat, modes in enumerate(sweeps)
        for size in (1000, 2000)
        for mode, sweep in zip(("none", "pull", "push"), modes, strict=True)
    ]
    calls = [
        {"repeat": repeat, "replicas": size, **RayCallCosts(probe_s=cost, batch_s=0).__dict__}
        for repeat, cost in enumerate(probe_costs)
        for size in (1000, 2000)
    ]
    print_controller_loop(
        {"period_s": 10.0, "replicas_per_node": 32, "grid_s": 1.0, "calls": calls, "runs": runs}
    )
    return [line for line in capsys.readouterr().out.splitlines() if "| push |" in line]


def test_each_repeat_is_judged_with_its_own_call_costs(capsys):
    # Pull: 0.01 + 100 x (100, 200, 400 us) = 0.02, 0.03, 0.05; push 0.003, 0.006,
    # 0.005: push / pull 0.15, 0.2, 0.1; with 'none' 0.002, 0.004, 0.003 taken
    # off: 1/18, 2/26, 2/47.
    rows = table(
        capsys,
        [(0.002, 0.01, 0.003), (0.004, 0.01, 0.006), (0.003, 0.01, 0.005)],
        [100e-6, 200e-6, 400e-6],
    )
    assert "| 0.150 (0.100-0.200) | 0.056 (0.043-0.077) | at most 0.2: met |" in rows[0]


def test_the_target_is_judged_on_the_worst_repeat(capsys):
    # push / pull 0.1, 0.15 and 0.3: the median meets 0.2, the worst does not.
    rows = table(
        capsys,
        [(0.001, 0.01, 0.002), (0.001, 0.01, 0.003), (0.001, 0.01, 0.006)],
        [100e-6] * 3,
    )
    assert "| 0.150 (0.100-0.300) |" in rows[0]
    assert "at most 0.2: not met" in rows[0]


@pytest.mark.parametrize(
    ("grid_s", "batches_per_s", "together"),
    [
        (1.0, 25.0, 25),  # 8,000 replicas: a grid step's batches at once
        (1.0, 3.125, 3),
        (1.0, 0.3, 1),
        (0.0, 25.0, 1),  # the grid off: one at a time
        (6.0, 25.0, 1),  # a 10 s hold under two steps is not aligned
        (3.0, 25.0, 62),  # a 10 s hold in four equal steps of 2.5 s
    ],
)
def test_batches_arrive_together_on_the_relays_send_grid(grid_s, batches_per_s, together):
    from harness.bench.controller_loop import batches_arriving_together

    assert batches_arriving_together(batches_per_s, grid_s) == together


def test_push_grid_pays_a_receipt_in_a_slots_group():
    calls = RayCallCosts(probe_s=300e-6, batch_s=1.5e-3, batch_grid_s=0.8e-3)
    push = LoopCost(0, 8000, "push", 0.01, 0.002, probes_per_s=0, batches_per_s=25)
    grid = LoopCost(0, 8000, "push-grid", 0.01, 0.002, probes_per_s=0, batches_per_s=25)
    assert total_cpu_s_per_s(push, calls) == pytest.approx(0.012 + 25 * 1.5e-3)
    assert total_cpu_s_per_s(grid, calls) == pytest.approx(0.012 + 25 * 0.8e-3)
    with pytest.raises(ValueError, match="slot's group"):
        total_cpu_s_per_s(grid, CALLS)


def four_mode_table(capsys, probe_s: float, batch_grid_s: float, together) -> list[str]:
    """The printed lines for one repeat at 4,000 and 8,000 replicas: every mode's
    sweep 0.01, pull 100 probes a second, both push modes 25 batches a second,
    a batch alone 1 ms; `together(size)` batches at once on the grid."""
    runs = [
        LoopCost(
            0,
            size,
            mode,
            0.01,
            0.0,
            100 if mode == "pull" else 0,
            25.0 if mode.startswith("push") else 0.0,
        ).__dict__
        for size in (4000, 8000)
        for mode in ("none", "pull", "push", "push-grid")
    ]
    calls = [
        {
            "repeat": 0,
            "replicas": size,
            "batches_together": together(size),
            "probe_s": probe_s,
            "batch_s": 1e-3,
            "batch_grid_s": batch_grid_s,
        }
        for size in (4000, 8000)
    ]
    print_controller_loop(
        {"period_s": 10.0, "replicas_per_node": 32, "grid_s": 1.0, "calls": calls, "runs": runs}
    )
    return capsys.readouterr().out.splitlines()


def test_each_push_mode_is_judged_against_pull(capsys):
    # Pull 0.01 + 100 x 1 ms = 0.11; push 0.01 + 25 x 1 ms = 0.035 (0.318);
    # push-grid 0.01 + 25 x 0.4 ms = 0.02 (0.182).
    lines = four_mode_table(capsys, probe_s=1e-3, batch_grid_s=0.4e-3, together=lambda _: 25)
    push = [line for line in lines if "| push |" in line]
    grid = [line for line in lines if "| push-grid |" in line]
    assert "| 25.0 (1) | 1000 (1000-1000) |" in push[1] and "| 0.318 (0.318-0.318) |" in push[1]
    assert "not met" in push[1]
    assert "| 25.0 (25) | 400 (400-400) |" in grid[1] and "| 0.182 (0.182-0.182) |" in grid[1]
    assert "at most 0.2: met" in grid[1]


def test_the_table_says_how_many_batches_arrived_at_once(capsys):
    lines = four_mode_table(
        capsys, probe_s=1e-4, batch_grid_s=1e-3, together=lambda size: size // 320
    )
    rows = [line for line in lines if "| push-grid |" in line]
    assert "| 25.0 (12) |" in rows[0] and "| 25.0 (25) |" in rows[1]


def test_the_spread_table_compares_each_spread_with_none(capsys):
    from harness.bench.controller_loop import print_slot_spread

    print_slot_spread(
        {
            "batches_at_once": 25,
            "slot_s": 1.0,
            "per_batch_s": [
                {"spread_ms": 0.0, "rounds": [600e-6, 700e-6, 650e-6]},
                {"spread_ms": 1000.0, "rounds": [1700e-6, 1600e-6, 1300e-6]},
            ],
        }
    )
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[1] == "| 0 | 650 (600-700) | 1.00 |"
    assert rows[2] == "| 1000 | 1600 (1300-1700) | 2.46 |"


def test_a_result_from_before_the_two_push_modes_is_refused():
    # Its "push" was measured on the grid; printed now, it would read as the
    # relays sending when their hold ends.
    with pytest.raises(ValueError, match="run make bench-controller-loop again"):
        print_controller_loop({"period_s": 10.0, "replicas_per_node": 32, "calls": [], "runs": []})


@pytest.mark.parametrize("text", ["5,0", "0", "0,5,5", "0,-1", "a,b"])
def test_spreads_need_a_zero_baseline_and_distinct_values(text):
    import argparse

    from harness.cli import _spreads_ms

    with pytest.raises(argparse.ArgumentTypeError):
        _spreads_ms(text)
    assert _spreads_ms("0,1,5,20") == (0.0, 1.0, 5.0, 20.0)


def test_relays_send_their_share_on_their_slots_with_the_spread():
    from types import SimpleNamespace

    from harness.bench import controller_loop

    calls = []

    def relay(index):
        def remote(*args):
            calls.append((index, args))
            return args[2]  # the share, as the batches the relay sent

        return SimpleNamespace(send=SimpleNamespace(remote=remote))

    relays = [relay(0), relay(1)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("ray.get", lambda refs: refs)
        sent = controller_loop._send_from_relays(
            relays, [3, 2], "controller", b"batch", 0.5, 4.0, in_turn=True, spread_s=0.02, seed=7
        )
        assert sent == 5
        # In turn: relay i on every 2nd slot from the i-th; each its own seed.
        assert [(i, args[2], args[3], args[4], args[5], args[7], args[8]) for i, args in calls] == [
            (0, 3, 0.5, 0, 2, 0.02, 7),
            (1, 2, 0.5, 1, 2, 0.02, 8),
        ]
        calls.clear()
        controller_loop._send_from_relays(
            relays, [3, 2], "controller", b"batch", 1.0, 4.0, in_turn=False
        )
        assert [(args[4], args[5], args[7]) for _, args in calls] == [(0, 1, 0.0), (0, 1, 0.0)]
