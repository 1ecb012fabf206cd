"""bench-controller-loop runs the patched controller's sweep on faked Ray
calls; at a small size, each mode must do what the controller does on a
cluster, or the figures at 8,000 replicas would measure something else."""

import pytest

from harness.bench.controller_loop import PERIOD_S, REPLICAS_PER_NODE, measure_mode

REPLICAS = 2 * REPLICAS_PER_NODE


def test_pull_probes_every_replica_about_once_a_period():
    cost = measure_mode(REPLICAS, "pull")
    # The sweep visits each replica twice a period and probes it once its
    # jittered period has passed.
    assert 0.5 * REPLICAS <= cost.probes_per_s * PERIOD_S <= 1.1 * REPLICAS
    assert cost.batches_per_s == 0 and cost.receive_cpu_s_per_s == 0


@pytest.mark.parametrize("mode", ["push", "push-grid"])
def test_push_defers_every_probe_to_the_relays_reports(mode):
    cost = measure_mode(REPLICAS, mode)
    assert cost.probes_per_s == 0
    # One batch per node per period.
    assert cost.batches_per_s * PERIOD_S == 2
    assert cost.receive_cpu_s_per_s > 0


def test_the_deployment_is_in_its_steady_state():
    # A HEALTHY deployment not in transition runs the loop's O(N) rank check,
    # and sizes its sweep from its own health-check period.
    from harness.bench.controller_loop import _FakeClock, _faked_ray, _state

    with _faked_ray(_FakeClock()):
        state = _state(REPLICAS, None, [0])
        state.check_and_update_replicas()
        assert state._curr_status_info.status.value == "HEALTHY"
        assert not state._in_transition
        assert state._reconcile_sweep_period_s() == PERIOD_S
        assert len(state._last_rank_membership_ids) == REPLICAS


def test_without_health_nothing_is_probed_or_received():
    cost = measure_mode(REPLICAS, "none")
    assert cost.probes_per_s == 0 and cost.batches_per_s == 0


def test_without_health_the_sweep_keeps_its_cadence():
    # The routing-stats period sizes the sweep too, so "none" visits replicas as
    # often as the other modes.
    from harness.bench.controller_loop import NO_HEALTH_PERIOD_S, _FakeClock, _faked_ray, _state

    with _faked_ray(_FakeClock()):
        state = _state(REPLICAS, None, [0], NO_HEALTH_PERIOD_S)
        assert state._reconcile_sweep_period_s() == PERIOD_S


def test_relays_on_the_send_grid_send_together():
    # 20 nodes, a 1 s grid step: each node's batch once a period, on a step
    # of its relay's slot, the nodes spread over the ten steps.
    from harness.bench.controller_loop import (
        LOOP_S,
        _FakeClock,
        _relay_batches,
        _send_slots,
        mode_grid_s,
        send_step_s,
    )

    assert send_step_s(mode_grid_s("push-grid")) == 1.0
    assert send_step_s(mode_grid_s("push")) is None
    batches = _relay_batches(20 * REPLICAS_PER_NODE, _FakeClock(), 1.0)
    per_loop = [len(next(batches)) for _ in range(round(PERIOD_S / LOOP_S))]
    slots = _send_slots(20, 10)
    assert per_loop == [
        slots.count(loop // 10) if loop % 10 == 0 else 0 for loop in range(len(per_loop))
    ]
    assert len(set(slots)) > 5


@pytest.mark.parametrize("batches_together", [3])
def test_rays_per_call_costs_are_measured_in_a_local_ray(batches_together):
    from harness.bench.controller_loop import measure_ray_calls

    calls = measure_ray_calls(
        probes_per_tick=8, batches_per_s=10.0, seconds=1.0, batches_together=batches_together
    )
    # Tens to hundreds of microseconds of process CPU each on this kind of
    # machine; a wrong idle subtraction or a count off by the samples would
    # land far outside.
    assert 10e-6 < calls.probe_s < 10e-3
    assert 10e-6 < calls.batch_s < 10e-3
    assert 10e-6 < calls.batch_grid_s < 10e-3
    # Every round is kept, with its idle baseline and the batches it sent.
    assert len(calls.rounds) == 3 and all(r["grid_batches"] > 0 for r in calls.rounds)
