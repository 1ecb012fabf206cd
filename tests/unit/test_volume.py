"""The volume soak's bookkeeping with its clusters replaced: the runs it makes
and what it keeps of each, its progress line, its verdict, and the rate finder's
stop. No Docker."""

from __future__ import annotations

import argparse

import pytest

import harness.bench.volume as volume
from harness import cli
from harness.core.errors import HarnessError, VerdictFailed
from harness.experiment import checker
from harness.experiment.history import Event, History, Request

T = 1_700_000_000.0


def _history(label: str, failed: int = 0) -> History:
    history = History({"label": label})
    for i in range(10):
        ok = i >= failed
        history.add_request(
            Request(
                "short",
                T + i,
                T + i + 0.1,
                200 if ok else 502,
                None if ok else "502",
                scheduled=T + i,
            )
        )
    return history


def test_each_configuration_runs_in_turn_with_its_env_and_is_saved(monkeypatch, tmp_path):
    monkeypatch.setattr(volume, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(volume.images, "ensure_node_image", lambda spec: f"node:{spec.flavor}")
    runs = []

    def one_run(tag, label, ladder, duration_s, interval_s, rate, **options):
        options["on_load"]()
        runs.append((tag, label, duration_s, options["env"], options["max_requests"]))
        assert options["mix"] == volume.MIX
        history = _history(label)
        return history, checker.check(history)

    monkeypatch.setattr(volume, "one_run", one_run)
    results = volume.volume_soak(rate=500.0, requests=30_000)
    volume.print_volume(results, 500.0)

    assert [(tag, label) for tag, label, *_ in runs] == [
        ("node:stock", "stock 2.60.0"),
        ("node:patched", "patched, defaults"),
        ("node:patched", "patched, flags on"),
    ]
    assert {duration for _, _, duration, _, _ in runs} == {60.0}
    assert {n for *_, n in runs} == {30_000}
    assert runs[2][3]["RAY_SERVE_ENABLE_PUSH_HEALTH"] == "1"
    assert runs[0][3] == runs[1][3] == {}
    assert list(results) == [c.label for c in volume.CONFIGS]
    assert len(list(tmp_path.glob("history-*.jsonl"))) == 3
    assert all(r.verdict.requests == 10 and r.peak_rss_mib > 0 for r in results.values())


def test_the_progress_line_counts_what_the_run_did_so_far_reading_only_new_rows(monkeypatch):
    now = T + 60.0
    monkeypatch.setattr(volume.time, "time", lambda: now)
    history = History()
    for i in range(6):
        history.add_request(
            Request("short", T + i, T + i + 1, 200 if i else 502, None if i else "502")
        )
    history.add_event(Event(T + 10, "spot_preemption", "start", "w1"))
    history.add_event(Event(T + 20, "spot_preemption", "mark", "w1"))
    run = volume.RunProgress(duration_s=600.0)

    assert run.line(history, started=T) == (
        "6 requests, 1 failed, 1 preemptions, 0/s since the last line, 9 min left"
    )
    # A minute later: 120 more rows, one failed; the first six are not read again.
    now += 60.0
    for i in range(120):
        history.add_request(
            Request("short", now - 1, now, 500 if i == 0 else 200, "500" if i == 0 else None)
        )
    history.requests[0] = None  # type: ignore[call-overload]  # read again, it would raise
    assert run.line(history, started=T) == (
        "126 requests, 2 failed, 1 preemptions, 2/s since the last line, 8 min left"
    )


def test_failures_per_preemption_are_the_spot_notice_windows_failures():
    history = _history("x", failed=3)
    history.add_event(Event(T - 1, "spot_preemption", "start", "w1"))
    history.add_event(Event(T + 2.5, "spot_preemption", "end", "w1"))
    history.add_event(Event(T + 5, "reload", "start", "head"))
    history.add_event(Event(T + 6, "reload", "end", "head"))

    result = volume.judge(checker.check(history))

    assert result.preemptions == [3]
    short = result.from_schedule["short"]
    assert short is not None and short.count == 7


def _args(**given) -> argparse.Namespace:
    options = dict(
        find_rate=False, volume=True, rate=None, requests=1_000_000, interval=180.0, cluster=None
    )
    return argparse.Namespace(**{**options, **given})


def test_a_volume_soak_without_a_rate_is_refused_with_the_way_to_find_it(monkeypatch):
    monkeypatch.setattr(volume, "volume_soak", lambda *a: pytest.fail("ran without a rate"))
    with pytest.raises(HarnessError, match="--find-rate") as raised:
        cli.cmd_volume(_args())
    assert raised.value.exit_code == 2


@pytest.mark.parametrize(
    "given",
    [
        dict(rate=0.0),
        dict(rate=500.0, requests=0),
        dict(rate=500.0, cluster="c.toml"),
        dict(find_rate=True),
    ],
)
def test_bad_volume_arguments_exit_2_before_anything_runs(monkeypatch, given):
    monkeypatch.setattr(volume, "volume_soak", lambda *a: pytest.fail("ran"))
    monkeypatch.setattr(volume, "find_rate", lambda *a: pytest.fail("ran"))
    with pytest.raises(HarnessError) as raised:
        cli.cmd_volume(_args(**given))
    assert raised.value.exit_code == 2


def test_stock_is_saved_as_the_comparison_and_the_patched_runs_as_the_claim(monkeypatch, tmp_path):
    monkeypatch.setattr(volume, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(volume.images, "ensure_node_image", lambda spec: f"node:{spec.flavor}")
    monkeypatch.setattr(
        volume,
        "one_run",
        lambda tag, label, *a, **k: (
            History({"label": label, "claim": True}),
            checker.check(_history(label)),
        ),
    )
    volume.volume_soak(rate=500.0, requests=100)
    claims = {
        History.load(p).meta["label"]: History.load(p).meta["claim"]
        for p in tmp_path.glob("history-*.jsonl")
    }
    assert claims == {"stock 2.60.0": False, "patched, defaults": True, "patched, flags on": True}


@pytest.mark.parametrize("failing, fails", [("stock 2.60.0", False), ("patched, flags on", True)])
def test_only_a_patched_configuration_over_the_threshold_fails_it(monkeypatch, failing, fails):
    def volume_soak(rate, requests, interval_s):
        return {
            c.label: volume.judge(
                checker.check(_history(c.label, failed=5 if c.label == failing else 0))
            )
            for c in volume.CONFIGS
        }

    monkeypatch.setattr(volume, "volume_soak", volume_soak)
    if fails:
        with pytest.raises(VerdictFailed, match="patched, flags on"):
            cli.cmd_volume(_args(rate=500.0))
    else:
        cli.cmd_volume(_args(rate=500.0))


def test_the_rate_finder_stops_at_the_first_step_not_held(monkeypatch):
    class FakeCluster:
        ingress = ("127.0.0.1", 1)
        nodes: list = []

        def __init__(self, config):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def deploy(self, config, timeout_s=None):
            pass

        def wait_lb_ready(self, nodes):
            pass

    offered = []

    async def open_loop(host, port, spec, history):
        offered.append(spec.rate)
        lag = 0.2 if spec.rate >= 600 else 0.001  # 600/s starts late
        for i in range(5):
            due = T + i / spec.rate
            history.add_request(
                Request("short", due + lag, due + lag + 0.01, 200, None, scheduled=due)
            )

    monkeypatch.setattr(volume, "Cluster", FakeCluster)
    monkeypatch.setattr(volume, "open_loop", open_loop)
    monkeypatch.setattr(volume.images, "ensure_node_image", lambda spec: "node:patched")

    assert volume.find_rate(steps=(200.0, 400.0, 600.0, 800.0), step_s=1.0) == 400.0
    assert offered == [200.0, 400.0, 600.0]
    # Not even the first step held: a failed verdict, not a rate of 0.
    with pytest.raises(VerdictFailed, match="no offered rate held"):
        volume.find_rate(steps=(600.0,), step_s=1.0)
