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
from harness.core.errors import VerdictFailed
from harness.core.pin import load_pin
from harness.core.progress import Progress
from harness.experiment import checker, report
from harness.experiment.checker import Latency, percentile
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
    # Per request kind, successful requests' latency from the time each was
    # due (a long-runner's includes the sleep it asked for).
    from_schedule: dict[str, Latency | None]
    preemptions: list[int]  # failed requests per spot notice, in order
    peak_rss_mib: float  # of this process so far (its largest run's history)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RunProgress:
    """A run's progress line, each call reading only the rows recorded since
    the last one: at a million rows a full scan a minute would stall the load
    generator's event loop."""

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self.seen = 0
        self.failed = 0
        self.last: tuple[float, int] | None = None  # (time, rows) at the last call

    def line(self, history: History, started: float) -> str:
        now = time.time()
        rows = history.requests[self.seen :]
        self.seen += len(rows)
        self.failed += sum(not r.ok for r in rows)
        since, before = self.last or (started, 0)
        self.last = (now, self.seen)
        rate = (self.seen - before) / max(now - since, 1e-9)
        notices = sum(e.fault == "spot_preemption" and e.phase == "start" for e in history.events)
        left = max(0.0, started + self.duration_s - now)
        return (
            f"{self.seen:,} requests, {self.failed:,} failed, {notices} preemptions, "
            f"{rate:,.0f}/s since the last line, {left / 60:.0f} min left"
        )


def judge(verdict: checker.Verdict) -> VolumeResult:
    return VolumeResult(
        verdict=verdict,
        from_schedule={kind: stats.latency_from_scheduled for kind, stats in verdict.kinds.items()},
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

            run_progress = RunProgress(duration_s)

            def each_minute(
                history: History, started: float, label: str = label, run=run_progress
            ) -> None:
                _log.info("volume %s: %s", label, run.line(history, started))

            history, verdict = one_run(
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
            # Stock is the comparison, not the claim: `analyze` reports it
            # without failing on it, as this command does.
            history.meta.update(title=title, order=len(results), claim=config.flavor != "stock")
            history.save(RESULTS_DIR / history_name(label))
            # one_run's verdict: the check reads every row, so it is made once.
            results[label] = judge(verdict)
            del history  # one run's rows in memory at a time
    return results


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def print_volume(results: dict[str, VolumeResult], rate: float) -> None:
    print(f"\nEach configuration at {rate:g} requests/s offered.")
    print("\n" + report.table([r.verdict for r in results.values()]))
    print(
        "\nLatency of successful requests from the time each was due (open loop), by kind "
        "(a long-runner's includes the 8-20 s it asked to sleep):\n"
    )
    print("| configuration | kind | requests | p50 | p99 | p99.9 | max |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        for kind, lat in r.from_schedule.items():
            n = r.verdict.kinds[kind].requests
            cells = [_ms(lat.p50), _ms(lat.p99), _ms(lat.p999), _ms(lat.max)] if lat else ["-"] * 4
            print(f"| {label} | {kind} | {n:,} | {' | '.join(cells)} |")
    print("\n| configuration | failures per preemption | failures outside them | peak memory |")
    print("|---|---|---:|---:|")
    for label, r in results.items():
        per = ", ".join(f"{n:,}" for n in r.preemptions) or "no preemption"
        print(f"| {label} | {per} | {r.verdict.failures_outside:,} | {r.peak_rss_mib:,.0f} MiB |")
    print(
        "\nPeak memory: this process (load generator and history) so far, after each run; "
        "one run's history is held at a time."
    )


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
    if not sustained:
        raise VerdictFailed(
            f"no offered rate held, not even {steps[0]:g}/s: every request must succeed and "
            f"99% start within {START_LAG_S * 1000:.0f} ms"
        )
    if sustained == steps[-1]:
        print(f"the highest step held: the host sustains at least {sustained:g}/s")
    return sustained
