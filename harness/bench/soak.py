"""`make soak`: spot preemptions under sustained load, for minutes on end, with
the spot-notice ladder and with Ray's defaults, printed as the spot-notice
acceptance table (docs/architecture.md, Glossary).

Each run is a fresh cluster (head + 2 workers) serving the spot-notice workload
(harness/cluster/apps/workload.py: short, streaming and 8-20 s long-runner requests,
warm floors of 2 replicas per deployment) through the front LB at a steady
open-loop rate. About every `interval_s` a worker gets a full spot notice
(120 s, detection 10 s, drain deadline 60 s: the environment's, the same for
both configurations); when the notice ends its container is killed and a
replacement worker joins and registers with the LB, as an autoscaler would.

    spot-notice ladder   the node env, gst, wait loop and request timeout of
                         harness/ladder/model.py:Ladder (ordering E included)
    Ray 2.60.0 defaults  nothing set: the env, http_options and deployment
                         options Ray ships with

Every run is judged on its own against the acceptance table's 0.01% failure threshold.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

from harness.cluster import appconfigs, images, runs
from harness.cluster.boundary import RayCluster
from harness.cluster.cluster import Cluster, ClusterConfig
from harness.cluster.clusterfile import ClusterFile
from harness.cluster.existing import ExistingCluster
from harness.core import log, paths
from harness.core.pin import load_pin
from harness.core.progress import Progress
from harness.experiment import checker, report
from harness.experiment.configs import SERIES_SETTINGS
from harness.experiment.history import History, clear_histories, history_name
from harness.experiment.load import LoadSpec, Mix, open_loop
from harness.experiment.nemesis import spot_preemption
from harness.ladder.model import Ladder
from harness.ladder.notice import SpotNotice

_log = log.get(__name__)

RESULTS_DIR = paths.RESULTS_DIR / "soak"

NOTICE = SpotNotice(120.0, 10.0, 60.0)
FIRST_NOTICE_S = 20.0  # steady load before the first notice
# No notice starts unless its node is killed this long before the load ends,
# so every preemption is seen through to the end with traffic on.
TAIL_S = 15.0
LADDER_CONFIG = "spot-notice ladder"
CONFIGS: dict[str, Ladder | None] = {LADDER_CONFIG: Ladder(), "Ray 2.60.0 defaults": None}
# What a cluster file must give for the soak: each preemption ends with a
# terminate and is followed by a replacement node.
NEEDS = {"terminate", "add"}
# Mostly short requests, with streams and the long-runners a preemption must
# not cut (their range is the ladder's).
MIX = Mix(short=0.85, long=0.10, stream=0.05, long_path="/long/")


def workload_config(ladder: Ladder | None) -> dict:
    """The soak's apps, with the ladder's deployment and HTTP options if any."""
    if ladder is None:
        return appconfigs.deploy_config(*appconfigs.workload_apps())
    return appconfigs.deploy_config(
        *appconfigs.workload_apps(**ladder.deployment_options()), http_options=ladder.http_options()
    )


async def _preempt_on_schedule(
    cluster: RayCluster,
    history: History,
    duration_s: float,
    interval_s: float,
    started: float,
    label: str,
) -> int:
    """Notices at FIRST_NOTICE_S, then every `interval_s`, each on the oldest
    live worker; a replacement joins after each kill. Returns how many."""
    count, due = 0, started + FIRST_NOTICE_S
    while due + NOTICE.notice_s + TAIL_S <= started + duration_s:
        await asyncio.sleep(max(0.0, due - time.time()))
        target = next(w for w in cluster.workers if cluster.node_status(w) == "running")
        _log.info(
            "soak %s: spot notice for %s at +%.0fs", label, target.name, time.time() - started
        )
        await spot_preemption(cluster, target, history, NOTICE)
        await asyncio.to_thread(cluster.add_worker)
        count += 1
        due += interval_s
    return count


async def _every_minute(
    call: Callable[[History, float], None], history: History, started: float
) -> None:
    while True:
        await asyncio.sleep(60.0)
        call(history, started)


def one_run(
    tag: str,
    label: str,
    ladder: Ladder | None,
    duration_s: float,
    interval_s: float,
    rate: float,
    on_load: Callable[[], None] = lambda: None,
    cluster: RayCluster | None = None,
    env: dict[str, str] | None = None,
    mix: Mix = MIX,
    connections: int = 128,
    max_requests: int = LoadSpec.max_requests,
    every_minute: Callable[[History, float], None] | None = None,
) -> tuple[History, checker.Verdict]:
    """One run on a cluster of its own, or on `cluster` (an existing one, as
    its nodes are configured); `on_load()` as the load starts. `env` is added
    to the ladder's node env; `every_minute(history, started)` is called each
    minute of load (the volume soak's progress line)."""
    # Ray's defaults are the comparison, not the claim: `analyze` judges their
    # runs for the report without failing on them, as `make soak` does.
    history = History({"label": label, "claim": ladder is not None})
    node_env = {**(ladder.node_env() if ladder else {}), **(env or {})}
    long_s = (ladder.long_runner_min_s, ladder.known_long_runner_s) if ladder else (8.0, 20.0)
    # The client waits longer than any server-side bound, so what it records is
    # the cluster's answer, not its own impatience.
    timeout_s = (ladder.known_request_timeout_s if ladder else 60.0) + 30
    if cluster is None:
        cluster = Cluster(
            ClusterConfig(
                image=tag,
                name="rayspot-soak",
                workers=2,
                env=node_env,
                worker_resources={"w": 10},
            )
        )
    with cluster:
        cluster.deploy(workload_config(ladder), timeout_s=300)
        cluster.wait_lb_ready(cluster.nodes)

        async def main() -> int:
            started = time.time()
            spec = LoadSpec(
                rate=rate,
                duration_s=duration_s,
                connections=connections,
                max_requests=max_requests,
                mix=replace(mix, long_s=long_s),
                timeout_s=timeout_s,
            )
            load = asyncio.create_task(open_loop(*cluster.ingress, spec, history))
            reporter = (
                asyncio.create_task(_every_minute(every_minute, history, started))
                if every_minute
                else None
            )
            on_load()
            try:
                preemptions = await _preempt_on_schedule(
                    cluster, history, duration_s, interval_s, started, label
                )
                await load
            finally:
                if reporter:
                    reporter.cancel()
            return preemptions

        preemptions = asyncio.run(main())
    verdict = checker.check(history)
    _log.info(
        "soak %s: %s requests, %s failed, %d preemptions -> %s",
        label,
        f"{verdict.requests:,}",
        f"{verdict.failures:,}",
        preemptions,
        verdict.result,
    )
    return history, verdict


def soak(
    runs_each: int,
    minutes: float,
    interval_s: float = 180.0,
    rate: float = 20.0,
    parallel: int = len(CONFIGS),
    cluster_file: ClusterFile | None = None,
) -> dict[str, list[checker.Verdict]]:
    """Every configuration `runs_each` times, each run `minutes` long, on the
    patched image with every flag at its default; `parallel` runs at once, each
    on its own cluster (by default one number's runs of every configuration
    side by side, as a scenario runs its images). Writes build/results/soak/
    (report, timelines, histories).

    With `cluster_file`, the spot-notice ladder's runs only, one after the
    other, on that cluster as its nodes are configured (its Ray, flags and
    node env are read from it and saved with each run)."""
    title = (
        f"Soak: {runs_each} x {minutes:g} min per configuration, "
        f"a spot notice every {interval_s:g} s"
    )
    existing = None
    configs = CONFIGS
    if cluster_file is None:
        tag = images.ensure_node_image(images.ImageSpec(load_pin().ray.version, "patched"))
    else:
        existing = ExistingCluster.prepare(cluster_file, NEEDS, "the soak", SERIES_SETTINGS)
        ladder = CONFIGS[LADDER_CONFIG]
        assert ladder is not None  # the spot-notice ladder's configuration has one
        existing.compare_env(ladder.node_env())
        tag = f"existing cluster at {cluster_file.dashboard}"
        configs = {LADDER_CONFIG: ladder}
        parallel = 1
        title += f", on the {existing.found['version']} {existing.flavor} {tag}"
    clear_histories(RESULTS_DIR)
    # Run number first, so that one number's configurations run side by side;
    # the report lists each configuration's runs together, in `order`.
    plan = [(config, number) for number in range(1, runs_each + 1) for config in configs]

    def run(index: int, planned: tuple[str, int]) -> tuple[History, checker.Verdict]:
        config, number = planned
        label = f"{config} #{number}"
        what = f"run {index + 1}/{len(plan)} ({label})"
        # Each run its own key in the soak's progress (made below, before any
        # run starts): with --parallel the runs report side by side.
        progress.begin(f"{what}: starting a cluster, deploying", key=label)
        try:
            history, verdict = one_run(
                tag,
                label,
                configs[config],
                minutes * 60,
                interval_s,
                rate,
                # The plan is the load's minutes: they start once the apps are up.
                on_load=lambda: progress.begin(f"{what}: under load", minutes * 60, key=label),
                cluster=existing,
            )
        finally:
            # A run that failed is not running either (--parallel: the others go on).
            progress.end(key=label)
        # What `analyze` needs to lay the runs out as this report does.
        order = list(configs).index(config) * runs_each + number - 1
        history.meta.update(order=order, title=title)
        if existing is not None:  # what the cluster was found running
            history.meta["cluster"] = existing.found
        history.save(RESULTS_DIR / history_name(label))
        return history, verdict

    # The planned work is every run's minutes of load; the runs side by side
    # share the wall clock, which the pace sees (docstring of core/progress.py).
    with Progress("soak", len(plan) * minutes * 60) as progress:
        done = dict(zip(plan, runs.side_by_side(run, plan, parallel), strict=True))
        progress.begin("writing the report")
        numbers = range(1, runs_each + 1)
        recorded = {
            history.meta["label"]: (history, verdict)
            for history, verdict in (done[(config, n)] for config in configs for n in numbers)
        }
        sections = {"The cluster": report.cluster_section(existing.found)} if existing else {}
        report.write_report(RESULTS_DIR, title, recorded, sections)
    return {config: [done[(config, n)][1] for n in numbers] for config in configs}


def print_soak(results: dict[str, list[checker.Verdict]]) -> None:
    for config, verdicts in results.items():
        print(f"\n### {config}\n")
        print(report.table(verdicts))
    totals = {config: sum(v.failures for v in verdicts) for config, verdicts in results.items()}
    print("\nfailures: " + ", ".join(f"{c} {n:,}" for c, n in totals.items()))
    report_md = RESULTS_DIR / "report.md"
    if any(totals.values()) and report_md.exists():
        # Where a CI log is all that is left of a run, the failures must be in it.
        text = report_md.read_text()
        start = text.find(report.FAILURES_HEADING)
        end = text.find("\n## ", start + 1)
        print("\n" + text[start : end if end > 0 else None].strip())
    print(f"report: {report_md}")
