"""timeline.png, drawn from every saved run (tests/unit/saved_runs/) and
measured with matplotlib's own renderer: no text over the title or another
text, none outside the figure, and a latency panel with data for each run.
Looking at one image proves nothing about the next run's labels; measuring
every run's does."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from harness.experiment.checker import Verdict, check
from harness.experiment.history import History, Request, history_name
from harness.experiment.timeline import latency_per_second, per_second, write_timeline

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
        lines = [line for line in drawn if line.get_gid() == "latency"]
        points = [y for line in lines for y in line.get_ydata() if math.isfinite(y)]
        assert points and all(y > 0 for y in points), column


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


def test_a_run_with_no_requests_still_draws(tmp_path):
    empty = History({"label": "empty"})
    fig = write_timeline(tmp_path / "timeline.png", {"empty": (empty, check(empty))}, "Nothing")
    assert text_problems(fig) == []
