"""`analyze` judges a saved run again from its histories alone and reaches the
same outcome, checks and report; a path that is not a saved run is exit 2."""

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.cluster.images import ImageSpec
from harness.core.errors import HarnessError
from harness.experiment import report
from harness.experiment.configs import RUNTIME_SERVERS_MASTER_WORKER
from harness.experiment.history import History, Request, history_name
from harness.scenarios.analyze import ANALYSIS_DIR, analyze
from harness.scenarios.base import judge_runs
from harness.scenarios.membership_churn import MembershipChurn
from harness.scenarios.request_overrun import LADDERS, RequestOverrun
from harness.scenarios.stale_worker import StaleFacts

T = 1_700_000_000.0


def _overrun_history(label: str, statuses: dict[str, int], order: int = 0) -> History:
    """request_overrun's record: per ladder, overruns answered `statuses[ladder]`
    after ~3 s and 1 s controls that succeeded, plus one observation."""
    history = History(
        {
            "label": label,
            "image": f"rayspot-node:{label}",
            "order": order,
            "scenario": RequestOverrun.name,
            "options": {"requests": 2},
            "ladders": LADDERS,
            "wall_s": 60.0,
        }
    )
    for n, ladder in enumerate(LADDERS):
        for i in range(2):
            start = T + 10 * n + i
            history.add_request(
                Request(
                    f"overrun, {ladder}",
                    start,
                    start + 3.01,
                    statuses[ladder],
                    str(statuses[ladder]),
                )
            )
            history.add_request(Request(f"control, {ladder}", start, start + 1.0, 200, None))
    history.observe("note", {"anything": [1, 2]}, T + 1)
    return history


def _recorded(tmp_path: Path, histories: list[History]) -> tuple[Path, dict]:
    """What run_scenario leaves: the histories, saved, and the report judged
    from the live objects."""
    for history in histories:
        history.save(tmp_path / history_name(history.meta["label"]))
    outcome = judge_runs(RequestOverrun(requests=2), histories, tmp_path)
    return tmp_path, json.loads(outcome.report["json"].read_text())


def _same_report(original: Path, again: Path) -> None:
    assert json.loads((again / report.JSON_NAME).read_text()) == json.loads(
        (original / report.JSON_NAME).read_text()
    )
    assert (again / report.MD_NAME).read_text() == (original / report.MD_NAME).read_text()


def test_a_saved_run_is_judged_again_to_the_same_report(tmp_path):
    folder, live = _recorded(
        tmp_path, [_overrun_history("2.60.0-stock", {"B holds": 408, "B violated": 500})]
    )
    assert live["judgement"]["as_expected"] is True
    checks = live["judgement"]["runs"]["2.60.0-stock"]["checks"]
    assert checks[0]["what"].startswith("the record is complete") and checks[0]["held"]
    outcome = analyze(folder)
    assert outcome.as_expected and outcome.report["json"].parent == folder / ANALYSIS_DIR
    _same_report(folder, folder / ANALYSIS_DIR)


def test_a_failed_run_stays_failed_and_exits_1(tmp_path, capsys):
    folder, live = _recorded(
        tmp_path, [_overrun_history("2.60.0-stock", {"B holds": 500, "B violated": 500})]
    )
    assert live["judgement"]["as_expected"] is False
    assert main(["analyze", str(folder)]) == 1
    _same_report(folder, folder / ANALYSIS_DIR)
    assert "not what the scenario claims" in capsys.readouterr().err


def test_a_lost_row_fails_the_run_when_judged_again(tmp_path):
    history = _overrun_history("2.60.0-stock", {"B holds": 408, "B violated": 500})
    history.schedule()  # a request that never got its row
    folder, live = _recorded(tmp_path, [history])
    assert live["judgement"]["as_expected"] is False
    outcome = analyze(folder / history_name("2.60.0-stock"), tmp_path / "again")
    assert not outcome.as_expected
    assert any("incomplete" in f for f in outcome.findings)


def test_one_history_of_a_scenario_is_judged_alone_and_says_so(tmp_path):
    folder, _ = _recorded(
        tmp_path, [_overrun_history("2.60.0-stock", {"B holds": 408, "B violated": 500})]
    )
    outcome = analyze(folder / history_name("2.60.0-stock"), tmp_path / "alone")
    assert outcome.as_expected
    assert "judged on its own" in outcome.findings[-1]


def test_two_runs_with_one_label_are_refused(tmp_path):
    history = _overrun_history("2.60.0-stock", {"B holds": 408, "B violated": 500})
    history.save(tmp_path / "history-2.60.0-stock.jsonl")
    history.save(tmp_path / "history-2.60.0-stock.jsonl.bak")
    with pytest.raises(HarnessError, match="both runs labelled"):
        analyze(tmp_path)


def test_soak_style_histories_are_judged_by_their_verdicts(tmp_path):
    claim = History({"label": "ladder #1"})
    other = History({"label": "defaults #1", "claim": False})
    for h in (claim, other):
        h.add_request(Request("short", T, T + 0.1, 200, None))
    other.add_request(Request("short", T, T + 0.1, None, "reset"))
    for h in (claim, other):
        h.save(tmp_path / history_name(h.meta["label"]))
    outcome = analyze(tmp_path)
    assert outcome.as_expected
    assert "defaults #1: FAILED (a comparison, not judged)" in outcome.findings


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist"),
        ("", "holds no history"),
        ("not json\n", "is not a history row"),
        ('{"type": "meta", "label": "old"}\n', "saved before the harness counted"),
        (b"\xff\xfe\x00binary", "cannot read"),
    ],
)
def test_not_a_saved_run_is_a_clear_error(tmp_path, content, message, capsys):
    target = tmp_path / "missing"
    if content is not None:
        target = tmp_path
        if content:
            path = tmp_path / "history-x.jsonl"
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
    with pytest.raises(HarnessError, match=message):
        analyze(target)
    assert main(["analyze", str(target)]) == 2


def test_histories_of_two_scenarios_are_refused(tmp_path):
    a = _overrun_history("a", {"B holds": 408, "B violated": 500})
    b = History({"label": "b", "scenario": "spot_preemption"})
    a.save(tmp_path / "history-a.jsonl")
    b.save(tmp_path / "history-b.jsonl")
    with pytest.raises(HarnessError, match="mixes the histories"):
        analyze(tmp_path)


def test_a_run_s_configuration_comes_back_from_its_meta():
    churn = MembershipChurn()
    flags_on = churn.configs(ImageSpec("2.60.0", "patched"))[-1]
    assert flags_on.label == "2.60.0-patched flags on"
    assert flags_on.sets(RUNTIME_SERVERS_MASTER_WORKER)
    saved = History({"label": "renamed by hand", "config": flags_on.to_meta()})
    assert churn.config_of(saved) == flags_on


def test_a_history_saved_without_its_configuration_is_known_by_its_label():
    churn = MembershipChurn()
    assert churn.config_of(History({"label": "2.60.0-patched flags on"})).sets(
        RUNTIME_SERVERS_MASTER_WORKER
    )
    assert churn.config_of(History({"label": "2.60.0-stock"})).env == {}
    for label in ("2.60.0-patched flags sideways", "not an image"):
        with pytest.raises(HarnessError, match="another version of the harness"):
            churn.config_of(History({"label": label}))


def test_facts_are_report_rows_under_their_names_in_field_order():
    facts = StaleFacts(
        failed_per_event=[3, 0],
        late_sent_at=["6.21 s", "?"],
        primed=["2 (-3.10 s)", "3 (?)"],
        reloads=[["-4.20 s", "0.40 s"], []],
        pins_failed=[4, 4],
        stopping_completed=[0, "?"],
        reopened=[0, 0],
        shutdowns="0 force-killed",
        unshown=["event 2: 3 stale connections were reopened"],
    )
    assert facts.rows() == {
        "failed stale requests per event": [3, 0],
        "late requests sent at STOP +": ["6.21 s", "?"],
        "prime attempts per event (the kept one, s from the stop)": ["2 (-3.10 s)", "3 (?)"],
        "new head HAProxy processes per event, s from the stop": [["-4.20 s", "0.40 s"], []],
        "pins failed per event (cut or timed out; on every version)": [4, 4],
        "stale requests the stopping replica completed per event": [0, "?"],
        "stale connections reopened per event (0: every late request went out on its primed "
        "connection)": [0, 0],
        "replica shutdowns, as the controller counted them": "0 force-killed",
    }
    assert list(facts.rows()) == list(facts.listed())
