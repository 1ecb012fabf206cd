"""The checker on hand-built histories: the numbers a user reads off a verdict."""

import dataclasses
import json
from pathlib import Path

import pytest

from harness.experiment.checker import check, percentile
from harness.experiment.history import Event, History, Request
from harness.experiment.report import format_percent, side_by_side, table

T = 1_700_000_000.0  # wall-clock origin; times below are offsets from it


def _steady(n: int, failures: dict[int, str], label: str = "stock 2.59.0") -> History:
    """n short requests, one every 0.1 s, each taking 0.1 s; `failures` maps a
    request index to its error class."""
    history = History({"label": label})
    for i in range(n):
        error = failures.get(i)
        status = int(error) if error and error.isdigit() else (None if error else 200)
        history.add_request(Request("short", T + i / 10, T + i / 10 + 0.1, status, error))
    return history


def _faulty() -> History:
    """1,000 requests over 100 s; failures at 20.0 s (reset), 20.5 s (500) and
    70.0 s (timeout). A reload window at 19.03-20.03 s holds the first failure and
    reaches the second only through the grace period; a kill at 50.03-55.03 s
    holds none; a pause starts at 90.03 s and never ends."""
    history = _steady(1000, {200: "reset", 205: "500", 700: "timeout"})
    history.add_event(Event(T + 19.03, "reload", "start", "lb"))
    history.add_event(Event(T + 20.03, "reload", "end", "lb"))
    history.add_event(Event(T + 50.03, "kill", "start", "node-2"))
    history.add_event(Event(T + 50.5, "spot_preemption", "mark", "node-2", {"label": "drain sent"}))
    history.add_event(Event(T + 55.03, "kill", "end", "node-2"))
    history.add_event(Event(T + 90.03, "pause", "start", "node-3"))
    return history


def test_totals_rate_and_failure_classes():
    v = check(_faulty())
    assert v.label == "stock 2.59.0"
    assert v.requests == 1000 and v.successes == 997 and v.failures == 3
    assert v.duration_s == pytest.approx(100.0)
    assert v.rps == pytest.approx(10.0)
    assert v.failure_rate == pytest.approx(0.003)
    assert not v.passed and v.result == "FAILED"
    assert v.failures_by_class == {"500": 1, "reset": 1, "timeout": 1}
    assert v.kinds["short"].requests == 1000 and v.kinds["short"].failures == 3


def test_label_falls_back_to_image():
    history = _steady(10, {})
    history.meta = {"image": "rayspot-node:2.60.0-patched"}
    assert check(history).label == "rayspot-node:2.60.0-patched"


def test_threshold_boundary_is_inclusive():
    # 1 failure in 10,000 is exactly 0.01%: the run meets the threshold. One more fails it.
    at = check(_steady(10_000, {5000: "reset"}), threshold=0.0001)
    over = check(_steady(10_000, {5000: "reset", 6000: "reset"}), threshold=0.0001)
    assert at.failure_rate == at.threshold and at.passed
    assert not over.passed


def test_no_requests_never_passes():
    v = check(History({"label": "empty"}))
    assert v.requests == 0 and v.failure_rate == 0.0 and v.rps == 0.0
    assert not v.passed


def test_failures_attributed_to_windows_with_grace():
    v = check(_faulty(), grace_s=5.0)
    reload, kill, pause = v.windows
    assert (reload.fault, reload.target) == ("reload", "lb")
    assert reload.start == pytest.approx(19.03) and reload.end == pytest.approx(20.03)
    # 18.93 <= start <= 25.03 (the end plus 5 s of grace)
    assert reload.requests == 61
    assert reload.failures == 2 and reload.failures_by_class == {"500": 1, "reset": 1}
    assert kill.failures == 0 and kill.requests == 101 and not kill.unmatched
    assert v.failures_in_windows == 2
    assert v.failures_outside == 1 and v.outside_by_class == {"timeout": 1}
    assert pause.failures == 0


def test_without_grace_the_lagging_failure_is_outside():
    v = check(_faulty(), grace_s=0.0)
    assert v.windows[0].failures_by_class == {"reset": 1}
    assert v.failures_outside == 2 and v.outside_by_class == {"500": 1, "timeout": 1}


def test_unmatched_start_runs_to_the_end_of_the_history():
    v = check(_faulty())
    pause = v.windows[-1]
    assert pause.fault == "pause" and pause.unmatched
    assert pause.start == pytest.approx(90.03) and pause.end == pytest.approx(100.0)
    assert pause.requests == 100

    late = _steady(1000, {990: "refused"})
    late.add_event(Event(T + 90.03, "pause", "start", "node-3"))
    v = check(late, grace_s=0.0)
    assert v.windows[0].failures_by_class == {"refused": 1} and v.failures_outside == 0


def test_unmatched_end_runs_from_the_start():
    history = _steady(100, {3: "reset"})
    history.add_event(Event(T + 5.0, "partition", "end", "node-1"))
    (w,) = check(history, grace_s=0.0).windows
    assert w.unmatched and w.start == pytest.approx(0.0) and w.end == pytest.approx(5.0)
    assert w.failures == 1


def test_repeated_fault_pairs_in_time_order():
    history = _steady(1000, {})
    for s, e in [(10.0, 12.0), (30.0, 31.0)]:
        history.add_event(Event(T + e, "reload", "end", "lb"))
        history.add_event(Event(T + s, "reload", "start", "lb"))
    spans = [(round(w.start, 2), round(w.end, 2)) for w in check(history).windows]
    assert spans == [(10.0, 12.0), (30.0, 31.0)]


def test_marks_are_listed_not_windows():
    v = check(_faulty())
    assert len(v.windows) == 3
    (mark,) = v.marks
    assert mark.time == pytest.approx(50.5)
    assert mark.label == "spot_preemption node-2: drain sent"


def test_unknown_phase_is_an_error():
    history = _steady(10, {})
    history.add_event(Event(T + 1, "kill", "begin", "node-1"))
    with pytest.raises(ValueError, match="phase 'begin'"):
        check(history)


def test_nearest_rank_percentile():
    values = list(range(1, 11))
    assert percentile(values, 50) == 5
    assert percentile(values, 10) == 1 and percentile(values, 11) == 2
    assert percentile(values, 99) == 10 and percentile(values, 100) == 10
    with pytest.raises(ValueError):
        percentile([], 50)


def test_latency_of_successes_overall_and_per_kind():
    history = History({"label": "lat"})
    for k in range(1, 101):  # short: 1 ms .. 100 ms
        history.add_request(Request("short", T + k, T + k + k / 1000, 200, None))
    for k in range(1, 11):  # long: 8 s .. 17 s, and one long that failed after 30 s
        history.add_request(Request("long", T + k, T + k + 7 + k, 200, None))
    history.add_request(Request("long", T, T + 30, 500, "500"))
    v = check(history)
    short, long = v.kinds["short"], v.kinds["long"]
    assert (short.latency.p50, short.latency.p99, short.latency.max) == pytest.approx(
        (0.050, 0.099, 0.100)
    )
    assert long.requests == 11 and long.failures == 1 and long.failures_by_class == {"500": 1}
    # The failed 30 s request is not a latency: max stays at the slowest success.
    assert (long.latency.p50, long.latency.max) == pytest.approx((12.0, 17.0))
    assert v.latency.count == 110 and v.latency.max == pytest.approx(17.0)
    assert list(v.kinds) == ["short", "long"]


def test_latency_from_the_schedule_counts_the_wait_for_a_connection():
    history = History({"label": "co"})
    # Due at 0 s but sent at 0.9 s (no connection was free), answered at 1.0 s.
    for _ in range(1000):
        history.add_request(Request("short", T + 0.9, T + 1.0, 200, None, scheduled=T))
    v = check(history).kinds["short"]
    assert v.latency.p999 == pytest.approx(0.1)
    assert v.latency_from_scheduled.p50 == pytest.approx(1.0)
    assert v.outcomes == {"200": 1000}


def test_outcomes_break_failures_down_by_status_and_class():
    history = _steady(10, {1: "500", 2: "reset", 3: "reset"})
    history.add_request(Request("short", T, T + 1, 200, "truncated"))
    assert check(history).outcomes == {"200": 7, "reset": 2, "500": 1, "truncated": 1}


def test_observations_neither_make_windows_nor_move_them():
    plain = check(_faulty())
    observed = _faulty()
    observed.observe("replaced", T + 500, T + 500, target="r1")
    assert check(observed) == plain


def test_a_history_missing_rows_fails_and_names_the_gap():
    history = _steady(10, {})
    lost = [history.schedule() for _ in range(3)]
    v = check(history)
    assert not v.passed and v.failures == 0
    assert v.scheduled == 13 and v.record_gap.startswith("13 requests scheduled, 10 rows")
    assert f"tickets {lost[0]}, {lost[1]}, {lost[2]}" in v.record_gap
    assert "INCOMPLETE" in side_by_side({"run": v})


def test_a_doubled_row_is_a_gap_too():
    history = _steady(3, {})
    history.requests.append(dataclasses.replace(history.requests[0]))
    assert "more than one row (tickets 0)" in check(history).record_gap


def test_verdict_is_json_and_survives_a_saved_history(tmp_path: Path):
    history = _faulty()
    history.save(tmp_path / "h.jsonl")
    again = check(History.load(tmp_path / "h.jsonl"))
    assert again == check(history)
    doc = json.loads(json.dumps(again.to_dict()))
    assert doc["result"] == "FAILED" and doc["windows"][0]["failures"] == 2


def test_table_for_a_known_verdict():
    assert table([check(_faulty())]) == "\n".join(
        [
            "| Run | Duration | Requests | Failures | RPS | Result |",
            "|---|---:|---:|---:|---:|---|",
            "| stock 2.59.0 | 100.0s | 1,000 | 3 | 10.00 | FAILED |",
            "| total | 100.0s | 1,000 | 3 | ~10.0 | 0 / 1 |",
        ]
    )


def test_table_reproduces_the_spot_notice_acceptance_rows():
    base = check(History())
    proposal = [
        ("10:14", 915.0, 13_693_936, 1, 15_155.82),
        ("10:35", 935.7, 13_905_934, 0, 15_046.36),
        ("11:11", 940.1, 13_895_566, 0, 14_963.30),
        ("11:49", 914.8, 13_862_222, 0, 15_346.83),
        ("12:12", 936.8, 13_866_583, 0, 14_986.43),
    ]
    verdicts = [
        dataclasses.replace(
            base, label=label, duration_s=d, requests=n, failures=f, rps=rps, passed=True
        )
        for label, d, n, f, rps in proposal
    ]
    lines = table(verdicts).splitlines()
    assert lines[2] == "| 10:14 | 915.0s | 13,693,936 | 1 | 15,155.82 | PASSED |"
    # The proposal's total row says 78 min of wall clock; the runs themselves sum to 77.
    assert lines[-1] == "| total | 77 min | 69,224,241 | 1 | ~15,100 | 5 / 5 |"


def test_percent_keeps_two_significant_digits():
    assert format_percent(1 / 69_224_241) == "0.0000014%"
    assert format_percent(0.0001) == "0.01%"
    assert format_percent(0.003) == "0.3%"
    assert format_percent(0.0) == "0%"


def test_side_by_side_puts_images_in_columns():
    stock = check(_faulty())
    patched = check(_steady(1000, {}, label="patched 2.60.0"))
    text = side_by_side({"stock 2.59.0": stock, "patched 2.60.0": patched})
    lines = text.splitlines()
    assert lines[0] == "|  | stock 2.59.0 | patched 2.60.0 |"
    assert "| requests | 1,000 | 1,000 |" in lines
    assert "| failures | 3 | 0 |" in lines
    assert "| failure rate | 0.3% | 0% |" in lines
    assert "| failures: reset | 1 | 0 |" in lines
    assert "| failures in fault windows | 2 | 0 |" in lines
    assert "| failures outside any fault | 1 | 0 |" in lines
    assert "| latency p99 | 0.100s | 0.100s |" in lines
    assert "| result | FAILED (threshold 0.01%) | PASSED (threshold 0.01%) |" in lines
