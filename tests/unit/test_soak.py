"""The soak's bookkeeping with its clusters replaced: which runs go side by
side, how their results come back (per configuration, in run order) and are
saved for `analyze`, and the progress it reports. No Docker."""

from __future__ import annotations

import threading
import time

import pytest
from progress_spy import record

import harness.bench.soak as soak
from harness.experiment import checker
from harness.experiment.history import History, Request

T = 1_700_000_000.0


def test_one_numbers_configurations_run_side_by_side_and_report_in_order(monkeypatch, tmp_path):
    monkeypatch.setattr(soak, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(soak.images, "ensure_node_image", lambda spec: "node:patched")
    running: set[str] = set()
    together: list[set[str]] = []
    lock = threading.Lock()

    def one_run(tag, label, ladder, duration_s, interval_s, rate, on_load, cluster=None):
        on_load()
        with lock:
            running.add(label)
            together.append(set(running))
        time.sleep(0.3)
        with lock:
            running.discard(label)
        history = History({"label": label, "claim": ladder is not None})
        history.add_request(Request("short", T, T + 0.1, 200, None))
        return history, checker.check(history)

    monkeypatch.setattr(soak, "one_run", one_run)
    results = soak.soak(2, 1.0)

    ladder, defaults = soak.CONFIGS
    assert {f"{ladder} #1", f"{defaults} #1"} in together
    assert not any(f"{ladder} #2" in seen and f"{defaults} #1" in seen for seen in together)
    assert {config: [v.label for v in verdicts] for config, verdicts in results.items()} == {
        ladder: [f"{ladder} #1", f"{ladder} #2"],
        defaults: [f"{defaults} #1", f"{defaults} #2"],
    }
    saved = sorted(
        (History.load(path).meta["order"], History.load(path).meta["label"])
        for path in tmp_path.glob("history-*.jsonl")
    )
    assert [label for _, label in saved] == [
        f"{ladder} #1",
        f"{ladder} #2",
        f"{defaults} #1",
        f"{defaults} #2",
    ]
    assert (tmp_path / "report.md").exists()


def test_each_run_reports_its_start_and_its_load_and_the_plan_is_their_minutes(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(soak, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(soak.images, "ensure_node_image", lambda spec: "node:patched")
    made = record(monkeypatch, soak)

    def one_run(tag, label, ladder, duration_s, interval_s, rate, on_load, cluster=None):
        on_load()  # the load starts: the run's planned minutes begin
        history = History({"label": label, "claim": ladder is not None})
        history.add_request(Request("short", T, T + 0.1, 200, None))
        return history, checker.check(history)

    monkeypatch.setattr(soak, "one_run", one_run)
    soak.soak(1, 1.5, parallel=1)

    (progress,) = made
    ladder, defaults = soak.CONFIGS
    assert progress.begun == [
        (f"run 1/2 ({ladder} #1): starting a cluster, deploying", 0.0),
        (f"run 1/2 ({ladder} #1): under load", 90.0),
        (f"run 2/2 ({defaults} #1): starting a cluster, deploying", 0.0),
        (f"run 2/2 ({defaults} #1): under load", 90.0),
        ("writing the report", 0.0),
    ]
    assert progress.begun_s() == progress.planned_s == 2 * 90.0
    lines = capsys.readouterr().err.splitlines()
    loading = f"soak [0s elapsed, 0% of plan, about 3m00s left] run 1/2 ({ladder} #1): under load"
    assert loading in lines
    assert lines[-1].startswith("soak: done in ")


def test_a_run_that_fails_leaves_the_line_while_the_others_go_on(monkeypatch, tmp_path):
    """--parallel: the failed run's piece ends with it, so the line shows only
    the run still going (not a run that stopped as if it were running)."""
    monkeypatch.setattr(soak, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(soak.images, "ensure_node_image", lambda spec: "node:patched")
    made = record(monkeypatch, soak)
    ladder, defaults = soak.CONFIGS
    seen: list[str] = []

    def one_run(tag, label, ladder_, duration_s, interval_s, rate, on_load, cluster=None):
        on_load()
        if label == f"{ladder} #1":
            raise RuntimeError("the cluster did not start")
        # The other run, still under load, reads the line until the failed
        # run is gone from it (or a while has passed).
        deadline = time.monotonic() + 2.0
        while f"{ladder} #1" in made[0].line() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(made[0].line())
        history = History({"label": label, "claim": ladder_ is not None})
        history.add_request(Request("short", T, T + 0.1, 200, None))
        return history, checker.check(history)

    monkeypatch.setattr(soak, "one_run", one_run)
    with pytest.raises(RuntimeError, match="did not start"):
        soak.soak(1, 1.0, parallel=2)
    (line,) = seen
    assert f"run 2/2 ({defaults} #1): under load" in line
    assert f"{ladder} #1" not in line


def test_a_failed_run_prints_where_and_how_its_requests_failed(monkeypatch, tmp_path, capsys):
    """CI keeps only what the soak prints: a run over the threshold puts its
    failures (fault windows, classes, each failed request) in the output."""
    monkeypatch.setattr(soak, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(soak.images, "ensure_node_image", lambda spec: "node:patched")

    def one_run(tag, label, ladder, duration_s, interval_s, rate, on_load, cluster=None):
        history = History({"label": label, "claim": ladder is not None})
        history.add_request(Request("short", T, T + 0.1, 200, None))
        if ladder is not None:
            history.add_request(Request("long", T + 2, T + 2.5, None, "reset", detail="peer reset"))
        return history, checker.check(history)

    monkeypatch.setattr(soak, "one_run", one_run)
    soak.print_soak(soak.soak(1, 1.0, parallel=1))
    out = capsys.readouterr().out
    assert "## Failures by fault window" in out
    assert "| 2.000s | long | reset | 0.500s | - | - | peer reset |" in out
    assert "## Timeline" not in out  # the section alone, not the rest of the report


def test_a_clean_soak_prints_no_failure_section(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(soak, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(soak.images, "ensure_node_image", lambda spec: "node:patched")

    def one_run(tag, label, ladder, duration_s, interval_s, rate, on_load, cluster=None):
        history = History({"label": label, "claim": ladder is not None})
        history.add_request(Request("short", T, T + 0.1, 200, None))
        return history, checker.check(history)

    monkeypatch.setattr(soak, "one_run", one_run)
    soak.print_soak(soak.soak(1, 1.0, parallel=1))
    assert "Failures by fault window" not in capsys.readouterr().out


def test_on_an_existing_cluster_only_the_ladder_runs_and_says_what_it_ran_on(monkeypatch, tmp_path):
    """--cluster: the one cluster as it is, so the ladder's runs one after the
    other on it (Ray's defaults would need other nodes), each history keeping
    what the cluster was found running."""
    from pathlib import Path

    from harness.cluster import clusterfile
    from harness.cluster.existing import ExistingCluster

    monkeypatch.setattr(soak, "RESULTS_DIR", tmp_path)
    spec = clusterfile.ClusterFile(
        Path("c.toml"), "http://h:8265", "lb", 80, commands={"terminate": "x", "add": "y"}
    )
    cluster = ExistingCluster(spec)
    cluster.found = {"version": "2.60.0", "known": ["RAY_SERVE_ENABLE_PUSH_HEALTH"], "env": {}}
    asked: list[set[str]] = []

    def prepare(cls, file, needs, who, settings):
        asked.append(needs)
        return cluster

    monkeypatch.setattr(ExistingCluster, "prepare", classmethod(prepare))
    monkeypatch.setattr(soak.images, "ensure_node_image", lambda spec: pytest.fail("an image"))
    ran: list[tuple[str, object]] = []

    def one_run(tag, label, ladder, duration_s, interval_s, rate, on_load, cluster=None):
        ran.append((label, cluster))
        history = History({"label": label, "claim": True})
        history.add_request(Request("short", T, T + 0.1, 200, None))
        return history, checker.check(history)

    monkeypatch.setattr(soak, "one_run", one_run)
    results = soak.soak(2, 1.0, cluster_file=spec)

    assert asked == [{"terminate", "add"}]
    assert list(results) == [soak.LADDER_CONFIG]
    assert ran == [(f"{soak.LADDER_CONFIG} #1", cluster), (f"{soak.LADDER_CONFIG} #2", cluster)]
    saved = [History.load(p) for p in tmp_path.glob("history-*.jsonl")]
    assert {h.meta["cluster"]["version"] for h in saved} == {"2.60.0"}
    assert "on the 2.60.0 patched existing cluster at http://h:8265" in saved[0].meta["title"]
