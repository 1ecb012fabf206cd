"""timeline.png, drawn from every saved run (tests/unit/saved_runs/) and from
made-up histories, and measured with matplotlib's own renderer: no text over
the title or another text, none outside the figure; every panel draws what the
history says (read back from the artists: rates per bin, p50 and p99, every
failure, window and mark, y-limits that hold the data); a long run's bins are
wide and its lone failure still shows; thousands of marks are a few artists;
no two legend entries look alike. Looking at one image proves nothing about
the next run; measuring every run's does."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from harness.experiment.checker import Verdict, check
from harness.experiment.history import Event, History, Request, history_name
from harness.experiment.timeline import (
    PANELS,
    bin_width,
    failure_points,
    figure,
    latency_per_second,
    per_second,
    write_timeline,
)

SAVED = Path(__file__).parent / "saved_runs"
# Glyph boxes carry a little padding; boxes that meet by a pixel are not a
# collision anyone sees.
SLACK_PX = 1.0


def saved_runs(folder: Path) -> tuple[str, dict[str, tuple[History, Verdict]]]:
    """A saved run's title and runs as write_report got them: column name ->
    history and verdict, judged with the threshold and grace it was judged by."""
    doc = json.loads((folder / "report.json").read_text())
    runs = {}
    for name, run in doc["runs"].items():
        history = History.load(folder / f"{history_name(run['meta']['label'])}.gz")
        recorded = run["verdict"]
        runs[name] = (history, check(history, recorded["threshold"], recorded["grace_s"]))
    return doc["title"], runs


def drawn_texts(fig: Figure) -> list[Text]:
    """Every text the figure draws with something in it. Tick labels count only
    for ticks inside their axis's view: matplotlib keeps spare Tick objects
    whose stale labels are never drawn."""
    axes_ticks = [
        (axis, ticks, locs)
        for ax in fig.axes
        for axis in (ax.xaxis, ax.yaxis)
        for ticks, locs in (
            (axis.get_major_ticks(), axis.get_majorticklocs()),
            (axis.get_minor_ticks(), axis.get_minorticklocs()),
        )
    ]
    tick_labels = {
        id(t) for _, ticks, _ in axes_ticks for tick in ticks for t in tick.get_children()
    }
    texts = [t for t in fig.findobj(Text) if id(t) not in tick_labels]
    for axis, ticks, locs in axes_ticks:
        low, high = sorted(axis.get_view_interval())
        for tick, loc in zip(ticks, locs, strict=False):
            if low <= loc <= high or math.isclose(loc, low) or math.isclose(loc, high):
                texts += [tick.label1, tick.label2]
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def _overlap(a: Bbox, b: Bbox) -> bool:
    return (
        min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK_PX
        and min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK_PX
    )


def text_problems(fig: Figure) -> list[str]:
    """What a reader would see wrong with the figure's text as drawn: a text
    over another (the titles included), or one cut off by the figure's edge."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed = [(t, t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    inside = fig.bbox.padded(SLACK_PX)
    problems = [
        f"{t.get_text()!r} lies outside the figure"
        for t, box in placed
        if not inside.contains(box.x0, box.y0) or not inside.contains(box.x1, box.y1)
    ]
    for i, (a, box_a) in enumerate(placed):
        for b, box_b in placed[i + 1 :]:
            if _overlap(box_a, box_b):
                problems.append(f"{a.get_text()!r} overlaps {b.get_text()!r}")
    return problems


def gid(ax: Axes, name: str) -> list[Artist]:
    """The artists of `ax` drawn under the id `name`."""
    return [a for a in ax.get_children() if a.get_gid() == name]


def gids(ax: Axes, prefix: str) -> list[Artist]:
    return [a for a in ax.get_children() if str(a.get_gid()).startswith(prefix)]


def finite(line: Line2D) -> tuple[list[float], list[float]]:
    """A line's points, without the NaNs that break it at gaps."""
    xs, ys = line.get_xdata(), line.get_ydata()
    kept = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(x)]
    return [x for x, _ in kept], [y for _, y in kept]


def assert_draws(fig: Figure, runs: dict[str, tuple[History, Verdict]]) -> None:
    """Every panel of every column draws what the history says, read back from
    the artists: rates per bin (count / width), p50 and p99 per bin, every
    failure, one shaded span per fault window (and its grace), every mark; and
    every panel's y-limits hold its largest (and, on the log scale, smallest)
    value."""
    panels = {ax.get_label(): ax for ax in fig.axes}
    width = bin_width(max(v.duration_s for _, v in runs.values()))
    for column, (history, verdict) in runs.items():
        traffic, failed, latency = (panels[f"{role}: {column}"] for role in PANELS)
        ok, bad = per_second(history, verdict.t0, width)
        if ok:
            for ax, counts, name in ((traffic, ok, "ok"), (failed, bad, "failed")):
                (steps,) = gid(ax, name)
                values, edges, _ = steps.get_data()
                assert list(values) == pytest.approx([n / width for n in counts]), (column, name)
                assert list(edges) == pytest.approx([i * width for i in range(len(counts) + 1)])
                if any(counts):
                    low, high = ax.get_ylim()
                    assert low <= 0 and max(values) <= high, (column, name, ax.get_ylim())
            wide = gid(failed, "failed: at least a line wide")
            tops = [seg[1][1] for c in wide for seg in c.get_segments()]
            assert tops == pytest.approx([n / width for n in bad if n]), column
        drawn: list[float] = []
        for kind, (xs, p50, p99) in latency_per_second(history, verdict.t0, width).items():
            for name, want in (("p50", p50), ("p99", p99)):
                (line,) = gid(latency, f"{name}: {kind}")
                got_x, got_y = finite(line)
                assert got_x == pytest.approx(xs), (column, name, kind)
                assert got_y == pytest.approx([max(v, 1e-4) for v in want]), (column, name, kind)
                drawn += got_y
        want_x, want_y = failure_points(history, verdict.t0, width)
        if want_x:
            (line,) = gid(latency, "failures")
            assert finite(line) == (pytest.approx(want_x), pytest.approx(want_y)), column
            drawn += want_y
        if drawn:
            low, high = latency.get_ylim()
            assert low <= min(drawn) and max(drawn) <= high, (column, latency.get_ylim())
        for ax in (traffic, failed, latency):
            for role, spans in (
                ("window: ", [(w.start, w.end) for w in verdict.windows]),
                ("grace: ", [(w.end, w.end + verdict.grace_s) for w in verdict.windows]),
            ):
                shaded = sorted(
                    (min(p.vertices[:, 0]), max(p.vertices[:, 0]))
                    for c in gids(ax, role)
                    for p in c.get_paths()
                )
                assert [s for s, _ in shaded] == pytest.approx(sorted(s for s, _ in spans))
                assert [e for _, e in shaded] == pytest.approx(sorted(e for _, e in spans))
            marks = sorted(seg[0][0] for c in gids(ax, "marks: ") for seg in c.get_segments())
            assert marks == pytest.approx(sorted(m.time for m in verdict.marks)), ax.get_label()
        # The whole run is in view.
        assert traffic.get_xlim()[0] <= 0 and verdict.duration_s <= traffic.get_xlim()[1]


@pytest.fixture(scope="module", params=sorted(p.name for p in SAVED.iterdir() if p.is_dir()))
def rendered(request, tmp_path_factory) -> tuple[str, dict, Path, Figure]:
    """A saved run drawn once for the tests that measure it: its title, its
    runs, the PNG written and the figure that wrote it."""
    title, runs = saved_runs(SAVED / request.param)
    png = tmp_path_factory.mktemp(request.param) / "timeline.png"
    return title, runs, png, write_timeline(png, runs, title)


def test_a_saved_runs_timeline_has_no_overlapping_or_cut_off_text(rendered):
    title, runs, png, fig = rendered
    # Measured on the Agg canvas that wrote the PNG, so what is checked is what was saved.
    assert isinstance(fig.canvas, FigureCanvasAgg)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert text_problems(fig) == []
    # The titles are there to be overlapped: the report's and each run's.
    texts = [t.get_text() for t in drawn_texts(fig)]
    assert title in " ".join(texts).replace("\n", " ")
    assert all(any(t.startswith(f"{column}\n") for t in texts) for column in runs)
    # Marks and windows are named once, in the legend, and no text sits on the data.
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == len(set(labels)), labels
    assert all(not ax.texts for ax in fig.axes)


def test_every_run_has_a_latency_panel_with_data(rendered):
    _, runs, _, fig = rendered
    panels = {ax.get_label(): ax for ax in fig.axes}
    for column in runs:
        drawn = panels[f"latency: {column}"].get_lines()
        lines = [line for line in drawn if str(line.get_gid()).startswith(("p50", "failures"))]
        points = [y for line in lines for y in line.get_ydata() if math.isfinite(y)]
        assert points and all(y > 0 for y in points), column


def test_a_saved_runs_panels_draw_its_history(rendered):
    # What a reader takes from each panel is what the history says: every
    # bin's rates and percentiles, every window and mark, nothing clipped.
    _, runs, _, fig = rendered
    assert_draws(fig, runs)


def test_the_overlap_check_sees_a_label_over_the_title():
    # The old timeline's fault: a mark's rotated label ran up through the title.
    # No layout engine: constrained layout would shrink the axes to keep the
    # label in, and this figure is meant to be wrong.
    fig = Figure(figsize=(6, 3))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.set_title("2.60.0-patched: 0 failed of 1,825 — PASSED")
    ax.set_xlim(0, 10)
    ax.text(
        5,
        0.9,
        "spot_preemption worker-1: drain sent",
        rotation=90,
        va="bottom",
        transform=ax.get_xaxis_transform(),
    )
    problems = text_problems(fig)
    assert any("overlaps" in p and "PASSED" in p for p in problems), problems
    assert any("outside the figure" in p for p in problems), problems


T = 1_700_000_000.0


def test_latency_is_binned_by_the_time_a_request_was_due_and_measured_from_it():
    history = History()
    # Due at 0.2 s, sent at 1.5 s (it waited for a connection), done at 1.7 s:
    # 1.5 s from its schedule, in the first second.
    history.add_request(Request("short", T + 1.5, T + 1.7, 200, None, scheduled=T + 0.2))
    # No schedule (a scenario sent it itself): from its send.
    history.add_request(Request("long", T + 2.0, T + 5.0, 200, None))
    # Failures are not latency: they are drawn one by one, not as a percentile.
    history.add_request(Request("short", T + 0.4, T + 9.0, None, "timeout", scheduled=T + 0.4))
    by_kind = latency_per_second(history, T)
    assert by_kind["short"] == ([0.5], [pytest.approx(1.5)], [pytest.approx(1.5)])
    assert by_kind["long"] == ([2.5], [pytest.approx(3.0)], [pytest.approx(3.0)])


def test_counts_per_second_are_by_completion_time():
    history = History()
    history.add_request(Request("short", T, T + 0.5, 200, None))
    history.add_request(Request("short", T + 0.1, T + 2.2, None, "reset"))
    assert per_second(history, T) == ([1, 0, 0], [0, 0, 1])


def test_a_run_with_no_requests_still_draws_with_its_faults(tmp_path):
    empty = History({"label": "empty"})
    empty.add_event(Event(T, "kill", "start", "worker-1"))
    empty.add_event(Event(T + 3, "kill", "end", "worker-1"))
    runs = {"empty": (empty, check(empty))}
    fig = write_timeline(tmp_path / "timeline.png", runs, "Nothing")
    assert text_problems(fig) == []
    assert_draws(fig, runs)


# What a reader would see wrong: a deliberate bug in any panel fails one of these.


def _mixed(t: float, seed: int, failing: bool) -> History:
    """About 30 s of two kinds at a few requests a second, latencies varied
    so every bin's p50 and p99 differ, failures (one unfinished) in a burst,
    a fault window and two marks."""
    history = History({"label": f"mixed {seed}"})
    for i in range(180):
        due_at = t + i / 6
        kind = "short" if i % 3 else "long"
        latency = (0.002 + 0.001 * ((i * 7 + seed) % 11)) * (40 if kind == "long" else 1)
        bad = failing and 60 <= i < 90 and i % 2
        if bad:
            error = "unfinished" if i == 61 else "reset"
            history.add_request(Request(kind, due_at, due_at + 1.5, None, error, scheduled=due_at))
        else:
            history.add_request(
                Request(kind, due_at, due_at + latency, 200, None, scheduled=due_at)
            )
    history.add_event(Event(t + 8, "spot_preemption", "start", "worker-1"))
    history.add_event(Event(t + 16, "spot_preemption", "end", "worker-1"))
    for when, note in ((9, "drain sent"), (15.5, "terminated")):
        history.add_event(Event(t + when, "spot_preemption", "mark", "worker-1", {"label": note}))
    return history


def test_each_panel_draws_what_the_history_says():
    runs = {}
    for seed, (name, failing) in enumerate((("stock", True), ("patched", False))):
        history = _mixed(T, seed, failing)
        runs[name] = (history, check(history))
    assert_draws(figure(runs, "Two runs"), runs)


def test_a_bin_of_1_to_100_ms_has_p50_50_and_p99_99():
    history = History()
    for ms in range(1, 101):
        history.add_request(Request("short", T + 0.5, T + 0.5 + ms / 1000, 200, None))
    assert latency_per_second(history, T) == (
        {"short": ([0.5], [pytest.approx(0.050)], [pytest.approx(0.099)])}
    )
    runs = {"one": (history, check(history))}
    panels = {ax.get_label(): ax for ax in figure(runs, "One bin").axes}
    for name, value in (("p50", 0.050), ("p99", 0.099)):
        (line,) = gid(panels["latency: one"], f"{name}: short")
        assert finite(line)[1] == [pytest.approx(value)]


# Long runs: bins as wide as the run needs, and a single failure still shows.


def test_the_bin_width_gives_about_500_bins_whatever_the_runs_length():
    assert [bin_width(s) for s in (0, 60, 500, 501, 5_000, 50_000, 86_400 * 10)] == [
        1,
        1,
        1,
        5,
        10,
        300,
        1800,
    ]
    for span in (1, 499, 2_000, 5_000, 20_000, 50_000, 10**6, 10**8):
        width = bin_width(span)
        # Never more than about 500 bins, nor needlessly few.
        assert span / width <= 500 and (width == 1 or span / width > 50), span


def _long_run(span: float = 50_000.0) -> History:
    """One ok request every 10 s over `span` seconds, a burst of 1,000
    failures in one second, and one lone failure at 12,345 s."""
    history = History({"label": "soak"})
    for i in range(int(span / 10)):
        history.add_request(Request("short", T + i * 10, T + i * 10 + 0.01, 200, None))
    for i in range(1_000):
        at = T + 30_000.5 + i / 1_000
        history.add_request(Request("short", at, at + 0.2, None, "reset"))
    history.add_request(Request("short", T + 12_345, T + 12_345.3, None, "reset"))
    # A request of another kind in one bin only: a lone point.
    history.add_request(Request("burst", T + 40_000, T + 40_000.1, 200, None))
    return history


def _red_pixels(fig: Figure, ax: Axes, x: float, half_px: int = 3) -> int:
    """Pixels of the failures' red drawn in `ax` within `half_px` of `x`."""
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    px = int(round(ax.transData.transform((x, 0))[0]))
    box = ax.get_window_extent()
    height = rgba.shape[0]
    patch = rgba[int(height - box.y1) : int(height - box.y0), px - half_px : px + half_px + 1, :3]
    red = np.array([214, 39, 40])
    return int((np.abs(patch.astype(int) - red).sum(axis=2) < 60).sum())


def test_a_long_run_is_drawn_in_wide_bins_per_second_and_one_failure_shows():
    history = _long_run()
    runs = {"soak": (history, check(history))}
    fig = figure(runs, "A soak")
    panels = {ax.get_label(): ax for ax in fig.axes}
    traffic, failed = panels["requests: soak"], panels["failures: soak"]
    # 300 s bins, and still per second: 30 requests a bin is 0.1/s.
    (steps,) = gid(traffic, "ok")
    values, edges, _ = steps.get_data()
    assert edges[1] - edges[0] == 300 and values[0] == pytest.approx(0.1)
    assert all("(5 min bins)" in ax.get_ylabel() for ax in fig.axes if ax.get_ylabel())
    assert_draws(fig, runs)
    # The lone failure is a thousandth of the burst's rate and a bin a few
    # pixels wide, yet it is drawn in red; where there is none, nothing is.
    assert _red_pixels(fig, failed, 12_345) >= 6
    assert _red_pixels(fig, failed, 20_000) == 0


def test_a_long_runs_latency_has_markers_only_where_a_bin_stands_alone():
    history = _long_run()
    fig = figure({"soak": (history, check(history))}, "A soak")
    panels = {ax.get_label(): ax for ax in fig.axes}
    latency = panels["latency: soak"]
    # Hundreds of adjacent bins: a marker on each would merge into a band.
    for name in ("p50", "p99"):
        (line,) = gid(latency, f"{name}: short")
        assert list(line.get_markevery()) == []
        (lone,) = gid(latency, f"{name}: burst")
        assert list(lone.get_markevery()) == [0]


def test_past_a_few_thousand_failures_one_is_drawn_per_bin_and_latency_step():
    history = History()
    for i in range(20_000):
        at = T + i / 20
        history.add_request(Request("short", at, at + 0.01 * (1 + i % 37), None, "reset"))
    width = bin_width(1_000)
    xs, ys = failure_points(history, T, width)
    # 200 bins, 37 latencies spanning about 1.6 decades: at most 33 steps each.
    assert 200 <= len(xs) <= 200 * 33
    real = {(round(r.start - T, 6), round(r.end - r.start, 6)) for r in history.requests}
    assert all((round(x, 6), round(y, 6)) in real for x, y in zip(xs, ys, strict=True))
    # A few failures are all drawn.
    few = History()
    for r in history.requests[:100]:
        few.add_request(r)
    assert len(failure_points(few, T, width)[0]) == 100


# Marks: thousands of them are a few collections behind the data.


def _with_marks(seed: int, n_marks: int, span: float = 3_600.0) -> History:
    history = History({"label": f"churn {seed}"})
    for i in range(int(span)):
        history.add_request(Request("short", T + i, T + i + 0.005, 200, None))
    for i in range(n_marks):
        history.add_event(
            Event(
                T + span * i / n_marks,
                "membership_churn",
                "mark",
                None,
                {"label": f"swap to {i % 10} replicas"},
            )
        )
    return history


def test_thousands_of_marks_are_ticks_along_the_top_in_one_collection_per_style():
    runs = {}
    for seed in range(3):
        history = _with_marks(seed, 3_600)
        runs[f"run {seed}"] = (history, check(history))
    fig = figure(runs, "Churn")
    assert_draws(fig, runs)
    for ax in fig.axes:
        (ticks,) = gids(ax, "marks: ")
        assert len(ticks.get_segments()) == 3_600
        # Short ticks from the top edge, behind the data and see-through.
        assert all(seg[0][1] >= 0.85 and seg[1][1] == 1 for seg in ticks.get_segments())
        assert ticks.get_zorder() < 2 and ticks.get_alpha() < 1
        assert len(ax.get_children()) < 60, ax.get_label()
    (legend,) = fig.legends
    assert "membership_churn marks (ticks at the top)" in [t.get_text() for t in legend.get_texts()]


def test_a_few_marks_are_faint_full_height_lines_behind_the_data():
    history = _with_marks(0, 4, span=60.0)
    fig = figure({"run": (history, check(history))}, "Churn")
    for ax in fig.axes:
        drawn = gids(ax, "marks: ")
        # One collection per mark text, not one line per mark.
        assert len(drawn) == 4
        for lines in drawn:
            ((start, end),) = lines.get_segments()
            assert (start[1], end[1]) == (0, 1)
            assert lines.get_zorder() < 2 and lines.get_alpha() < 1


# The legend: no two entries look alike, and each says what it means.


def _legend_of(history: History) -> tuple[list[Artist], list[str]]:
    fig = figure({"run": (history, check(history))}, "Legend")
    (legend,) = fig.legends
    return legend.legend_handles, [t.get_text() for t in legend.get_texts()]


def _looks(handle: Artist) -> tuple:
    if isinstance(handle, Patch):
        return ("fill", to_rgb(handle.get_facecolor()))
    assert isinstance(handle, Line2D)
    return (to_rgb(handle.get_color()), handle.get_linestyle(), handle.get_marker())


@pytest.mark.parametrize("n_faults", [6, 12])
def test_no_two_legend_entries_look_alike_and_colours_mean_one_thing(n_faults):
    history = History({"label": "many"})
    for i in range(70):
        # Seven kinds of request, each a few times.
        history.add_request(Request(f"kind {i % 7}", T + i, T + i + 0.01, 200, None))
    for f in range(n_faults):
        history.add_event(Event(T + f, f"fault {f}", "start", None))
        history.add_event(Event(T + f + 2, f"fault {f}", "end", None))
        history.add_event(Event(T + f + 1, f"fault {f}", "mark", None, {"label": f"note {f}"}))
    handles, labels = _legend_of(history)
    looks = [_looks(h) for h in handles]
    assert len(set(looks)) == len(looks), list(zip(labels, looks, strict=True))
    by_label = dict(zip(labels, handles, strict=True))
    # Up to 8 mark texts are named each; past that, by fault ("fault 3 marks").
    mark_labels = [t for t in labels if t.startswith("note ") or t.endswith(" marks")]
    marks = [by_label[t] for t in mark_labels]
    faults = [
        by_label[t]
        for t in labels
        if t.startswith(("fault ", "other faults")) and t not in mark_labels
    ]
    kinds = [by_label[t] for t in labels if t.endswith(" requests")]
    fills = {to_rgb(h.get_facecolor()) for h in faults}
    lines = {to_rgb(h.get_color()) for h in kinds + marks}
    # A fault's fill is never a request kind's or a mark's colour, and red
    # (failure) and blue (success) mean only that.
    assert not fills & lines
    assert not {to_rgb("tab:red"), to_rgb("tab:blue")} & (fills | lines)
    # Each is named, or, past as many as there are styles, "other ...".
    assert len(kinds) == 7
    assert len(faults) == n_faults or "other faults" in labels
    assert len(marks) == n_faults or "other marks" in labels


def test_the_legend_says_what_a_failures_latency_and_a_small_bins_p99_are():
    history = History()
    for ms in range(1, 21):
        history.add_request(Request("short", T, T + ms / 1000, 200, None))
    history.add_request(Request("short", T, T + 3, None, "unfinished"))
    # Nearest-rank p99 of 20 values is the slowest of them.
    assert latency_per_second(history, T)["short"][2] == [pytest.approx(0.020)]
    _, labels = _legend_of(history)
    text = " ".join(labels).replace("\n", " ")
    assert "time to fail" not in text
    assert "a failure: from due until its error (unfinished: until the run gave up)" in text
    assert "p99 latency (by due time; the slowest in a bin of < 100)" in text
