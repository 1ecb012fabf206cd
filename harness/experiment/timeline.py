"""timeline.png: what a person looks at first after a drain, one column of
panels per run (e.g. stock beside patched) on one shared time axis:

- requests/s that succeeded, and requests/s that failed, by completion time,
  counted in bins as wide as the runs' length needs (1 s for a scenario, minutes
  for a soak) and divided by the width, so the axis still reads per second;
- latency per bin: p50 and p99 of the successful requests of each kind, by the
  time each was due, and every failed request from its due time until its
  error (or, for one still unfinished, until the run gave up on it);
- fault windows shaded in every panel, and marks as faint lines behind the data
  (as short ticks along each panel's top edge when a run has many).

Every label is written once, in one legend above the panels, so no text lies
over the data, the titles or another label. report.py calls this; it formats
what the checker computed and judges nothing.

Drawing costs a few artists per panel whatever the run's size: bins, marks and
windows are collections, and past a few thousand failures only one failure per
bin and latency step is drawn (the rest would be markers on top of it).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from harness.experiment.checker import FaultWindow, Mark, Verdict, percentile
from harness.experiment.history import History, Request

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

T = TypeVar("T")

# Fault windows are pale fills; request kinds are latency lines; marks are thin
# lines. No two of these palettes share a colour, and none uses red (failure)
# or blue (requests that succeeded), so a colour names one thing.
_FAULT_COLOURS = ("tab:orange", "gold", "lightskyblue", "yellowgreen", "plum")
_KIND_COLOURS = (
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:cyan",
    "tab:olive",
    "tab:gray",
)
# Marks are told apart by colour (all a short tick can show) and by dash.
_MARK_STYLES = (
    ("black", "--"),
    ("dimgray", ":"),
    ("darkgreen", "-."),
    ("darkgoldenrod", "--"),
    ("darkviolet", ":"),
    ("teal", "-."),
    ("saddlebrown", "--"),
    ("navy", ":"),
)
# More distinct mark texts than styles (membership churn: a swap each second,
# ten replica counts) cannot be told apart; they are named by their fault
# instead, and past that many faults the last style is every other fault's.
_OTHER_MARKS = "other marks"
# Likewise, past as many faults or request kinds as colours.
_OTHER_FAULTS = "other faults"
_OTHER_KINDS = "other"
# Past this many marks in a run, full-height lines would hide the data: every
# run's marks are short ticks along each panel's top edge instead.
_MANY_MARKS = 50
_TICK_HEIGHT = 0.08  # of the panel's height
# Below the data (which is drawn at 2 and up), above the fault windows (0.9).
_MARK_Z = 1.6
# Bin widths, shortest first: the first that gives the longest run at most
# _MAX_BINS bins, about one per pixel of a column; past a day, whole days.
_BIN_WIDTHS = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
_MAX_BINS = 500
# Past this many bins in a column a marker on every bin's latency would merge
# into a band; only a bin with no neighbour (a burst a scenario sent) keeps one.
_MARKED_BINS = 150
# Nearest-rank p99 of fewer values than this is the slowest of them.
_P99_FULL = 100
# Every failure in the latency panel up to this many; past it, one per bin and
# twentieth of a decade of latency, which looks the same.
_MAX_FAILURE_POINTS = 5000
_FAILURE_STEPS_PER_DECADE = 20
# A bin with any failure is drawn at least this tall (of the panel's height)
# and _FAILURE_LW points wide, however narrow the bin or small its rate.
_FAILURE_FLOOR = 0.04
_FAILURE_LW = 1.5
# Log-scale latency cannot show zero; a latency below this is drawn at it.
_FLOOR_S = 1e-4
# One row of panels each, top to bottom, and their heights. An axes is labelled
# "ROW: run name" ("latency: 2.60.0-patched").
PANELS = ("requests", "failures", "latency")
_HEIGHTS = (1.0, 0.7, 1.3)
_DPI = 100


def write_timeline(path: Path, runs: dict[str, tuple[History, Verdict]], title: str) -> Figure:
    """Draw the timeline of `runs` (column name -> history and verdict) to `path`
    and return the figure, so a test can measure what was saved."""
    fig = figure(runs, title)
    fig.savefig(path, dpi=_DPI)
    return fig


def bin_width(span_s: float) -> float:
    """The bin width for runs `span_s` long: the shortest of _BIN_WIDTHS that
    makes at most _MAX_BINS bins, so a soak's failure is not a sliver narrower
    than a pixel and a scenario's stay a second each."""
    for width in _BIN_WIDTHS:
        if span_s / width <= _MAX_BINS:
            return float(width)
    day = _BIN_WIDTHS[-1]
    return float(day * math.ceil(span_s / _MAX_BINS / day))


def per_second(history: History, t0: float, width: float = 1.0) -> tuple[list[int], list[int]]:
    """Successes and failures per bin `width` seconds wide (counts: divide by
    the width for a rate), by completion time: a failure shows when the client
    saw it, which is when a fault's effect became visible."""
    if not history.requests:
        return [], []
    n_bins = max(1, math.floor((max(r.end for r in history.requests) - t0) / width) + 1)
    ok = [0] * n_bins
    bad = [0] * n_bins
    for r in history.requests:
        i = min(n_bins - 1, max(0, math.floor((r.end - t0) / width)))
        if r.ok:
            ok[i] += 1
        else:
            bad[i] += 1
    return ok, bad


def due(r: Request) -> float:
    """When the request was meant to go: the open loop's schedule, or its send
    for a request a scenario sent itself (those have no schedule)."""
    return r.scheduled if r.scheduled is not None else r.start


def latency_per_second(
    history: History, t0: float, width: float = 1.0
) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """Per request kind: the bins `width` seconds wide that have a successful
    request (their centres), and the p50 and p99 latency in each. Binned by the
    time each request was due and measured from it, like the checker's latency
    from the schedule: a stall shows where it happened, with the wait for a
    connection counted, not as one spike when the backlog clears. A bin of
    fewer than _P99_FULL values has its slowest as its (nearest-rank) p99."""
    bins: dict[str, dict[int, list[float]]] = {}
    for r in history.requests:
        if r.ok:
            i = max(0, math.floor((due(r) - t0) / width))
            bins.setdefault(r.kind, {}).setdefault(i, []).append(r.end - due(r))
    out = {}
    for kind, by_bin in bins.items():
        indices = sorted(by_bin)
        centres, p50, p99 = [], [], []
        for i in indices:
            values = sorted(by_bin.pop(i))
            centres.append((i + 0.5) * width)
            p50.append(percentile(values, 50))
            p99.append(percentile(values, 99))
        out[kind] = (centres, p50, p99)
    return out


def failure_points(
    history: History, t0: float, width: float = 1.0
) -> tuple[list[float], list[float]]:
    """Every failed request at the time it was due, and how long from then
    until it ended: until its error, or, for one that never finished, until
    the run gave up on it. Past _MAX_FAILURE_POINTS failures, the first in
    each bin and 1/_FAILURE_STEPS_PER_DECADE decade of latency, so a run that
    fails a million requests draws thousands of markers, not a million."""
    failures = [r for r in history.requests if not r.ok]
    thin = len(failures) > _MAX_FAILURE_POINTS
    seen: set[tuple[int, int]] = set()
    xs: list[float] = []
    ys: list[float] = []
    for r in failures:
        x = due(r) - t0
        y = max(r.end - due(r), _FLOOR_S)
        if thin:
            cell = (math.floor(x / width), round(math.log10(y) * _FAILURE_STEPS_PER_DECADE))
            if cell in seen:
                continue
            seen.add(cell)
        xs.append(x)
        ys.append(y)
    return xs, ys


def _gapped(
    xs: Sequence[float], ys: Sequence[float], width: float
) -> tuple[list[float], list[float], list[int]]:
    # A NaN between bins that are not adjacent breaks the line, so a bin with
    # no successful request is a gap, not a slope drawn across it. Also returns
    # the points with no neighbour, which only a marker shows.
    out_x: list[float] = []
    out_y: list[float] = []
    for x, y in zip(xs, ys, strict=True):
        if out_x and x - out_x[-1] > 1.5 * width:
            out_x.append(math.nan)
            out_y.append(math.nan)
        out_x.append(x)
        out_y.append(max(y, _FLOOR_S))
    lone = [
        i
        for i in range(len(out_x))
        if not math.isnan(out_x[i])
        and (i == 0 or math.isnan(out_x[i - 1]))
        and (i == len(out_x) - 1 or math.isnan(out_x[i + 1]))
    ]
    return out_x, out_y, lone


def _mark_key(mark: Mark, by_fault: bool) -> str:
    # The note alone ("drain sent") is short; the full label names the node too,
    # which report.md lists.
    if by_fault:
        return f"{mark.fault} marks"
    return str(mark.detail.get("label") or mark.fault)


def _seconds(value: float, _pos: object = None) -> str:
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"


def _width_text(width: float) -> str:
    return f"{width:g} s" if width < 60 else f"{width / 60:g} min"


def _named(keys: Sequence[str], palette: Sequence[T], other: str) -> dict[str, T]:
    """A style per distinct key, in order, no two alike: past the palette's
    length, the last style is every remaining key's, named `other`."""
    distinct = list(dict.fromkeys(keys))
    if len(distinct) > len(palette):
        distinct = [*distinct[: len(palette) - 1], other]
    return dict(zip(distinct, palette, strict=False))


@dataclass
class _Styles:
    """A style for every fault, request kind and mark of every run, handed out
    before any is drawn, so each looks the same in every column, is named once
    in the legend, and no two legend entries look alike."""

    verdicts: Sequence[Verdict]
    ticks: bool = False  # marks drawn as ticks along the top edge
    faults: dict[str, str] = field(init=False)
    kinds: dict[str, str] = field(init=False)
    mark_styles: dict[str, tuple[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        marks = [m for v in self.verdicts for m in v.marks]
        self.by_fault = len({_mark_key(m, False) for m in marks}) > len(_MARK_STYLES)
        self.mark_styles = _named(
            [_mark_key(m, self.by_fault) for m in marks], _MARK_STYLES, _OTHER_MARKS
        )
        self.faults = _named(
            [w.fault for v in self.verdicts for w in v.windows], _FAULT_COLOURS, _OTHER_FAULTS
        )
        # Only kinds with a successful request have latency lines.
        succeeded = [k for v in self.verdicts for k, s in v.kinds.items() if s.latency is not None]
        self.kinds = _named(succeeded, _KIND_COLOURS, _OTHER_KINDS)

    def fault(self, fault: str) -> str:
        return self.faults.get(fault) or self.faults[_OTHER_FAULTS]

    def kind(self, kind: str) -> str:
        return self.kinds.get(kind) or self.kinds[_OTHER_KINDS]

    def mark_key(self, mark: Mark) -> str:
        key = _mark_key(mark, self.by_fault)
        return key if key in self.mark_styles else _OTHER_MARKS


def figure(runs: dict[str, tuple[History, Verdict]], title: str) -> Figure:
    """The timeline as a figure on an Agg canvas of its own (no pyplot, so no
    global backend state), laid out by constrained layout."""
    # Lazy: only report writing needs matplotlib.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    width = max(10.0, 5.5 * len(runs) + 1)
    fig = Figure(figsize=(width, 8.5), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(
        len(PANELS), len(runs), sharex=True, sharey="row", squeeze=False, height_ratios=_HEIGHTS
    )
    verdicts = [v for _, v in runs.values()]
    # One width for every column: they share the time axis and the y axis.
    bin_s = bin_width(max((v.duration_s for v in verdicts), default=0.0))
    most_marks = max((len(v.marks) for v in verdicts), default=0)
    styles = _Styles(verdicts, ticks=most_marks > _MANY_MARKS)
    many_bins = max((v.duration_s for v in verdicts), default=0.0) / bin_s > _MARKED_BINS
    most_ok, most_bad = 0.0, 0.0
    latencies: list[float] = []

    for column, (name, (history, verdict)) in enumerate(runs.items()):
        traffic, failed, latency = panels = list(grid[:, column])
        # Named so a reader of the figure (the tests) can find each run's panels.
        for role, ax in zip(PANELS, panels, strict=True):
            ax.set_label(f"{role}: {name}")
            ax.grid(alpha=0.3)
        ok, bad = per_second(history, verdict.t0, bin_s)
        if ok:
            edges = [i * bin_s for i in range(len(ok) + 1)]
            ok_rate = [n / bin_s for n in ok]
            bad_rate = [n / bin_s for n in bad]
            traffic.stairs(ok_rate, edges, color="tab:blue", lw=1.2, zorder=2.5, gid="ok")
            _draw_failures(failed, bad_rate, bin_s)
            most_ok, most_bad = max(most_ok, *ok_rate), max(most_bad, *bad_rate)
        else:
            traffic.text(0.5, 0.5, "no requests", transform=traffic.transAxes, ha="center")
        latencies += _draw_latency(latency, history, verdict.t0, bin_s, many_bins, styles)
        for ax in panels:
            _draw_windows(ax, verdict.windows, verdict.grace_s, styles)
            _draw_marks(ax, verdict.marks, styles)
        heading = name if name == verdict.label else f"{name} ({verdict.label})"
        # Two lines: a long run name and its outcome never run past the column.
        traffic.set_title(
            f"{heading}\n{verdict.failures:,} failed of {verdict.requests:,}: {verdict.result}",
            fontsize=10,
        )

    # Rows share their axes, so these limits hold for every column.
    grid[0, 0].set_xlim(*_time_span(verdicts))
    grid[0, 0].set_ylim(0, (most_ok or 1) * 1.1)
    grid[1, 0].set_ylim(0, (most_bad or 1) * 1.1)
    if bin_s == 1:
        grid[1, 0].yaxis.set_major_locator(MaxNLocator(integer=True))
    _latency_axis(grid[2, 0], latencies)
    bins = f"{_width_text(bin_s)} bins"
    for ax, text in zip(grid[:, 0], ("ok / s", "failed / s", "latency"), strict=True):
        ax.set_ylabel(f"{text}\n({bins})")
    fig.supxlabel("seconds from the run's first request", fontsize=10)
    _legend(fig, styles, max((v.grace_s for v in verdicts), default=0.0), title, width)
    return fig


def _time_span(verdicts: Sequence[Verdict]) -> tuple[float, float]:
    # Every request, window (with its grace) and mark of every run, and a
    # little room either side.
    low = min([0.0, *(w.start for v in verdicts for w in v.windows)])
    low = min([low, *(m.time for v in verdicts for m in v.marks)])
    high = max([1.0, *(v.duration_s for v in verdicts)])
    high = max([high, *(w.end + v.grace_s for v in verdicts for w in v.windows)])
    high = max([high, *(m.time for v in verdicts for m in v.marks)])
    room = (high - low) * 0.02
    return low - room, high + room


def _draw_failures(ax: Axes, rates: Sequence[float], width: float) -> None:
    """Failed requests per second in each bin, and every bin with any drawn at
    least _FAILURE_LW points wide and _FAILURE_FLOOR of the panel tall: a soak's
    bin is narrower than a pixel, and one failure in it a rate far below the
    panel's top, yet that failure is what the reader is looking for."""
    edges = [i * width for i in range(len(rates) + 1)]
    ax.stairs(rates, edges, color="tab:red", fill=True, lw=0, zorder=2, gid="failed")
    hit = [(i + 0.5) * width for i, rate in enumerate(rates) if rate]
    if hit:
        tops = [rate for rate in rates if rate]
        style = {"color": "tab:red", "lw": _FAILURE_LW, "zorder": 2}
        _vlines(ax, hit, 0, tops, in_data=True).set(gid="failed: at least a line wide", **style)
        _vlines(ax, hit, 0, _FAILURE_FLOOR).set(gid="failed: any", **style)


def _draw_latency(
    ax: Axes, history: History, t0: float, width: float, many_bins: bool, styles: _Styles
) -> list[float]:
    """p50 and p99 per kind per bin, and each failure; returns the values
    drawn, for the row's shared scale."""
    drawn: list[float] = []
    for kind, (xs, p50, p99) in latency_per_second(history, t0, width).items():
        for name, values, style, lw in (("p50", p50, "-", 1.2), ("p99", p99, "--", 0.9)):
            gx, gy, lone = _gapped(xs, values, width)
            # Markers keep a lone bin (a burst a scenario sent) visible; on
            # every bin only while there are few enough not to merge.
            (line,) = ax.plot(
                gx,
                gy,
                ls=style,
                lw=lw,
                marker=".",
                ms=4,
                markevery=lone if many_bins else None,
                color=styles.kind(kind),
                zorder=2.5,
            )
            line.set_gid(f"{name}: {kind}")
        drawn += [max(v, _FLOOR_S) for v in p50 + p99]
    xs, ys = failure_points(history, t0, width)
    if xs:
        (line,) = ax.plot(
            xs, ys, ls="none", marker="x", ms=4, color="tab:red", alpha=0.7, zorder=2.6
        )
        line.set_gid("failures")
        drawn += ys
    return drawn


def _draw_windows(
    ax: Axes, windows: Sequence[FaultWindow], grace_s: float, styles: _Styles
) -> None:
    """Fault windows shaded, paler over the grace after each: one collection
    per fault and shade, under everything else."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgba

    by_fault: dict[str, list[FaultWindow]] = {}
    for w in windows:
        by_fault.setdefault(w.fault, []).append(w)
    for fault, some in by_fault.items():
        colour = styles.fault(fault)
        # A window's edges are drawn too, so one narrower than a pixel (a
        # minute-long preemption in a day-long soak) still shows.
        for role, spans, fill, edge in (
            ("window", [(w.start, w.end) for w in some], 0.25, 0.4),
            ("grace", [(w.end, w.end + grace_s) for w in some], 0.08, 0.0),
        ):
            boxes = [[(s, 0.0), (e, 0.0), (e, 1.0), (s, 1.0)] for s, e in spans]
            shade = PolyCollection(
                boxes,
                transform=ax.get_xaxis_transform(),
                facecolors=to_rgba(colour, fill),
                edgecolors=to_rgba(colour, edge),
                lw=0.8 if edge else 0,
                zorder=0.9,
            )
            shade.set_gid(f"{role}: {fault}")
            ax.add_collection(shade, autolim=False)


def _draw_marks(ax: Axes, marks: Sequence[Mark], styles: _Styles) -> None:
    """Marks behind the data, one collection per style: faint full-height
    lines, or, past _MANY_MARKS in a run, short ticks along the top edge. No
    text: the legend names them."""
    by_key: dict[str, list[float]] = {}
    for m in marks:
        by_key.setdefault(styles.mark_key(m), []).append(m.time)
    # Many lines (one a second) would hide the data even when faint.
    lw = 1.0 if len(marks) <= 10 else 0.6
    for key, times in by_key.items():
        colour, dash = styles.mark_styles[key]
        # Ticks are solid (too short for a dash) and paler: at one a second
        # on a long run they merge into a band, which must not be black.
        low, ls, alpha = (1 - _TICK_HEIGHT, "-", 0.5) if styles.ticks else (0.0, dash, 0.6)
        _vlines(ax, times, low, 1).set(
            color=colour, linestyle=ls, lw=lw, alpha=alpha, zorder=_MARK_Z, gid=f"marks: {key}"
        )


def _vlines(
    ax: Axes,
    xs: Sequence[float],
    low: float,
    high: float | Sequence[float],
    in_data: bool = False,
) -> LineCollection:
    """Vertical segments at `xs` as one collection, from `low` to `high` in
    fractions of the panel's height (or in data, `in_data`). Built from one
    array: Axes.vlines makes a masked array per segment, which took a second
    for a panel of 3,600 marks. The axes' limits are set from the runs, not
    from these."""
    import numpy as np
    from matplotlib.collections import LineCollection

    segments = np.empty((len(xs), 2, 2))
    segments[:, :, 0] = np.asarray(xs, dtype=float)[:, None]
    segments[:, 0, 1] = low
    segments[:, 1, 1] = high
    transform = ax.transData if in_data else ax.get_xaxis_transform()
    lines = LineCollection(list(segments), transform=transform)
    ax.add_collection(lines, autolim=False)
    return lines


def _legend(fig: Figure, styles: _Styles, grace_s: float, title: str, width: float) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], color="tab:blue", label="ok / s (by completion)"),
        Patch(color="tab:red", label="failed / s (by completion;\nany failure shows)"),
        Line2D([], [], color="dimgray", ls="-", marker=".", label="p50 latency (by due time)"),
        Line2D(
            [],
            [],
            color="dimgray",
            ls="--",
            marker=".",
            label=f"p99 latency (by due time;\nthe slowest in a bin of < {_P99_FULL})",
        ),
        Line2D(
            [],
            [],
            color="tab:red",
            ls="none",
            marker="x",
            label="a failure: from due until its error\n(unfinished: until the run gave up)",
        ),
    ]
    handles += [
        Line2D([], [], color=c, lw=2, label=f"{k} requests") for k, c in styles.kinds.items()
    ]
    handles += [Patch(color=c, alpha=0.35, label=f) for f, c in styles.faults.items()]
    if styles.faults:
        handles.append(
            Patch(color="gray", alpha=0.15, label=f"pale: grace after a fault ({grace_s:g} s)")
        )
    for key, (colour, dash) in styles.mark_styles.items():
        if styles.ticks:
            label = f"{key} (ticks at the top)"
            handles.append(Line2D([], [], color=colour, ls="none", marker="|", ms=8, label=label))
        else:
            handles.append(Line2D([], [], color=colour, ls=dash, label=key))
    # Above the panels, where constrained layout makes room for it. The report's
    # title is the legend's own title: a suptitle beside an outside legend is
    # not laid out around it and the two overlap. About 2.3 in a column keeps
    # the legend narrower than the figure.
    fig.legend(
        handles=handles,
        loc="outside upper center",
        ncols=max(1, min(len(handles), int(width // 2.3))),
        fontsize=8,
        frameon=False,
        # About ten 12 pt characters an inch: a long title wraps inside the figure.
        title=textwrap.fill(title, int(width * 9)),
        title_fontproperties={"size": 12},
    )


def _latency_axis(ax: Axes, values: list[float]) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    # Log scale: a drain's latency runs from milliseconds to the request timeout.
    # Whole decades, at least two, so there are always labelled ticks, with a
    # little room so no point sits on the frame.
    ax.set_yscale("log")
    if values:
        low = 10 ** math.floor(math.log10(min(values) * 0.8))
        high = 10 ** math.ceil(math.log10(max(values) * 1.25))
        ax.set_ylim(low, max(high, low * 100))
    else:
        ax.set_ylim(1e-3, 10)
    ax.yaxis.set_major_formatter(FuncFormatter(_seconds))
    ax.yaxis.set_minor_formatter(NullFormatter())
