"""`pr-body`: one patch's pull-request description in markdown: its commit
message, the latest harness results of the runs that bear on it (read from
the results folder, stock and patched side by side, each dated), and what
those runs do not show. Which runs those are, and what they do not show, is
`evidence.toml`'s prose, read by `harness.upstream.evidence`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.paths import ROOT
from harness.upstream.branches import patch_message, patch_number
from harness.upstream.evidence import EVIDENCE_FILE, EvidenceTable, load_evidence

# Not a scenario: the name evidence.toml gives the saved log of `make bench-health`.
BENCH_HEALTH = "bench-health"
BENCH_HEALTH_LOG = "bench-health.log"


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _utc(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _current_tags() -> dict[str, list[tuple[int, str]]]:
    """label -> [(n, the node image tag the first n patches of the current series
    build)], from the current inputs (patches, wheelhouse, docker/), without
    Docker; a stock label has n = 0 only. Empty if it cannot be computed."""
    try:
        from harness.cluster import images
        from harness.core.pin import load_pin, read_series

        pin, series = load_pin(), read_series()
        base = images.base_tag()
        tags: dict[str, list[tuple[int, str]]] = {}
        for version in (pin.ray.version, pin.baseline.version):
            ray_tag = images.ray_layer_tag(version, pin, base)
            for flavor in images.FLAVORS:
                spec = images.ImageSpec(version, flavor)
                counts = range(len(series), -1, -1) if flavor == "patched" else [0]
                tags[str(spec)] = [
                    (n, images.node_tag(spec, pin, ray_tag, series[:n])) for n in counts
                ]
        return tags
    except (HarnessError, OSError, ImportError):
        return {}


def _image_note(
    label: str, image: str, tags: list[tuple[int, str]], series: Sequence[str]
) -> str | None:
    """Whether a run's image is what the current series builds, and if not, how
    it differs; None when it is current or cannot be told."""
    if not tags or not image or image == tags[0][1]:
        return None
    for n, tag in tags[1:]:
        if tag == image:
            missing = ", ".join(series[n:])
            return (
                f"{label} ran on `{image}`, built from the first {n} patches as they are "
                f"now, without {missing}."
            )
    return (
        f"{label} ran on `{image}`, which the current inputs do not build (they build "
        f"`{tags[0][1]}`): it was made with an earlier version of the patches or of the "
        f"harness's images."
    )


def _scenario_section(
    name: str,
    results: Path,
    known: set[str],
    tags: dict[str, list[tuple[int, str]]],
    series: Sequence[str] = (),
) -> list[str]:
    from harness.experiment.report import (
        JSON_NAME,
        PNG_NAME,
        format_percent,
        format_seconds,
        record_text,
    )

    folder = results / name
    path = folder / JSON_NAME
    if not path.is_file():
        missing = f"No result yet: `{_rel(path)}` does not exist"
        if name not in known:
            return [
                f"### `{name}`",
                f"{missing}, and the harness has no scenario of that name yet.",
            ]
        return [f"### `{name}`", f"{missing}; run `python -m harness run {name}`."]
    doc = json.loads(path.read_text())
    runs = doc.get("runs", {})
    out = [f"### `{name}`: {doc.get('title', '')}"]
    if not runs:
        return out + [f"`{_rel(path)}` holds no runs."]
    labels = list(runs)
    verdicts = [runs[label]["verdict"] for label in labels]
    metas = [runs[label].get("meta", {}) for label in labels]
    mtime = path.stat().st_mtime

    def row(title: str, cells: list[str]) -> str:
        return "| " + " | ".join([title, *cells]) + " |"

    def failed(v: dict) -> str:
        classes = ", ".join(f"{c} {n:,}" for c, n in v.get("failures_by_class", {}).items())
        return f"{v['failures']:,}" + (f" ({classes})" if classes else "")

    def latency(v: dict) -> str:
        lat = v.get("latency")
        if not lat:
            return "-"
        p50, p99, worst = (format_seconds(lat[key], unit="") for key in ("p50", "p99", "max"))
        return f"{p50} / {p99} / {worst} s"

    def _record(v: dict) -> str:
        if "record_gap" not in v:
            return "not checked (written before the record was counted)"
        return record_text(v["record_gap"])

    table = [
        row("", labels),
        "|---|" + "---:|" * len(labels),
        row("run started", [_utc(v.get("t0") or mtime) for v in verdicts]),
        row("image", [f"`{m.get('image', '?')}`" for m in metas]),
    ]
    if any("ladder_scale" in m for m in metas):
        table.append(row("ladder scale", [f"{m.get('ladder_scale', '-')}" for m in metas]))
    table += [
        row("record", [_record(v) for v in verdicts]),
        row("requests", [f"{v['requests']:,}" for v in verdicts]),
        row("failed", [failed(v) for v in verdicts]),
        row("failure rate", [format_percent(v["failure_rate"]) for v in verdicts]),
        row("failed in fault windows", [f"{v['failures_in_windows']:,}" for v in verdicts]),
        row("latency p50 / p99 / max", [latency(v) for v in verdicts]),
        row(
            "failure-rate verdict",
            [f"{v['result']} (threshold {format_percent(v['threshold'])})" for v in verdicts],
        ),
    ]
    out.append("\n".join(table))
    notes = []
    if len(labels) == 1:
        notes.append(f"Only {labels[0]} ran in this report: there is no side-by-side comparison.")
    for label, v, meta in zip(labels, verdicts, metas, strict=True):
        if v["requests"] == 0:
            notes.append(
                f"{label} recorded no requests, so its failure-rate verdict says "
                f"nothing; see the checks below."
            )
        # A configuration's label extends its image's ("2.60.0-patched flags on").
        spec = meta.get("config", {}).get("image", label)
        note = _image_note(label, meta.get("image", ""), tags.get(spec, []), series)
        if note:
            notes.append(note)
    if notes:
        out.append("\n".join(f"- {n}" for n in notes))
    judgement = doc.get("judgement") or {}
    if judgement.get("findings"):
        verdict = (
            "as the scenario claims"
            if judgement.get("as_expected")
            else "NOT as the scenario claims"
        )
        out.append(
            f"**Outcome**: {verdict} (from `{_rel(path)}`)\n\n"
            + "\n".join(f"- {f}" for f in judgement["findings"])
        )
    checks = (doc.get("sections") or {}).get("Checks and measurements", "").strip()
    if checks:
        out.append(f"**Checks and measurements** (from `{_rel(path)}`)\n\n{checks}")
    if (folder / PNG_NAME).is_file():
        out.append(f"Timeline: `{_rel(folder / PNG_NAME)}` (attach it to the PR to show it).")
    return out


def _bench_health_section(results: Path) -> list[str]:
    log = results / BENCH_HEALTH_LOG
    head = f"### `{BENCH_HEALTH}`: controller cost and time to detect, pull vs push"
    if not log.is_file():
        return [
            head,
            f"No result yet: `{_rel(log)}` does not exist; run `make bench-health "
            f"2>&1 | tee {_rel(log)}`.",
        ]
    lines = log.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("health period")), None)
    if start is None:
        return [head, f"`{_rel(log)}` holds no finished run (no `health period` line)."]
    end = next(
        (i for i in range(start, len(lines)) if lines[i].startswith("extrapolated")), len(lines) - 1
    )
    body = "\n".join(lines[start : end + 1]).strip()
    return [
        head,
        f"Captured {_utc(log.stat().st_mtime)} (the log's modification time; the "
        f"benchmark writes no report.json), from `{_rel(log)}`:",
        body,
    ]


def pr_body(
    number: str,
    patches: list[Path],
    results: Path,
    known_scenarios: set[str] | None = None,
    evidence: EvidenceTable | None = None,
) -> str:
    """The PR description of patch `number` in markdown: its message, the
    latest result of every run `evidence` (default: evidence.toml) maps to its
    file name (or that there is none yet), and what those runs do not show."""
    number = number.zfill(4) if number.isdigit() else number
    matching = [p for p in patches if number in (patch_number(p), p.name, p.stem)]
    if not matching:
        raise HarnessError(
            f"no patch {number} in patches/series; it holds "
            f"{', '.join(patch_number(p) for p in patches) or 'nothing'}."
        )
    patch = matching[0]
    number = patch_number(patch)
    if known_scenarios is None:
        from harness.scenarios import SCENARIOS

        known_scenarios = set(SCENARIOS)
    if evidence is None:
        evidence = load_evidence()
    subject, body = patch_message(patch)
    mine = evidence.by_patch.get(patch.name)
    parts = [f"# {subject}", body, "## Harness results"]
    if mine is None:
        # Said outright: a description that borrowed another patch's runs, or
        # showed none without saying why, would pass for a finished one.
        parts.append(
            f"No evidence recorded for `{patch.name}`: `{_rel(EVIDENCE_FILE)}` has no "
            f"entry under that file name, so this description shows no harness run and "
            f"none of the limits of one. Add the patch's entry (the runs it changes and "
            f"what they do not show) and render it again."
        )
        return "\n\n".join(p for p in parts if p) + "\n"
    tags = _current_tags()
    numbers = [patch_number(p) for p in patches]
    parts.append(
        f"Latest results from this project's Docker harness (`build/results/`), read "
        f"by `make pr-body PATCH={number}`; stock and patched side by side, each run "
        f"with its date."
    )
    if not mine.scenarios:
        parts.append("No harness scenario exercises this patch yet.")
    for name in mine.scenarios:
        section = (
            _bench_health_section(results)
            if name == BENCH_HEALTH
            else _scenario_section(name, results, known_scenarios, tags, numbers)
        )
        parts += section
    if mine.related:
        parts.append(
            "Related runs below are on stock only: they show the problem this patch "
            "addresses, not the patch."
        )
        for name in mine.related:
            parts += _scenario_section(name, results, known_scenarios, tags, numbers)
    parts.append("## What these runs do not show")
    caveats = list(evidence.common_caveats) + list(mine.caveats)
    if not mine.caveats:
        caveats.append(
            f"Nobody has written this patch's part yet: add its `caveats` to "
            f"`{_rel(EVIDENCE_FILE)}`."
        )
    parts.append("\n".join(f"- {c}" for c in caveats))
    return "\n\n".join(p for p in parts if p) + "\n"
