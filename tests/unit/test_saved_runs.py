"""Real runs, judged again: each folder of tests/unit/saved_runs/ holds the
gzipped histories of one scenario's run on a real cluster and the report.json
that run wrote while its cluster was up. `analyze` must reach the same
verdicts, checks, facts and findings from the histories alone.

A folder is refreshed only from a new live run (`python -m harness run NAME`,
then copy its report.json and gzip its histories here), never by analyzing
the old histories again: the recorded report is what the judgement is held to.
"""

import json
from pathlib import Path

import pytest

from harness.scenarios import SCENARIOS
from harness.scenarios.analyze import analyze

SAVED = Path(__file__).parent / "saved_runs"


def test_every_scenario_has_a_saved_run():
    assert sorted(p.name for p in SAVED.iterdir() if p.is_dir()) == sorted(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_saved_run_is_judged_again_to_its_recorded_report(name, tmp_path):
    folder = SAVED / name
    recorded = json.loads((folder / "report.json").read_text())
    outcome = analyze(folder, tmp_path)
    again = json.loads(outcome.report["json"].read_text())
    for key in ("title", "runs", "sections", "judgement"):
        assert again[key] == recorded[key], key
    assert outcome.as_expected == recorded["judgement"]["as_expected"]
