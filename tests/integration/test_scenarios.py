"""The scenarios, each on its images side by side. A scenario asserts the
comparison it claims (for example: the baseline fails in every event and the
fix never does), so a run that cannot fail on the baseline fails here."""

import pytest

from harness.scenarios import SCENARIOS, run_scenario

pytestmark = pytest.mark.integration


# controller_lag and stuck_receiver run (python -m harness run NAME) but are not here
# yet: neither has been seen failing where it should. At its timings stock 2.60.0
# kills no replica in controller_lag either, and stuck_receiver has not been run with
# the stuck bound taken out (a SIGSTOPped controller may still resolve the queued
# pushes when it resumes, so it may pass without the bound).
@pytest.mark.parametrize("name", ["stale_worker_drain", "spot_preemption", "health_failure"])
def test_scenario(name):
    outcome = run_scenario(SCENARIOS[name]())
    print("\n" + "\n".join(outcome.findings) + f"\n({outcome.wall_s:.0f}s, "
          f"report {outcome.report['md']})")
    assert outcome.as_expected, outcome.findings
