"""Scenarios: a cluster, an app, load and faults composed into one experiment,
run against several images side by side and judged from the recorded history.

    python -m harness run NAME --image 2.59.0-stock --image 2.60.0-patched
"""

from harness.core.errors import HarnessError
from harness.core.pin import load_pin
from harness.scenarios.base import Scenario, ScenarioOutcome, node_env, run_scenario
from harness.scenarios.health import (
    ControllerLag,
    HealthFailure,
    HungReplica,
    SlowHeadLink,
    SlowWorkerLink,
)
from harness.scenarios.membership_churn import MembershipChurn
from harness.scenarios.request_overrun import RequestOverrun
from harness.scenarios.spot_preemption import SpotPreemption
from harness.scenarios.stale_worker import DrainWindowAdmission, StaleWorkerDrain
from harness.scenarios.streaming_drain import StreamingDrain
from harness.scenarios.websocket_drain import WebSocketDrain

SCENARIOS = {
    s.name: s
    for s in (
        StaleWorkerDrain,
        DrainWindowAdmission,
        SpotPreemption,
        HealthFailure,
        ControllerLag,
        SlowHeadLink,
        SlowWorkerLink,
        HungReplica,
        RequestOverrun,
        MembershipChurn,
        StreamingDrain,
        WebSocketDrain,
    )
}

__all__ = ["SCENARIOS", "ScenarioOutcome", "node_env", "run_scenario", "scenario_named"]


def scenario_named(name: str) -> type[Scenario]:
    """The scenario class of that name; an unknown name is an error listing the known."""
    if name not in SCENARIOS:
        raise HarnessError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


def scenario_list() -> str:
    """One line per scenario: its name, what it exercises and the images it
    compares when none are given (`run --help` and README.md show it)."""
    pin = load_pin()
    releases = {"ray": pin.ray, "baseline": pin.baseline}
    lines = []
    for name, scenario in SCENARIOS.items():
        runs_on = " vs ".join(f"{releases[r].version} {flavor}" for r, flavor in scenario.runs_on)
        lines.append(f"  {name:<24} {scenario.title} ({runs_on})")
    return "\n".join(lines)
