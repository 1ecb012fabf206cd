"""What every scenario shares: running it once per image, judging each run
from its recorded history, comparing the runs against the scenario's
expectation, and writing one report.

A scenario is a class with a `name`, the images it `runs_on` by default, and
two halves:

    run_once(image, config) -> History   the live half: cluster, load, faults,
                                         and everything read from the cluster
                                         recorded as observations
    judge(config, history) -> ImageRun   the judging half: facts and checks
                                         from the history alone

Its `expect(runs)` says whether the comparison came out as the scenario
claims (for example: the baseline fails and the fix does not), so a scenario
whose baseline did not fail says so instead of passing quietly. Because
judging reads only the saved histories, `judge_runs` reaches the same outcome
again from a results directory with no cluster (`python -m harness analyze`).

A run is one image under one configuration (`configs(spec)`, a RunConfig
each: the image as configured unless the scenario also runs it another way,
flags on and off, say); the configuration is saved with the run's history.
A run's facts are a dataclass of the scenario's own (a Facts subclass, the
type parameter of Scenario), so `expect` reads them as attributes; each field
names the row it is in the report.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from harness.cluster import images, runs
from harness.cluster.boundary import Node, RayCluster, Unavailable, parse_samples, sample_total
from harness.cluster.cluster import Cluster, ClusterConfig
from harness.cluster.clusterfile import ClusterFile
from harness.cluster.existing import ExistingCluster
from harness.core import log
from harness.core.errors import HarnessError
from harness.core.paths import RESULTS_DIR
from harness.core.pin import load_pin
from harness.experiment import checker, report
from harness.experiment.configs import RUNTIME_SERVERS, SERIES_SETTINGS, RunConfig
from harness.experiment.history import History, clear_histories, history_name

_log = log.get(__name__)

LOG_LINE = "log line"  # observation: a Ray log line, at its own time; target: whose log
SHOWN_AS = "shown as"  # a Facts field's metadata key: its row in the report


def fact(shown_as: str, **kwargs: Any) -> Any:
    """A field of a Facts dataclass, shown in the report as `shown_as`."""
    return field(metadata={SHOWN_AS: shown_as}, **kwargs)


@dataclass
class Facts:
    """A scenario's measurements of one run. Every field declared with
    `fact(...)` is one row of the report, in field order; a scenario whose rows
    depend on the run (one per ladder, say) overrides `rows`. This base has
    none: a run judged by its failure-rate verdict alone."""

    def rows(self) -> dict[str, Any]:
        """Display name -> value: what report.json keeps as the run's facts."""
        return {
            f.metadata[SHOWN_AS]: getattr(self, f.name)
            for f in fields(self)
            if SHOWN_AS in f.metadata
        }

    def listed(self) -> dict[str, Any]:
        """The rows report.md lists under the run; all of them, unless a
        scenario tables some on their own."""
        return self.rows()


F = TypeVar("F", bound=Facts)


@dataclass
class ImageRun(Generic[F]):
    label: str  # e.g. "2.60.0-patched"
    history: History
    facts: F
    # What the run's nodes ran; None for a history recorded outside any scenario (the soak's).
    config: RunConfig | None = None
    verdict: checker.Verdict | None = None
    # (what was checked, did it hold), e.g. ("death reason is PREEMPTED", True).
    checks: list[tuple[str, bool]] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.verdict and self.verdict.passed) and all(ok for _, ok in self.checks)


@dataclass
class ScenarioOutcome:
    name: str
    runs: dict[str, ImageRun]
    as_expected: bool
    findings: list[str]
    report: dict[str, Path]
    wall_s: float


# A scenario's default image, by release of the pin and flavor: "ray" is the
# pinned release, "baseline" the earlier one it is compared with.
BASELINE_STOCK = ("baseline", "stock")
STOCK = ("ray", "stock")
PATCHED = ("ray", "patched")


def with_runtime_servers(spec: images.ImageSpec, runtime: bool = True) -> list[RunConfig]:
    """The runs of `spec` in the HAProxy scenarios: as configured, and on the
    patched image (if `runtime`) also with runtime servers, where the head's
    HAProxy follows replica changes without a reload."""
    configs = [RunConfig(spec)]
    if runtime and spec.flavor == "patched":
        configs.append(RunConfig(spec, "runtime servers", RUNTIME_SERVERS))
    return configs


class Scenario(Generic[F]):
    name = ""
    title = ""
    # The images it runs on when none are given, baseline first: the earlier
    # release as shipped against the pinned one patched, unless the scenario's
    # baseline is the same release without the patches (STOCK, PATCHED).
    runs_on: tuple[tuple[str, str], ...] = (BASELINE_STOCK, PATCHED)
    # The node operations a cluster file must give for the scenario to run on
    # a cluster the harness did not start (`run --cluster FILE`); None: it runs
    # on the harness's Docker clusters only (it pauses, shapes or execs in a
    # node, or reads the harness's own front LB).
    needs: frozenset[str] | None = None
    # Set by run_scenario for `--cluster`: the cluster every run uses.
    existing: ExistingCluster | None = None

    def cluster_config(self, image_tag: str, config: RunConfig) -> ClusterConfig:
        """The Docker cluster a run starts: nodes, resources and the node env
        the scenario needs (an existing cluster's nodes should run with it)."""
        raise NotImplementedError

    def open_cluster(self, image_tag: str, config: RunConfig) -> RayCluster:
        """The run's cluster: the existing one, or a Docker cluster made to
        `cluster_config` (a context manager either way)."""
        if self.existing is None:
            return Cluster(self.cluster_config(image_tag, config))
        # An existing run's env is what its nodes were found with; the
        # scenario's own is what its Docker clusters would start with.
        self.existing.compare_env(self.cluster_config(image_tag, RunConfig(config.image)).env)
        return self.existing

    def default_images(self) -> list[images.ImageSpec]:
        pin = load_pin()
        releases = {"ray": pin.ray, "baseline": pin.baseline}
        return [images.ImageSpec(releases[r].version, flavor) for r, flavor in self.runs_on]

    @property
    def options(self) -> dict:
        """The constructor's arguments, as saved with each history so that
        `analyze` rebuilds the same scenario (each is kept as an attribute of
        the same name)."""
        names = list(inspect.signature(type(self)).parameters)
        return {name: getattr(self, name) for name in names}

    def configs(self, spec: images.ImageSpec) -> list[RunConfig]:
        """The runs on one image: one, as configured, unless a scenario also
        runs the image under another configuration (flags on and off, say)."""
        return [RunConfig(spec)]

    def config_of(self, history: History) -> RunConfig:
        """The configuration a history was recorded under, from its meta. A
        history saved before runs carried their configuration has only its
        label, which is one of this scenario's configurations on the image it
        names."""
        meta = history.meta
        if "config" in meta:
            return RunConfig.from_meta(meta["config"])
        label = meta["label"]
        spec = label.split(" ")[0]
        try:
            known = self.configs(images.ImageSpec.parse(spec))
        except HarnessError:
            known = []
        found = next((c for c in known if c.label == label), None)
        if found is None:
            runs = ", ".join(c.label for c in known) or f"none on {spec!r}"
            raise HarnessError(
                f"the run {label!r} records no configuration and is not one of "
                f"{self.name}'s runs ({runs}); it was saved by another version of the harness."
            )
        return found

    def run_once(self, image_tag: str, config: RunConfig) -> History:
        raise NotImplementedError

    def judge(self, config: RunConfig, history: History) -> ImageRun[F]:
        """Facts and checks of one run, from its history alone, in the
        scenario's own Facts (which this base cannot make)."""
        raise NotImplementedError

    def judge_history(self, history: History) -> ImageRun[F]:
        """One recorded run judged, under the configuration it recorded."""
        return self.judge(self.config_of(history), history)

    def expect(self, runs: dict[str, ImageRun[F]]) -> tuple[bool, list[str]]:
        """Default: the last image (the fix) passes, and some earlier one fails;
        a baseline that does not fail proves nothing, which is said aloud."""
        *baselines, fixed = runs.values()
        findings = [f"{fixed.label}: {'PASSED' if fixed.passed else 'FAILED'}"]
        for run in baselines:
            findings.append(f"{run.label}: {'PASSED' if run.passed else 'FAILED'}")
        baseline_failed = any(not r.passed for r in baselines)
        if baselines and not baseline_failed:
            findings.append(
                "the baseline did not fail, so this run proves nothing about a "
                "fix; it only shows that both images behave"
            )
        return fixed.passed and (baseline_failed or not baselines), findings

    def sections(self, runs: dict[str, ImageRun[F]]) -> dict[str, str]:
        """Extra markdown for the report: facts and checks per image."""
        lines = []
        for run in runs.values():
            lines.append(f"**{run.label}** ({run.wall_s:.0f} s)")
            for what, ok in run.checks:
                lines.append(f"- {'✔' if ok else '✘'} {what}")
            for key, value in run.facts.listed().items():
                lines.append(f"- {key}: {value}")
            lines.append("")
        return {"Checks and measurements": "\n".join(lines)}


def docker_only(cluster: RayCluster, who: str) -> Cluster:
    """The cluster as the harness's Docker cluster, for what only that can do;
    a scenario with `needs = None` is never given another."""
    if not isinstance(cluster, Cluster):
        raise HarnessError(f"{who} acts on nodes as only the harness's Docker clusters can")
    return cluster


HEAD_PIDS = "head haproxy pids"  # observation: the head's HAProxy processes, when they changed
# Observation: the watch of the head's HAProxy processes ended before it was
# stopped (its command or stream failed); the HEAD_PIDS record stops there.
HEAD_WATCH_ENDED = "head haproxy watch ended"


async def watch_head_haproxy(
    cluster: RayCluster, history: History, stop: asyncio.Event, on_start=None, every_s: float = 0.1
) -> None:
    """Observe the head's HAProxy processes whenever they change, until `stop`;
    `on_start(now)` when a new one has appeared (a reload). One command in the
    head looks every `every_s` and reports changes, each at the time it saw it."""
    loop = asyncio.get_running_loop()
    seen: set[int] = set()

    def changed(stamp: float, pids: set[int]) -> None:
        nonlocal seen
        if stop.is_set():
            return
        history.observe(HEAD_PIDS, sorted(pids), stamp, target="head")
        if seen and pids - seen and on_start:
            on_start(stamp)
        seen = pids

    def ended() -> None:
        if not stop.is_set():
            history.observe(HEAD_WATCH_ENDED, None, time.time(), target="head")

    def post(callback, *args) -> bool:
        """Hand `callback` to the run's loop; False once that loop has closed."""
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            return False
        return True

    def read(watch) -> None:
        try:
            for stamp, pids in watch:
                if not post(changed, stamp, pids):
                    return  # the run is over
        except Exception as exc:  # the watch failed: its record stops here
            if not stop.is_set():
                _log.warning("the head's HAProxy processes are no longer watched: %r", exc)
        post(ended)

    watch = await asyncio.to_thread(cluster.watch_processes, cluster.head, "haproxy", every_s)
    reader = threading.Thread(target=read, args=(watch,), daemon=True, name="head-haproxy-watch")
    reader.start()
    try:
        await stop.wait()
    finally:
        await asyncio.to_thread(watch.stop)


def head_watch_ended(history: History) -> float | None:
    """When the watch of the head's HAProxy processes ended early, if it did."""
    ended = history.observed(HEAD_WATCH_ENDED, "head")
    return ended[0].time if ended else None


def haproxy_starts(history: History) -> list[tuple[float, set[int]]]:
    """When the head started HAProxy processes after the first observation,
    and which, from `watch_head_haproxy`'s record."""
    seen = [(e.time, set(e.detail["value"])) for e in history.observed(HEAD_PIDS, "head")]
    return [
        (t, pids - before) for (_, before), (t, pids) in itertools.pairwise(seen) if pids - before
    ]


# Observation: the head's HAProxy counters, as the HAProxy manager exports them
# (patched images): reloads by cause and outcome, and replica membership
# updates applied over the admin socket. Read before and after a change, with
# target BEFORE or AFTER; their difference is what the change cost.
HAPROXY_COUNTERS = "haproxy counters"
BEFORE, AFTER = "before", "after"
_RELOADS_METRIC = "ray_serve_haproxy_reloads_total"
_UPDATES_METRIC = "ray_serve_haproxy_membership_updates_total"
MEMBERSHIP_UPDATES = "membership updates"
# The manager's poll and Ray's export, once a second each with
# configs.FAST_HAPROXY_METRICS, and a second of slack.
_HAPROXY_METRICS_LAG_S = 3.0


def observe_haproxy_counters(cluster: RayCluster, history: History, target: str) -> None:
    """Record the head's HAProxy counters once what happened so far is exported."""
    time.sleep(_HAPROXY_METRICS_LAG_S)
    try:
        text = cluster.metrics_text()
    except Unavailable as exc:
        _log.warning("the head's HAProxy counters are not recorded: %s", exc)
        return
    counters = {
        f"{s.labels.get('cause')} reloads, {s.labels.get('outcome')}": s.value
        for s in parse_samples(text, _RELOADS_METRIC)
    }
    counters[MEMBERSHIP_UPDATES] = sample_total(text, _UPDATES_METRIC)
    history.observe(HAPROXY_COUNTERS, counters, time.time(), target=target)


def haproxy_counted(config: RunConfig, history: History) -> str:
    """What the head's HAProxy manager counted between the BEFORE and AFTER
    reads, as a report row."""
    if config.image.flavor == "stock":
        return "nothing: stock Ray exports no such counters"
    reads = {e.target: e.detail["value"] for e in history.observed(HAPROXY_COUNTERS)}
    if BEFORE not in reads or AFTER not in reads:
        return "not recorded"
    before, after = reads[BEFORE], reads[AFTER]
    counted = {key: after[key] - before.get(key, 0) for key in sorted(after)}
    shown = [f"{key} {n:.0f}" for key, n in counted.items() if n]
    return "; ".join(shown) or "none"


# Observation: how the controller saw its replicas stop (patched images): the
# replicas it force-killed at the shutdown deadline, and for the others how long
# their last requests kept them after the minimum draining period (the drain
# tail), as the replica measured it. Ray exports a histogram's sum from its
# buckets, not from the values, so the tail is kept as cumulative bucket counts
# ("drain tail le <ms>") and shown as the bucket range.
SHUTDOWN_COUNTERS = "replica shutdown counters"
FORCE_KILLS = "force-kills"
REJECTED = "rejected requests"
_FORCE_KILLS_METRIC = "ray_serve_replica_force_kills_total"
_REJECTED_METRIC = "ray_serve_replica_shutdown_rejected_requests_total"
_TAIL_BUCKETS = "ray_serve_replica_shutdown_drain_tail_ms_bucket"
_TAIL = "drain tail le "


def _shutdown_counters(text: str) -> dict[str, float]:
    counters = {
        FORCE_KILLS: sample_total(text, _FORCE_KILLS_METRIC),
        REJECTED: sample_total(text, _REJECTED_METRIC),
    }
    for sample in parse_samples(text, _TAIL_BUCKETS):
        key = f"{_TAIL}{sample.labels.get('le')}"
        counters[key] = counters.get(key, 0.0) + sample.value
    return counters


def _tail_range(counters: dict[str, float]) -> str | None:
    """'<n> in <lo>-<hi> s': the bucket range holding every drain tail, or
    None if no replica reported one."""
    buckets = sorted(
        (float(key.removeprefix(_TAIL)), n) for key, n in counters.items() if key.startswith(_TAIL)
    )
    total = buckets[-1][1] if buckets else 0.0
    if not total:
        return None
    below = max((le for le, n in buckets if n == 0), default=0.0)
    within = min(le for le, n in buckets if n == total)
    return f"{total:.0f} in {below / 1000:g}-{within / 1000:g} s"


def observe_shutdown_counters(
    cluster: RayCluster, history: History, stopped: int, timeout_s: float = 60.0
) -> None:
    """Record the controller's replica-shutdown metrics once `stopped` replicas
    are accounted for (force-killed, or drained and reported), or at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            counters = _shutdown_counters(cluster.metrics_text())
        except Unavailable as exc:
            _log.warning("the controller's shutdown counters are not recorded: %s", exc)
            return
        drained = counters.get(f"{_TAIL}+Inf", 0.0)
        if counters[FORCE_KILLS] + drained >= stopped or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    history.observe(SHUTDOWN_COUNTERS, counters, time.time(), target="head")


def shutdowns_counted(config: RunConfig, history: History) -> str:
    """The controller's replica-shutdown metrics as a report row: force-kills,
    and how long the last requests kept the others after the draining period."""
    if config.image.flavor == "stock":
        return "nothing: stock Ray exports no such metrics"
    reads = [e.detail["value"] for e in history.observed(SHUTDOWN_COUNTERS)]
    if not reads:
        return "not recorded"
    counters = reads[-1]
    shown = [f"{counters[FORCE_KILLS]:.0f} force-killed"]
    tail = _tail_range(counters)
    if tail:
        shown.append(f"drain tail after the draining period: {tail}")
    if counters[REJECTED]:
        shown.append(f"{counters[REJECTED]:.0f} requests rejected after the drain")
    return "; ".join(shown)


# Observation: the front LB's error counters per node at the end of a run,
# which say where a failed request through it met its error.
LB_ERRORS = "front LB errors"


def observe_lb_errors(cluster: RayCluster, history: History) -> None:
    """Record the front LB's error counters for each node, as of now."""
    try:
        history.observe(LB_ERRORS, cluster.lb_server_errors(), time.time(), target="lb")
    except Unavailable as exc:
        _log.info("the front LB's error counters are not recorded: %s", exc)


def lb_errors(history: History) -> str:
    """The front LB's nonzero error counters, by node, as a report row."""
    reads = [e.detail["value"] for e in history.observed(LB_ERRORS)]
    if not reads:
        return "not recorded"
    shown = []
    for node, counts in sorted(reads[-1].items()):
        nonzero = [f"{field} {n}" for field, n in counts.items() if n]
        if nonzero:
            shown.append(f"{node}: {', '.join(nonzero)}")
    return "; ".join(shown) or "none"


def observe_log_lines(
    history: History,
    cluster: RayCluster,
    node: Node,
    needles: list[str],
    target: str,
    where: str = "/logs/serve/",
) -> None:
    """Keep the node's log lines that contain any needle, each at its own time."""
    try:
        lines = cluster.log_lines(node, needles, where)
    except Unavailable as exc:
        _log.warning("%s's log lines are not recorded: %s", target, exc)
        return
    for stamp, line in lines:
        history.observe(LOG_LINE, line, stamp, target=target)


def logged_lines(
    history: History, target: str, needle: str, since: float = float("-inf")
) -> list[tuple[float, str]]:
    """The kept log lines of `target` that contain `needle`, from `since` on,
    each with when it was written, in time order."""
    return [
        (e.time, e.detail["value"])
        for e in history.observed(LOG_LINE, target)
        if needle in e.detail["value"] and e.time >= since
    ]


def logged(history: History, target: str, needle: str, since: float = float("-inf")) -> list[float]:
    """When the kept log lines of `target` that contain `needle` were written,
    from `since` on, in time order."""
    return [t for t, _ in logged_lines(history, target, needle, since)]


def node_env(scenario: Scenario) -> dict[str, str]:
    """The environment every node of the scenario's clusters starts with, on
    the patched image with its flags on (its last run there), less what only
    the harness's containers need (the mounted harness on PYTHONPATH)."""
    spec = images.ImageSpec(load_pin().ray.version, "patched")
    try:
        config = scenario.cluster_config("", scenario.configs(spec)[-1])
    except NotImplementedError:
        raise HarnessError(
            f"{scenario.name} starts clusters of more than one kind; its settings are "
            f"in harness/scenarios/{type(scenario).__module__.rsplit('.', 1)[-1]}.py"
        ) from None
    return {k: v for k, v in config.node_env.items() if k != "PYTHONPATH"}


def existing_run(scenario: Scenario, cluster_file: ClusterFile) -> RunConfig:
    """Ready `scenario` to run on the cluster `cluster_file` describes, or
    refuse (exit 2) before anything on it is changed: the scenario must run on
    an existing cluster, the file must give every node operation it needs, and
    the cluster must answer. The run's configuration is what the cluster runs,
    read from it: its Ray release, patched if its Serve knows the series'
    settings, and its nodes' Serve environment."""
    if scenario.needs is None:
        raise HarnessError(
            f"{scenario.name} runs on the harness's Docker clusters only: it needs to act "
            f"on nodes in ways a cluster file does not describe. Run it without --cluster."
        )
    cluster = ExistingCluster.prepare(
        cluster_file, set(scenario.needs), scenario.name, SERIES_SETTINGS
    )
    scenario.existing = cluster
    image = images.ImageSpec(cluster.found["version"], cluster.flavor)
    return RunConfig(image, "existing cluster", cluster.found["env"])


def run_scenario(
    scenario: Scenario,
    specs: list[images.ImageSpec] | None = None,
    out_dir: Path | None = None,
    parallel: int = 1,
    cluster_file: ClusterFile | None = None,
) -> ScenarioOutcome:
    """Run the scenario once per configuration of each image and judge the runs.

    `parallel` runs that many at once, each on its own cluster (runs are
    isolated by run id and free ports). Each run's history is saved and judged
    exactly as in a sequential run; only the wall time changes. With
    `cluster_file`, one run on that cluster as it is (existing_run)."""
    started = time.monotonic()
    out_dir = out_dir or RESULTS_DIR / scenario.name
    if cluster_file is not None:
        if specs:
            raise HarnessError(
                "--image does not apply with --cluster: the cluster runs what it runs"
            )
        config = existing_run(scenario, cluster_file)
        plan = [(f"existing cluster at {cluster_file.dashboard}", config)]
        clear_histories(out_dir)
    else:
        specs = specs or scenario.default_images()
        clear_histories(out_dir)
        tags = {spec: images.ensure_node_image(spec) for spec in specs}
        plan = [(tag, config) for spec, tag in tags.items() for config in scenario.configs(spec)]

    def run(order: int, planned: tuple[str, RunConfig]) -> History:
        tag, config = planned
        label = config.label
        log.progress(_log, f"scenario {scenario.name}: running on {label}", started)
        t = time.monotonic()
        history = scenario.run_once(tag, config)
        history.meta.update(
            label=label,
            config=config.to_meta(),
            image=tag,
            scenario=scenario.name,
            options=scenario.options,
            order=order,
            wall_s=round(time.monotonic() - t, 1),
        )
        if scenario.existing is not None:  # what the cluster was found running
            history.meta["cluster"] = scenario.existing.found
        # Saved before judging: a run that is judged wrongly can be judged again.
        history.save(out_dir / history_name(label))
        failed = sum(not r.ok for r in history.requests)
        _log.info(
            "scenario %s: %s: %d of %d requests failed (%.0fs)",
            scenario.name,
            label,
            failed,
            len(history.requests),
            history.meta["wall_s"],
        )
        return history

    histories = runs.side_by_side(run, plan, parallel)
    outcome = judge_runs(scenario, histories, out_dir)
    outcome.wall_s = time.monotonic() - started
    return outcome


def existing_finding(run: ImageRun) -> str:
    """What a run on an existing cluster came to: its own verdict (on Docker
    the scenario compares images; here the user runs stock and patched)."""
    return (
        f"{run.label}: {'PASSED' if run.passed else 'FAILED'}, judged as the cluster is "
        f"(run it on a stock and on a patched cluster to compare them)"
    )


def judge_runs(
    scenario: Scenario, histories: list[History], out_dir: Path, notes: list[str] | None = None
) -> ScenarioOutcome:
    """Judge saved or fresh histories of one scenario and write its report;
    reads nothing but the histories. `notes` are findings about how they
    were judged."""
    runs: dict[str, ImageRun] = {}
    verdicts: dict[str, checker.Verdict] = {}
    for history in sorted(histories, key=lambda h: h.meta.get("order", 0)):
        run = scenario.judge_history(history)
        run.verdict = verdicts[run.label] = checker.check(history)
        run.wall_s = float(history.meta.get("wall_s", 0.0))
        gap = run.verdict.record_gap
        complete = f"{history.scheduled:,} requests scheduled, each with one row"
        run.checks.insert(0, (f"the record is complete: {gap or complete}", gap is None))
        runs[run.label] = run
    existing = [r for r in runs.values() if "cluster" in r.history.meta]
    if existing:
        # One cluster, judged as it is: there is no baseline to compare with.
        as_expected = all(r.passed for r in existing)
        findings = [existing_finding(r) for r in existing]
    else:
        as_expected, findings = scenario.expect(runs)
    incomplete = [label for label, verdict in verdicts.items() if verdict.record_gap]
    if incomplete:
        as_expected = False
        findings.append(
            f"the record of {', '.join(incomplete)} is incomplete, so nothing "
            f"can be concluded from it"
        )
    findings += notes or []
    sections = {"Outcome": "\n".join(f"- {f}" for f in findings), **scenario.sections(runs)}
    for run in existing:
        sections[f"The cluster ({run.label})"] = report.cluster_section(run.history.meta["cluster"])
    judgement = {
        "scenario": scenario.name,
        "options": scenario.options,
        "as_expected": as_expected,
        "findings": findings,
        "runs": {
            run.label: {
                "passed": run.passed,
                "wall_s": run.wall_s,
                "checks": [{"what": what, "held": ok} for what, ok in run.checks],
                "facts": run.facts.rows(),
            }
            for run in runs.values()
        },
    }
    paths = report.write_report(
        out_dir,
        scenario.title,
        {r.label: (r.history, verdicts[r.label]) for r in runs.values()},
        sections,
        judgement,
    )
    return ScenarioOutcome(scenario.name, runs, as_expected, findings, paths, 0.0)
