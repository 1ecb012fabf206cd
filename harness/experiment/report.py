"""The report of a run: report.md for people, report.json for machines, and
timeline.png (drawn by timeline.py) to see at a glance when requests failed
and slowed relative to the faults.

This is the one place that writes reports. It formats verdicts the checker
already computed, including the spot-notice acceptance table
(docs/architecture.md) and the side-by-side comparison of images; it does not
judge anything itself. Raw histories are saved by the caller (History.save);
report.json holds each run's meta and verdict and, for a scenario, its
judgement (checks, facts and findings), so that other tools read results from
it rather than from the markdown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from harness.experiment import timeline
from harness.experiment.checker import FaultWindow, Verdict
from harness.experiment.history import History

MD_NAME = "report.md"
JSON_NAME = "report.json"
PNG_NAME = "timeline.png"
# report.md's section on where and how requests failed (the soak prints it on failure)
FAILURES_HEADING = "## Failures by fault window"


def record_text(gap: str | None) -> str:
    """A verdict's record in one cell: complete, or the gap."""
    return "complete" if gap is None else f"INCOMPLETE: {gap}"


def format_percent(rate: float) -> str:
    """A fraction as a percentage with two significant digits once it is small, so
    one failure in 69 million reads 0.0000014%, as in the spot-notice acceptance table."""
    pct = rate * 100
    if pct == 0:
        return "0%"
    decimals = max(2, 1 - math.floor(math.log10(abs(pct))))
    text = f"{pct:.{decimals}f}".rstrip("0").rstrip(".")
    return f"{text}%"


def _approx(value: float) -> str:
    # Three significant figures: a mean over runs is a ballpark, and the acceptance
    # table says so with "~15,100".
    if value == 0:
        return "~0"
    digits = math.floor(math.log10(abs(value)))
    rounded = round(value, 2 - digits)
    decimals = max(0, 2 - digits)
    return f"~{rounded:,.{decimals}f}"


def _total_duration(seconds: float) -> str:
    # Whole minutes read well for long soaks (the acceptance table: "78 min") but would turn a
    # 100 s scenario into "2 min"; short totals stay in seconds like the rows.
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds:.1f}s"


def format_seconds(value: float | None, unit: str = "s") -> str:
    """A duration to the millisecond, `-` if there is none."""
    return "-" if value is None else f"{value:.3f}{unit}"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def table(verdicts: list[Verdict]) -> str:
    """The spot-notice acceptance table: one row per run, then a total row."""
    lines = [
        _row(["Run", "Duration", "Requests", "Failures", "RPS", "Result"]),
        "|---|---:|---:|---:|---:|---|",
    ]
    for v in verdicts:
        lines.append(
            _row(
                [
                    v.label,
                    f"{v.duration_s:.1f}s",
                    f"{v.requests:,}",
                    f"{v.failures:,}",
                    f"{v.rps:,.2f}",
                    v.result,
                ]
            )
        )
    n = len(verdicts)
    mean_rps = sum(v.rps for v in verdicts) / n if n else 0.0
    lines.append(
        _row(
            [
                "total",
                _total_duration(sum(v.duration_s for v in verdicts)),
                f"{sum(v.requests for v in verdicts):,}",
                f"{sum(v.failures for v in verdicts):,}",
                _approx(mean_rps) if n else "-",
                f"{sum(v.passed for v in verdicts)} / {n}",
            ]
        )
    )
    return "\n".join(lines)


def side_by_side(verdicts: dict[str, Verdict]) -> str:
    """Runs on different images as columns, keyed by column name (e.g. "stock
    2.59.0"), so a baseline's failures sit next to the fix's zero."""
    names = list(verdicts)
    runs = list(verdicts.values())
    classes: list[str] = []
    for v in runs:
        classes.extend(c for c in v.failures_by_class if c not in classes)

    rows: list[tuple[str, list[str]]] = [
        ("record", [record_text(v.record_gap) for v in runs]),
        ("requests", [f"{v.requests:,}" for v in runs]),
        ("failures", [f"{v.failures:,}" for v in runs]),
        ("failure rate", [format_percent(v.failure_rate) for v in runs]),
    ]
    for cls in classes:
        rows.append((f"failures: {cls}", [f"{v.failures_by_class.get(cls, 0):,}" for v in runs]))
    rows += [
        ("fault windows", [f"{len(v.windows)}" for v in runs]),
        ("failures in fault windows", [f"{v.failures_in_windows:,}" for v in runs]),
        ("failures outside any fault", [f"{v.failures_outside:,}" for v in runs]),
        ("latency p50", [format_seconds(v.latency.p50 if v.latency else None) for v in runs]),
        ("latency p90", [format_seconds(v.latency.p90 if v.latency else None) for v in runs]),
        ("latency p99", [format_seconds(v.latency.p99 if v.latency else None) for v in runs]),
        ("latency p99.9", [format_seconds(v.latency.p999 if v.latency else None) for v in runs]),
        ("latency max", [format_seconds(v.latency.max if v.latency else None) for v in runs]),
        (
            "result",
            [f"{v.result} (threshold {format_percent(v.threshold)})" for v in runs],
        ),
    ]
    lines = [_row(["", *names]), "|---|" + "---:|" * len(names)]
    lines += [_row([name, *cells]) for name, cells in rows]
    return "\n".join(lines)


def write_report(
    out_dir: Path,
    title: str,
    runs: dict[str, tuple[History, Verdict]],
    sections: dict[str, str] | None = None,
    judgement: dict | None = None,
) -> dict[str, Path]:
    """Write report.md, report.json and timeline.png into out_dir.

    `runs` maps a column name (e.g. "stock 2.59.0") to its history and verdict;
    `sections` maps a heading to a markdown block the scenario supplies;
    `judgement` (JSON data: a scenario's checks, facts and findings) goes into
    report.json as it is. Returns the written paths under the keys "md", "json"
    and "png".
    """
    if not runs:
        raise ValueError("write_report needs at least one run; nothing was written")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "md": out_dir / MD_NAME,
        "json": out_dir / JSON_NAME,
        "png": out_dir / PNG_NAME,
    }
    paths["md"].write_text(_markdown(title, runs, sections or {}))
    paths["json"].write_text(_json(title, runs, sections or {}, judgement))
    timeline.write_timeline(paths["png"], runs, title)
    return paths


def _markdown(
    title: str, runs: dict[str, tuple[History, Verdict]], sections: dict[str, str]
) -> str:
    verdicts = {name: verdict for name, (_, verdict) in runs.items()}
    thresholds = sorted({format_percent(v.threshold) for v in verdicts.values()})
    # The first three lines say which images ran, what each lost, and its verdict.
    parts = [
        f"# {title}",
        " · ".join(
            f"**{name}**: {v.failures:,} of {v.requests:,} requests failed, "
            f"{'PASSED' if v.passed and not v.record_gap else 'FAILED'}"
            for name, v in verdicts.items()
        ),
    ]
    gaps = [f"- {name}: {v.record_gap}" for name, v in verdicts.items() if v.record_gap]
    if gaps:
        parts.append(
            "**The record is incomplete: requests were scheduled that have no row, "
            "or more than one, so these runs FAILED whatever their rows say.**\n\n"
            + "\n".join(gaps)
        )
    parts += [
        "## Side by side",
        side_by_side(verdicts),
        "## Runs",
        table(list(verdicts.values())),
        f"A run passes when at most {' / '.join(thresholds)} of its requests fail.",
        FAILURES_HEADING,
    ]
    for name, (history, verdict) in runs.items():
        parts.extend(_run_detail(name, verdict))
        if verdict.failures:
            parts.append(failed_requests(history, verdict))
    for heading, body in sections.items():
        parts.extend([f"## {heading}", body.strip()])
    parts.extend(
        [
            "## Timeline",
            "Successful and failed requests per second (by completion time), fault"
            " windows shaded, marks as dashed lines.",
            f"![timeline]({PNG_NAME})",
        ]
    )
    return "\n\n".join(parts) + "\n"


def _classes(by_class: dict[str, int]) -> str:
    return ", ".join(f"{cls} {n:,}" for cls, n in by_class.items()) or "-"


def _window_end(w: FaultWindow) -> str:
    return f"{w.end:.1f}s (unmatched)" if w.unmatched else f"{w.end:.1f}s"


def _run_detail(name: str, v: Verdict) -> list[str]:
    heading = name if name == v.label else f"{name} ({v.label})"
    out = [f"### {heading}"]
    if v.windows:
        out.append(
            f"Times are seconds from the run's first request. A failure counts against"
            f" every window it overlaps, up to {v.grace_s:.1f}s after the window ends."
        )
        rows = [
            "| Fault | Target | Start | End | Requests | Failures | By class |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
        for w in v.windows:
            rows.append(
                f"| {w.fault} | {w.target or '-'} | {w.start:.1f}s | {_window_end(w)}"
                f" | {w.requests:,} | {w.failures:,} | {_classes(w.failures_by_class)} |"
            )
        out.append("\n".join(rows))
    else:
        out.append("No fault windows in this run.")
    outside = f"Outside any fault: {v.failures_outside:,} failures"
    if v.outside_by_class:
        outside += f" ({_classes(v.outside_by_class)})"
    out.append(outside + ".")
    if v.marks:
        out.append("Marks:\n\n" + "\n".join(f"- {m.time:.1f}s {m.label}" for m in v.marks))
    if v.kinds:
        out.append(_latency_table(v))
        out.append(_outcome_table(v))
    return out


FAILED_SHOWN = 20  # a run that lost thousands says so in its counts; these are for diagnosis


def failed_requests(history: History, v: Verdict) -> str:
    """The run's first failed requests, one row each, with what a diagnosis
    needs: when (from the run's first request), which connection and node, how
    long it took, and the client's own words for the error."""
    failed = sorted((r for r in history.requests if not r.ok), key=lambda r: r.start)
    rows = [
        f"Failed requests ({min(len(failed), FAILED_SHOWN)} of {len(failed):,}, the first):",
        "",
        "| Sent | Kind | Outcome | Took | Connection | Node | Detail |",
        "|---:|---|---|---:|---:|---|---|",
    ]
    for r in failed[:FAILED_SHOWN]:
        sent = f"{r.start - v.t0:.3f}s" + ("" if r.sent else " (never sent)")
        detail = (r.detail or "-").replace("|", "/").replace("\n", " ")
        rows.append(
            f"| {sent} | {r.kind} | {r.outcome} | {r.latency:.3f}s | "
            f"{'-' if r.conn is None else r.conn} | {r.node or '-'} | {detail} |"
        )
    return "\n".join(rows)


def _latency_table(v: Verdict) -> str:
    rows = [
        "Latency of successful requests, from the send and from the time the open loop"
        " scheduled it (which counts the wait for a connection).",
        "",
        "| Kind | Requests | Failures | From | p50 | p90 | p99 | p99.9 | max |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for kind, k in v.kinds.items():
        for origin, lat in (("send", k.latency), ("schedule", k.latency_from_scheduled)):
            cells = (
                [f"{x:.3f}s" for x in (lat.p50, lat.p90, lat.p99, lat.p999, lat.max)]
                if lat
                else ["-"] * 5
            )
            counts = [f"{k.requests:,}", f"{k.failures:,}"] if origin == "send" else ["", ""]
            rows.append(
                f"| {kind if origin == 'send' else ''} | "
                + " | ".join(counts)
                + f" | {origin} | "
                + " | ".join(cells)
                + " |"
            )
    return "\n".join(rows)


def _outcome_table(v: Verdict) -> str:
    kinds = list(v.kinds)
    rows = [
        "Status codes and error classes:",
        "",
        "| Outcome | " + " | ".join(kinds) + " | all |",
        "|---|" + "---:|" * (len(kinds) + 1),
    ]
    for outcome, total in v.outcomes.items():
        cells = [f"{v.kinds[k].outcomes.get(outcome, 0):,}" for k in kinds]
        rows.append(f"| {outcome} | " + " | ".join(cells) + f" | {total:,} |")
    return "\n".join(rows)


def _json(
    title: str,
    runs: dict[str, tuple[History, Verdict]],
    sections: dict[str, str],
    judgement: dict | None,
) -> str:
    doc = {
        "title": title,
        "runs": {
            name: {"meta": history.meta, "verdict": verdict.to_dict()}
            for name, (history, verdict) in runs.items()
        },
        # The scenario's own markdown blocks, as report.md shows them.
        "sections": sections,
    }
    if judgement is not None:
        doc["judgement"] = judgement
    # default=str: meta is free-form and may carry a Path or a datetime.
    return json.dumps(doc, indent=2, default=str) + "\n"


def cluster_section(found: dict) -> str:
    """The report's account of an existing cluster: what it runs, as read
    from it, and where its nodes' settings differ from the scenario's own."""
    lines = [
        f"- Ray {found.get('version')} (commit {found.get('commit', '?')}); the series' "
        f"settings its Serve reads: {', '.join(found.get('known', [])) or 'none (stock)'}",
        f"- the head's clock: {found.get('clock_skew_s', 0):+.2f} s from the harness's, to "
        f"within {found.get('clock_skew_within_s', 0):.2f} s (half the time a job took); "
        f"its zone: UTC{found.get('utc_offset_s', 0) / 3600:+g} h",
        "- the head's Serve settings: "
        + (", ".join(f"`{k}={v}`" for k, v in found.get("env", {}).items()) or "none set"),
    ]
    differs = found.get("env_differs", {})
    if differs:
        lines.append(
            "- **settings the scenario starts its own nodes with, which these nodes do not "
            "have** (wanted, found): "
            + ", ".join(f"`{k}`: {w}, {f}" for k, (w, f) in differs.items())
        )
    return "\n".join(lines)
