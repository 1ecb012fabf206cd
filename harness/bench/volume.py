"""`make soak SOAK_MODE=volume`: the soak at volume. Each configuration serves
at least a million requests at the highest rate this host sustains through the
front LB, with a spot notice about every 3 minutes and a replacement node after
each, one configuration after the other, each on a cluster of its own:

    stock 2.60.0                   the stock image
    patched, defaults              the patched image, every flag at its default
    patched, flags on              push health, runtime servers, master-worker

All three run with the spot-notice ladder's settings (the stock image ignores
the ones it lacks) and a mix of short requests and streams with a slice of
long-runners. Printed per configuration: the acceptance table (runs, duration,
requests, failures, RPS, result), latency from the schedule (p50, p99, p99.9,
max), the failures of each preemption, and the peak memory of this process,
which holds the load generator and the run's history. Each history is saved
under build/results/volume/ and dropped before the next run, so `analyze`
judges the runs again and memory holds one run at a time.

`--find-rate` measures the rate to use first: steps of open-loop load on one
patched cluster, the last step every request of which succeeded and started on
time.
"""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass, field

from harness.bench.soak import one_run, workload_config
from harness.cluster import images
from harness.cluster.cluster import Cluster, ClusterConfig
from harness.core import log, paths
from harness.core.pin import load_pin
from harness.core.progress import Progress
from harness.experiment import checker, report
from harness.experiment.checker import Latency, latency_of, percentile
from harness.experiment.configs import PUSH_HEALTH, RUNTIME_SERVERS_MASTER_WORKER
from harness.experiment.history import History, clear_histories, history_name
from harness.experiment.load import LoadSpec, Mix, open_loop
from harness.ladder.model import Ladder

_log = log.get(__name__)

RESULTS_DIR = paths.RESULTS_DIR / "volume"
REQUESTS = 1_000_000
INTERVAL_S = 180.0
# Short requests and streams, and a slice of long-runners: at hundreds of
# requests a second, 1% of long-runners (the ladder's range) keeps dozens
# running at once.
MIX = Mix(short=0.90, long=0.01, stream=0.09, long_path="/long/")
CONNECTIONS = 256
# --find-rate: offered rates, each held for STEP_S on one cluster; a step holds
# when every request succeeds and 99% of them start within START_LAG_S of
# their schedule.
RATE_STEPS = (200.0, 400.0, 600.0, 800.0, 1000.0, 1200.0, 1500.0)
STEP_S = 30.0
START_LAG_S = 0.05
PROGRESS_EVERY_S = 60.0


@dataclass(frozen=True)
class VolumeConfig:
    label: str
    flavor: str  # the image: "stock" or "patched"
    env: dict[str, str] = field(default_factory=dict)  # on top of the ladder's


CONFIGS = (
    VolumeConfig("stock 2.60.0", "stock"),
    VolumeConfig("patched, defaults", "patched"),
    VolumeConfig("patched, flags on", "patched", {**PUSH_HEALTH, **RUNTIME_SERVERS_MASTER_WORKER}),
)


@dataclass
class VolumeResult:
    verdict: checker.Verdict
    # Successful requests' latency from the time each was due.
    from_schedule: Latency | None
    preemptions: list[int]  # failed requests per spot notice, in order
    peak_rss_mib: float  # of this process, after the run


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def progress_line(history: History, started: float, duration_s: float) -> str:
    """What a run has done so far: requests, failures, preemptions, the rate
    of the last minute and the time left."""
    now = time.time()
    done = len(history.requests)
    failed = sum(not r.ok for r in history.requests)
    recent = sum(r.end >= now - PROGRESS_EVERY_S for r in history.requests)
    notices = sum(e.fault == "spot_preemption" and e.phase == "start" for e in history.events)
    left = max(0.0, started + duration_s - now)
    return (
        f"{done:,} requests, {failed:,} failed, {notices} preemptions, "
        f"{recent / PROGRESS_EVERY_S:,.0f}/s over the last minute, {left / 60:.0f} min left"
    )


def judge(history: History) -> VolumeResult:
    verdict = checker.check(history)
    return VolumeResult(
        verdict=verdict,
        from_schedule=latency_of(history.requests, from_scheduled=True),
        preemptions=[w.failures for w in verdict.windows if w.fault == "spot_preemption"],
        peak_rss_mib=_peak_rss_mib(),
    )


def volume_soak(rate: float, requests: int = REQUESTS, interval_s: float = INTERVAL_S) -> dict:
    """Every configuration in turn, `requests` at `rate` each; returns
    {label: VolumeResult} and writes RESULTS_DIR."""
    duration_s = requests / rate
    version = load_pin().ray.version
    tags = {
        c.flavor: images.ensure_node_image(images.ImageSpec(version, c.flavor)) for c in CONFIGS
    }
    clear_histories(RESULTS_DIR)
    results: dict[str, VolumeResult] = {}
    title = f"Volume soak: {requests:,} requests at {rate:g}/s per configuration"
    with Progress("volume soak", len(CONFIGS) * duration_s) as progress:
        for config in CONFIGS:
            label = config.label
            progress.begin(f"{label}: starting a cluster, deploying")

            def under_load(label: str = label) -> None:
                progress.begin(f"{label}: under load", duration_s)

            def each_minute(history: History, started: float, label: str = label) -> None:
                _log.info("volume %s: %s", label, progress_line(history, started, duration_s))

            history, _ = one_run(
                tags[config.flavor],
                label,
                Ladder(),
                duration_s,
                interval_s,
                rate,
                on_load=under_load,
                env=config.env,
                mix=MIX,
                connections=CONNECTIONS,
                max_requests=requests,
                every_minute=each_minute,
            )
            history.meta.update(title=title, order=len(results))
            history.save(RESULTS_DIR / history_name(label))
            results[label] = judge(history)
            del history  # one run's rows in memory at a time
    return results


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def print_volume(results: dict[str, VolumeResult]) -> None:
    print("\n" + report.table([r.verdict for r in results.values()]))
    print(
        "\n| configuration | p50 | p99 | p99.9 | max | failures per preemption "
        "| peak memory of the load generator and history |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for label, r in results.items():
        lat = r.from_schedule
        cells = [_ms(lat.p50), _ms(lat.p99), _ms(lat.p999), _ms(lat.max)] if lat else ["-"] * 4
        per = ", ".join(f"{n:,}" for n in r.preemptions) or "none"
        print(f"| {label} | {' | '.join(cells)} | {per} | {r.peak_rss_mib:,.0f} MiB |")
    print("\nLatency of successful requests from the time each was due (open loop).")


def find_rate(steps: tuple[float, ...] = RATE_STEPS, step_s: float = STEP_S) -> float:
    """The highest offered rate in `steps` at which one patched cluster, with
    the ladder's settings and the volume mix, answered every request with 99%
    of them starting on time; each step is printed."""
    ladder = Ladder()
    tag = images.ensure_node_image(images.ImageSpec(load_pin().ray.version, "patched"))
    config = ClusterConfig(
        image=tag,
        name="rayspot-volume-rate",
        workers=2,
        env=ladder.node_env(),
        worker_resources={"w": 10},
    )
    sustained = 0.0
    with Cluster(config) as cluster, Progress("find rate", len(steps) * step_s) as progress:
        cluster.deploy(workload_config(ladder), timeout_s=300)
        cluster.wait_lb_ready(cluster.nodes)
        for rate in steps:
            progress.begin(f"{rate:g}/s for {step_s:g} s", step_s)
            history = History()
            spec = LoadSpec(
                rate=rate, duration_s=step_s, connections=CONNECTIONS, mix=MIX, timeout_s=60.0
            )
            asyncio.run(open_loop(*cluster.ingress, spec, history))
            lags = sorted(r.start - r.scheduled for r in history.requests if r.scheduled)
            failed = sum(not r.ok for r in history.requests)
            lag = percentile(lags, 99) if lags else float("inf")
            held = failed == 0 and lag <= START_LAG_S
            print(
                f"{rate:g}/s: {len(history.requests):,} requests, {failed:,} failed, "
                f"p99 start lag {lag * 1000:.0f} ms -> {'held' if held else 'not held'}"
            )
            if not held:
                break
            sustained = rate
    return sustained
