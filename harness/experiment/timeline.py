"""timeline.png: what a person looks at first after a drain, one column of
panels per run (e.g. stock beside patched) on one shared time axis:

- requests/s that succeeded, and requests/s that failed, by completion time;
- latency per second: p50 and p99 of the successful requests of each kind,
  and every failed request's time to fail, by the time each was due;
- fault windows shaded in every panel and marks as dashed lines.

Every label is written once, in one legend above the panels, so no text lies
over the data, the titles or another label. report.py calls this; it formats
what the checker computed and judges nothing.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from harness.experiment.checker import Mark, Verdict, percentile
from harness.experiment.history import History, Request

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

T = TypeVar("T")

# The same fault looks the same in every column.
_FAULT_COLOURS = ("tab:orange", "tab:purple", "tab:brown", "tab:olive", "tab:cyan", "tab:pink")
# Request kinds in the latency panels: not red, which means failure, nor blue,
# which means requests that succeeded.
_KIND_COLOURS = ("tab:green", "tab:purple", "tab:brown", "tab:cyan", "tab:olive", "tab:pink")
# Marks are lines, told apart by colour and dash; they never share a fault's fill colour.
_MARK_STYLES = (
    ("black", "--"),
    ("dimgray", ":"),
    ("darkgreen", "-."),
    ("darkgoldenrod", "--"),
    ("darkviolet", ":"),
)
# More distinct mark texts than styles (membership churn: a swap each second,
# ten replica counts) cannot be told apart; they are named by their fault instead.
_MAX_MARK_TEXTS = len(_MARK_STYLES)
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


def per_second(history: History, t0: float) -> tuple[list[int], list[int]]:
    """Successes and failures per 1 s bin, by completion time: a failure shows
    when the client saw it, which is when a fault's effect became visible."""
    if not history.requests:
        return [], []
    n_bins = max(1, math.floor(max(r.end for r in history.requests) - t0) + 1)
    ok = [0] * n_bins
    bad = [0] * n_bins
    for r in history.requests:
        i = min(n_bins - 1, max(0, math.floor(r.end - t0)))
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
    history: History, t0: float
) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """Per request kind: the 1 s bins that have a successful request (their
    centres), and the p50 and p99 latency in each. Binned by the time each
    request was due and measured from it, like the checker's latency from the
    schedule: a stall shows where it happened, with the wait for a connection
    counted, not as one spike when the backlog clears."""
    bins: dict[str, dict[int, list[float]]] = {}
    for r in history.requests:
        if r.ok:
            second = max(0, math.floor(due(r) - t0))
            bins.setdefault(r.kind, {}).setdefault(second, []).append(r.end - due(r))
    out = {}
    for kind, by_second in bins.items():
        seconds = sorted(by_second)
        values = [sorted(by_second[s]) for s in seconds]
        out[kind] = (
            [s + 0.5 for s in seconds],
            [percentile(v, 50) for v in values],
            [percentile(v, 99) for v in values],
        )
    return out


def _gapped(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    # A NaN between seconds that are not adjacent breaks the line, so a second
    # with no successful request is a gap, not a slope drawn across it.
    out_x: list[float] = []
    out_y: list[float] = []
    for x, y in zip(xs, ys, strict=True):
        if out_x and x - out_x[-1] > 1.5:
            out_x.append(math.nan)
            out_y.append(math.nan)
        out_x.append(x)
        out_y.append(max(y, _FLOOR_S))
    return out_x, out_y


def _mark_key(mark: Mark, by_fault: bool) -> str:
    # The note alone ("drain sent") is short; the full label names the node too,
    # which report.md lists.
    if by_fault:
        return f"{mark.fault} marks"
    return str(mark.detail.get("label") or mark.fault)


def _seconds(value: float, _pos: object = None) -> str:
    return f"{value * 1000:g} ms" if value < 1 else f"{value:g} s"


def _next(palette: Sequence[T], taken: dict) -> T:
    # The next style not yet handed out, cycling once all are.
    return palette[len(taken) % len(palette)]


@dataclass
class _Styles:
    """Colours handed out as the runs are drawn, so a fault, a request kind or a
    mark looks the same in every column and is named once in the legend."""

    marks: list[Mark]
    faults: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    mark_styles: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_fault = len({_mark_key(m, False) for m in self.marks}) > _MAX_MARK_TEXTS

    def fault(self, fault: str) -> str:
        return self.faults.setdefault(fault, _next(_FAULT_COLOURS, self.faults))

    def kind(self, kind: str) -> str:
        return self.kinds.setdefault(kind, _next(_KIND_COLOURS, self.kinds))

    def mark(self, mark: Mark) -> tuple[str, str]:
        key = _mark_key(mark, self.by_fault)
        return self.mark_styles.setdefault(key, _next(_MARK_STYLES, self.mark_styles))


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
    styles = _Styles([m for _, v in runs.values() for m in v.marks])
    most_ok, most_bad = 1, 1
    latencies: list[float] = []

    for column, (name, (history, verdict)) in enumerate(runs.items()):
        traffic, failed, latency = panels = list(grid[:, column])
        # Named so a reader of the figure (the tests) can find each run's panels.
        for role, ax in zip(PANELS, panels, strict=True):
            ax.set_label(f"{role}: {name}")
            ax.grid(alpha=0.3)
        ok, bad = per_second(history, verdict.t0)
        if ok:
            edges = range(len(ok) + 1)
            traffic.stairs(ok, edges, color="tab:blue", lw=1.2)
            failed.stairs(bad, edges, color="tab:red", fill=True, alpha=0.8)
            most_ok, most_bad = max(most_ok, *ok), max(most_bad, *bad)
        else:
            traffic.text(0.5, 0.5, "no requests", transform=traffic.transAxes, ha="center")
        latencies += _draw_latency(latency, history, verdict.t0, styles)
        _draw_faults(panels, verdict, styles)
        heading = name if name == verdict.label else f"{name} ({verdict.label})"
        # Two lines: a long run name and its outcome never run past the column.
        traffic.set_title(
            f"{heading}\n{verdict.failures:,} failed of {verdict.requests:,}: {verdict.result}",
            fontsize=10,
        )

    # Rows share their y axis, so these limits hold for every column.
    grid[0, 0].set_ylim(0, most_ok * 1.1)
    grid[1, 0].set_ylim(0, most_bad * 1.1)
    grid[1, 0].yaxis.set_major_locator(MaxNLocator(integer=True))
    _latency_axis(grid[2, 0], latencies)
    for ax, text in zip(grid[:, 0], ("ok / s", "failed / s", "latency"), strict=True):
        ax.set_ylabel(text)
    fig.supxlabel("seconds from the run's first request", fontsize=10)
    _legend(fig, styles, max(v.grace_s for _, v in runs.values()), title, width)
    return fig


def _draw_latency(ax: Axes, history: History, t0: float, styles: _Styles) -> list[float]:
    """p50 and p99 per kind per second, and each failure's time to fail; returns
    the values drawn, for the row's shared scale."""
    drawn: list[float] = []
    for kind, (xs, p50, p99) in latency_per_second(history, t0).items():
        for values, style, lw in ((p50, "-", 1.2), (p99, "--", 0.9)):
            # Markers keep a lone second (a burst a scenario sent) visible.
            (line,) = ax.plot(
                *_gapped(xs, values), ls=style, lw=lw, marker=".", ms=4, color=styles.kind(kind)
            )
            line.set_gid("latency")
        drawn += [max(v, _FLOOR_S) for v in p50 + p99]
    failures = [r for r in history.requests if not r.ok]
    if failures:
        xs = [due(r) - t0 for r in failures]
        ys = [max(r.end - due(r), _FLOOR_S) for r in failures]
        (line,) = ax.plot(xs, ys, ls="none", marker="x", ms=4, color="tab:red", alpha=0.7)
        line.set_gid("latency")
        drawn += ys
    return drawn


def _draw_faults(panels: Sequence[Axes], verdict: Verdict, styles: _Styles) -> None:
    """Fault windows shaded, paler over the grace after each, and marks as lines,
    in every panel of a run: no text, the legend names them."""
    # Many marks (one a second) would hide the data under solid lines.
    mark_lw = 1.1 if len(verdict.marks) <= 10 else 0.5
    for ax in panels:
        for w in verdict.windows:
            colour = styles.fault(w.fault)
            ax.axvspan(w.start, w.end, color=colour, alpha=0.25, lw=0)
            ax.axvspan(w.end, w.end + verdict.grace_s, color=colour, alpha=0.08, lw=0)
        for m in verdict.marks:
            colour, style = styles.mark(m)
            ax.axvline(m.time, color=colour, ls=style, lw=mark_lw)


def _legend(fig: Figure, styles: _Styles, grace_s: float, title: str, width: float) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], color="tab:blue", label="ok / s (by completion)"),
        Patch(color="tab:red", alpha=0.8, label="failed / s (by completion)"),
        Line2D([], [], color="dimgray", ls="-", marker=".", label="p50 latency (by due time)"),
        Line2D([], [], color="dimgray", ls="--", marker=".", label="p99 latency (by due time)"),
        Line2D([], [], color="tab:red", ls="none", marker="x", label="a failure: time to fail"),
    ]
    handles += [
        Line2D([], [], color=c, lw=2, label=f"{k} requests") for k, c in styles.kinds.items()
    ]
    handles += [Patch(color=c, alpha=0.35, label=f) for f, c in styles.faults.items()]
    if styles.faults:
        handles.append(
            Patch(color="gray", alpha=0.15, label=f"pale: grace after a fault ({grace_s:g} s)")
        )
    handles += [Line2D([], [], color=c, ls=s, label=k) for k, (c, s) in styles.mark_styles.items()]
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
    ax.yaxis.set_major_formatter(FuncFormatter(_seconds))
    ax.yaxis.set_minor_formatter(NullFormatter())
