"""Mutation check for the push-health patches: proves their unit tests notice when
a piece of the mechanism is removed.

Given a site-packages with the series applied, each mutation in `MUTATIONS`
replaces one exact snippet of the patched Ray source with a neutralised version
and runs the patch tests with that site-packages' interpreter. A mutation is
caught when some test fails; one that leaves every test green has survived, and
`main` exits non-zero. A snippet that is missing or ambiguous means the patch
changed under the mutation: that is an error naming it, never a pass.

Every run, the unmutated one included, imports Ray through its own overlay
(`harness.patches.overlay`): a copy of the installed `ray/serve` in which only
the mutated file differs, over the installed rest of Ray. The installed tree is
only read, so an interrupted check leaves nothing to undo, and the mutated runs
can go several at a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from harness.core import log, proc, venv
from harness.core.cliargs import at_least_one
from harness.core.errors import HarnessError
from harness.core.paths import VENV_DIR
from harness.patches.overlay import serve_overlay

_log = log.get(__name__)

_DEPLOYMENT_STATE = "ray/serve/_private/deployment_state.py"
_REPLICA = "ray/serve/_private/replica.py"
_RELAY = "ray/serve/_private/replica_health_relay.py"
_COMMON = "ray/serve/_private/common.py"
# Where the patches install their tests (the wheel ships no tests of its own),
# and the push-health patches' own files among them: every mutation is in their
# code, and the other patches' tests (real
# HAProxy processes among them) only add minutes to every one of the runs.
_PATCH_TESTS = "ray/serve/tests/unit"
_PUSH_HEALTH_TESTS = ("test_push_health_*.py",)
_PYTEST_FLAGS = ["-x", "-q", "-rf", "-p", "no:cacheprovider", "-p", "no:warnings"]
# The test file written for each mutated file. A mutated run puts it first: with
# -x the run stops at the first failure, so the tests most likely to catch the
# mutation go before the others (the relay's, say, which mostly wait), and every
# test still runs should none of them fail.
_TESTED_FIRST_BY = {
    _DEPLOYMENT_STATE: "test_push_health_receive.py",
    _REPLICA: "test_push_health_sender.py",
    _RELAY: "test_push_health_relay.py",
    _COMMON: "test_push_health_receive.py",
}
# pytest's exit codes for "ran, all passed" and "ran, some test failed"; anything
# else (collection error, usage error, no tests) proves nothing either way.
_PASSED, _TESTS_FAILED = 0, 1
# A mutated run taking longer than this multiple of the unmutated one, plus the
# margin, is taken to hang.
_HANG_FACTOR, _HANG_MARGIN_S = 5, 30.0
# How much of pytest's output an error shows: about its last 30 lines, which
# hold the failure and the summary.
_SHOWN_OUTPUT = 3000


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to site-packages
    original: str
    neutralised: str


@dataclass(frozen=True)
class MutationResult:
    name: str
    path: str
    caught: bool
    failed_tests: tuple[str, ...]
    duration_s: float


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "a timeout of a replica pushing through a relay is held",
        _DEPLOYMENT_STATE,
        "            and self._last_probe_timed_out\n"
        "            and self._last_carried_at is not None\n",
        "            and self._last_probe_timed_out\n            and False\n",
    ),
    Mutation(
        "only a timeout is held",
        _DEPLOYMENT_STATE,
        "            and self._last_probe_timed_out\n"
        "            and self._last_carried_at is not None\n",
        "            and self._last_carried_at is not None\n",
    ),
    Mutation(
        "a report dated after the probe drops its timeout",
        _DEPLOYMENT_STATE,
        "            probe_answered or (reported_at is not None and held[0] < reported_at)\n",
        "            probe_answered\n",
    ),
    Mutation(
        "an answered probe drops held timeouts",
        _DEPLOYMENT_STATE,
        "            probe_answered or (reported_at is not None and held[0] < reported_at)\n",
        "            reported_at is not None and held[0] < reported_at\n",
    ),
    Mutation(
        "a relay batch that left late enough confirms a held timeout",
        _DEPLOYMENT_STATE,
        "            (carried_at is not None and held[0] + silent_for_s <= carried_at)\n",
        "            False\n",
    ),
    Mutation(
        "confirmation waits a period and a timeout",
        _DEPLOYMENT_STATE,
        "        silent_for_s = self.health_check_period_s + self.health_check_timeout_s\n",
        "        silent_for_s = max(self.health_check_period_s, self.health_check_timeout_s)\n",
    ),
    Mutation(
        "a held timeout is charged after the cap",
        _DEPLOYMENT_STATE,
        "            or now - held[0] >= PUSH_HEALTH_UNCONFIRMED_TIMEOUT_MAX_S\n",
        "            or False\n",
    ),
    Mutation(
        "a healthy report older than held probes does not clear them",
        _DEPLOYMENT_STATE,
        "            if response is not ReplicaHealthCheckResponse.APP_FAILURE:\n",
        "            if response is ReplicaHealthCheckResponse.NONE:\n",
    ),
    Mutation(
        "a batch's departure survives an overtaken batch",
        _DEPLOYMENT_STATE,
        "                    self._carried_at.get(report.replica_unique_id, -math.inf),\n",
        "                    -math.inf,\n",
    ),
    Mutation(
        "only a batch that carries the replica shows it silent",
        _DEPLOYMENT_STATE,
        "                self._carried_at[report.replica_unique_id] = max(\n"
        "                    self._carried_at.get(report.replica_unique_id, -math.inf),\n"
        "                    departed_at,\n"
        "                )\n",
        "                for unique_id in self._entries:\n"
        "                    self._carried_at[unique_id] = departed_at\n",
    ),
    Mutation(
        "a confirmed timeout is a failed check",
        _DEPLOYMENT_STATE,
        "            self._last_health_check_failed = True\n            strikes += confirmed\n",
        "            strikes += confirmed\n",
    ),
    Mutation(
        "a batch held up in transit is dated back",
        _DEPLOYMENT_STATE,
        "        return max(0.0, took_s - min(current, previous))\n",
        "        return 0.0\n",
    ),
    Mutation(
        "the transit floor forgets old batches",
        _DEPLOYMENT_STATE,
        "        if now - started_at >= half_window_s:\n",
        "        if False:\n",
    ),
    Mutation(
        "a report older than an applied probe is not applied",
        _DEPLOYMENT_STATE,
        "            and pushed.received_at < self._last_applied_probe_sent_at\n",
        "            and False\n",
    ),
    Mutation(
        "arrival dated back by the relay hold",
        _DEPLOYMENT_STATE,
        "                now - max(0.0, report.held_s) - in_transit_s,\n",
        "                now - in_transit_s,\n",
    ),
    Mutation(
        "fallback probe for stale reports",
        _DEPLOYMENT_STATE,
        "            < push_freshness_window_s(self.health_check_period_s)\n",
        '            < float("inf")\n',
    ),
    Mutation(
        "probe at once on exit",
        _DEPLOYMENT_STATE,
        "            self._probe_now = True\n            return\n",
        "            return\n",
    ),
    Mutation(
        "once-per-period failure counting",
        _REPLICA,
        "        if (\n"
        "            self._consecutive_failures == 0\n"
        "            or now - self._last_counted_failure_at\n"
        "            >= self._period_s - 0.5 * self._check_interval_s()\n"
        "        ):\n",
        "        if True:\n",
    ),
    Mutation(
        "failure counting tolerates timer jitter",
        _REPLICA,
        "            >= self._period_s - 0.5 * self._check_interval_s()\n",
        "            >= self._period_s\n",
    ),
    Mutation(
        "self-checks timed from the previous start",
        _REPLICA,
        "            await self._pause(started_at + self._check_interval_s() - self._clock())\n",
        "            await self._pause(self._check_interval_s())\n",
    ),
    Mutation(
        "unhealthy or exited replicas visited in the next loop",
        _DEPLOYMENT_STATE,
        "        urgent = registry.urgent_replica_ids\n",
        "        urgent = set()\n",
    ),
    Mutation(
        "threshold latch",
        _REPLICA,
        "            or self._consecutive_failures >= REPLICA_HEALTH_CHECK_UNHEALTHY_THRESHOLD\n",
        "            or False\n",
    ),
    Mutation(
        "pause while reconfiguring or draining",
        _REPLICA,
        "            self.paused\n            or self._consecutive_failures",
        "            False\n            or self._consecutive_failures",
    ),
    Mutation(
        "stale result fails the probe",
        _REPLICA,
        "            age_s > self._period_s + self._timeout_s\n",
        "            False\n",
    ),
    Mutation(
        "unhealthy bypass",
        _REPLICA,
        "            if self._healthy or self._unhealthy_edge_pushed:\n",
        "            if True:\n",
    ),
    Mutation(
        "the relay lookup does not hold up the checks",
        _REPLICA,
        "                self._record(error=error)\n        self._report()\n",
        "                self._record(error=error)\n"
        "        self._report()\n"
        "        if self._relay_lookup is not None:\n"
        "            await self._relay_lookup\n",
    ),
    Mutation(
        "relay batching (hold)",
        _RELAY,
        "            self._hold_s = PUSH_HEALTH_RELAY_HOLD_PERIOD_FRACTION * min(\n",
        "            self._hold_s = 0.0 * min(\n",
    ),
    Mutation(
        "the relay sends on the shared grid",
        _RELAY,
        "        return self._on_send_grid(min(starts) + self._hold_s, self._hold_s)\n",
        "        return min(starts) + self._hold_s\n",
    ),
    Mutation(
        "each relay sends on its own slot of the grid",
        _RELAY,
        "        step -= (step - self._send_slot(steps)) % steps\n",
        "        step -= step % steps\n",
    ),
    Mutation(
        "the send grid keeps the clocks' offset through jitter",
        _RELAY,
        "            or abs(wall_offset_s - self._wall_offset_s) > tolerance_s\n",
        "            or True\n",
    ),
    Mutation(
        "the relay's hold is worked out again only on a change",
        _RELAY,
        "        if self._hold_s is None:\n",
        "        if True:\n",
    ),
    Mutation(
        "relay hold follows a new period",
        _RELAY,
        "        self._latest[unique_id] = _HeldReport(report, now, health_check_period_s)\n",
        "        self._latest[unique_id] = _HeldReport(\n"
        "            report, now, held.period_s if held else health_check_period_s\n"
        "        )\n",
    ),
    Mutation(
        "relay sends while it carries replicas",
        _RELAY,
        "            for start in (self._first_unsent_at, self._last_send_at)\n",
        "            for start in (self._first_unsent_at,)\n",
    ),
    Mutation(
        "every batch carries every watched replica",
        _RELAY,
        "            if unique_id in self._watched\n",
        "            if False\n",
    ),
    Mutation(
        "a replica not watched is sent once",
        _RELAY,
        "            if unique_id in self._watched\n",
        "            if True\n",
    ),
    Mutation(
        "the relay wakes only when a report changes when to send",
        _RELAY,
        "        if wake:\n            self._notify()\n",
        "        self._notify()\n",
    ),
    Mutation(
        "a check a pause overlapped does not mark the replica",
        _REPLICA,
        '            logger.warning("Replica health check failed.")\n            raise\n',
        '            logger.warning("Replica health check failed.")\n'
        "            self._healthy = False\n"
        "            raise\n",
    ),
    Mutation(
        "relay sends news at once",
        _RELAY,
        "        if self._is_news(report):\n            self._urgent = wake = True\n",
        "",
    ),
    Mutation(
        "relay in-flight bound",
        _RELAY,
        "            return self._urgent and len(self._in_flight) == 1\n",
        "            return True\n",
    ),
    Mutation(
        "relay exit watch",
        _RELAY,
        "        self._exited.append(unique_id)\n",
        "",
    ),
    Mutation(
        "relay exit watch made again after an error that is no exit",
        _RELAY,
        "                # failed): reporting an exit would drop this watch for good.\n"
        "                outcome = repr(e)\n",
        "                break\n",
    ),
    Mutation(
        "replica finds its relay again",
        _REPLICA,
        "            self._relay = None\n"
        "            self._pending_heartbeat_ref = None\n"
        "            self._next_relay_lookup_at = 0.0\n",
        "            self._pending_heartbeat_ref = None\n"
        "            self._next_relay_lookup_at = 0.0\n",
    ),
    Mutation(
        "a proxy that declines reports is no relay",
        _REPLICA,
        "        if taken is False:\n",
        "        if False:\n",
    ),
    Mutation(
        "a failed batch waits for the retry time",
        _RELAY,
        "        if now < self._retry_at:\n            return False\n",
        "",
    ),
    Mutation(
        "a malformed batch is refused whole",
        _COMMON,
        "            and all(map(_is_well_formed, batch.reports))\n",
        "",
    ),
    Mutation(
        "repeat-unhealthy suppression",
        _REPLICA,
        "        if not self._healthy:\n            self._unhealthy_edge_pushed = True\n",
        "",
    ),
)


def _source(site_packages: Path, mutation: Mutation) -> str:
    target = site_packages / mutation.path
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise HarnessError(
            f"mutation '{mutation.name}': cannot read {target} ({exc}). Nothing was "
            f"run. Apply the series to {site_packages} first."
        ) from exc
    count = text.count(mutation.original)
    if count != 1:
        found = "is not in" if count == 0 else f"occurs {count} times in"
        raise HarnessError(
            f"mutation '{mutation.name}': its snippet {found} {target}, so the patch "
            f"changed under it. Nothing was run. Update the snippet in "
            f"harness/patches/mutation.py to the patched code (keep what it removes)."
        )
    return text


def _in_overlay(pytest_args: Sequence[str], site_packages: Path, overlay: Path) -> list[str]:
    """`pytest_args` with each path into the installed serve tree (`path` or
    `path::test`) pointed at the overlay's copy instead. pytest puts a test
    file's folder first on sys.path, so a test run from site-packages would
    import the installed Ray, not the overlay."""
    serve = site_packages / "ray" / "serve"
    moved = []
    for arg in pytest_args:
        path, sep, test = arg.partition("::")
        try:
            rel = Path(path).resolve().relative_to(serve)
        except ValueError:
            moved.append(arg)
            continue
        moved.append(f"{overlay / 'ray' / 'serve' / rel}{sep}{test}")
    return moved


def _run_pytest(
    python: Path,
    site_packages: Path,
    overlay: Path,
    pytest_args: Sequence[str],
    timeout_s: float | None = None,
) -> proc.CompletedProcess[str]:
    """Run the tests against `overlay`; raises proc.TimeoutExpired (child
    killed) past `timeout_s`."""
    # An empty ini of our own, so every run has the same settings whichever
    # ini lies above the scratch folder or the caller's folder.
    ini = overlay / "pytest.ini"
    ini.write_text("[pytest]\n")
    path = os.pathsep.join(filter(None, [str(overlay), os.environ.get("PYTHONPATH")]))
    env = {
        **os.environ,
        "PYTHONPATH": path,
        # No bytecode is written, neither beside the copy nor into the
        # installed Ray the overlay links to.
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    cmd: list[str | os.PathLike[str]] = [
        python,
        "-m",
        "pytest",
        *_PYTEST_FLAGS,
        "-c",
        ini,
        "--rootdir",
        overlay,
        # The tests' tmp_path inside the overlay, which is removed with it and
        # is not shared with a run going on at the same time.
        f"--basetemp={overlay / 'tmp'}",
        *_in_overlay(pytest_args, site_packages, overlay),
    ]
    return proc.run(cmd, env=env, timeout=timeout_s)


def _own_tests_first(pytest_args: Sequence[str], mutated: str) -> list[str]:
    """`pytest_args` with the paths into the mutated file's own test file moved
    to the front, the rest in their order: the same tests, in another order."""
    own = _TESTED_FIRST_BY.get(mutated)

    def is_own(arg: str) -> bool:
        return own is not None and Path(arg.partition("::")[0]).name == own

    return [a for a in pytest_args if is_own(a)] + [a for a in pytest_args if not is_own(a)]


def _overlay(
    site_packages: Path, scratch: Path, replacing: Mapping[str, str] | None = None
) -> AbstractContextManager[Path]:
    # The installed tree's bytecode is what its own venv runs, so every run may
    # start from it; only the mutated file is compiled again.
    return serve_overlay(
        site_packages, site_packages / "ray" / "serve", scratch, replacing, bytecode=True
    )


def _failed_tests(output: str) -> tuple[str, ...]:
    return tuple(
        line.split(" ", 1)[1].split(" - ", 1)[0]
        for line in output.splitlines()
        if line.startswith(("FAILED ", "ERROR "))
    )


def _run_mutation(
    python: Path,
    site_packages: Path,
    scratch: Path,
    mutation: Mutation,
    text: str,
    pytest_args: Sequence[str],
    hang_after_s: float,
) -> MutationResult:
    """Run the tests with `mutation` applied to `text` (its file's source) in
    an overlay of its own."""
    mutated = {mutation.path: text.replace(mutation.original, mutation.neutralised, 1)}
    started = time.monotonic()
    with _overlay(site_packages, scratch, replacing=mutated) as overlay:
        try:
            result = _run_pytest(
                python,
                site_packages,
                overlay,
                _own_tests_first(pytest_args, mutation.path),
                hang_after_s,
            )
        except proc.TimeoutExpired:
            # A mutation can make a test hang (a loop that never yields, say):
            # the run was killed and counts as caught, since the tests did not pass.
            return MutationResult(
                name=mutation.name,
                path=mutation.path,
                caught=True,
                failed_tests=(f"(tests hung: killed after {hang_after_s:.0f}s)",),
                duration_s=time.monotonic() - started,
            )
    if result.returncode not in (_PASSED, _TESTS_FAILED):
        raise HarnessError(
            f"mutation '{mutation.name}': pytest exited {result.returncode} (not a "
            f"test failure: the mutation broke collection or the run). "
            f"{site_packages} was not changed. Make the neutralised snippet valid "
            f"code:\n{proc.output_tail(result, _SHOWN_OUTPUT)}"
        )
    return MutationResult(
        name=mutation.name,
        path=mutation.path,
        caught=result.returncode == _TESTS_FAILED,
        failed_tests=_failed_tests(result.stdout),
        duration_s=time.monotonic() - started,
    )


def _run_concurrently(
    mutations: Sequence[Mutation],
    run_one: Callable[[Mutation], MutationResult],
    jobs: int,
    started: float,
) -> list[MutationResult]:
    """`run_one` for each mutation, `jobs` at a time; the results in the order of
    `mutations`. The first error (in that order) stops new runs and is raised
    once the running ones are done."""
    pending = iter(enumerate(mutations, start=1))
    results: dict[int, MutationResult] = {}
    errors: dict[int, BaseException] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def work() -> None:
        while True:
            # Taken and announced under one lock, so the progress lines come in
            # the order of `mutations` whichever runner is free first.
            with lock:
                index, mutation = next(pending, (0, None))
                if mutation is None or stop.is_set():
                    return
                log.progress(
                    _log,
                    f"mutation: {index}/{len(mutations)} {mutation.name} ({mutation.path})",
                    started,
                )
            try:
                results[index] = run_one(mutation)
            except BaseException as exc:
                errors[index] = exc
                stop.set()

    runners = [
        threading.Thread(target=work, name=f"mutation-runner-{n}")
        for n in range(min(jobs, len(mutations)))
    ]
    for runner in runners:
        runner.start()
    try:
        for runner in runners:
            runner.join()
    except KeyboardInterrupt:
        # Ctrl-C reached the running pytest processes too (one process group);
        # wait for them, so that each overlay is removed by its own runner.
        stop.set()
        for runner in runners:
            runner.join()
        raise
    if errors:
        raise errors[min(errors)]
    return [results[index] for index in sorted(results)]


def run_mutations(
    site_packages: Path,
    pytest_args: Sequence[str],
    *,
    python: Path | None = None,
    jobs: int = 1,
    mutations: Sequence[Mutation] = MUTATIONS,
) -> list[MutationResult]:
    """Run the patch tests once unmutated, then once per mutation, `jobs` at a
    time; the results in the order of `mutations`.

    `pytest_args` selects the tests (paths, -k ...). Raises `HarnessError` if the
    unmutated run is not green, if a snippet is missing, or if a mutated run
    errors instead of passing or failing.
    """
    site_packages = site_packages.resolve()
    python = python or venv.python_of(
        site_packages,
        "Nothing was run. Pass the site-packages of the venv the series is applied to.",
    )
    texts = {m.name: _source(site_packages, m) for m in mutations}

    with tempfile.TemporaryDirectory(prefix="mutation-") as scratch_dir:
        scratch = Path(scratch_dir)
        started = time.monotonic()
        _log.info("mutation: baseline, unmutated")
        # Through an overlay of the unchanged tree, so that the baseline and
        # the mutated runs differ in the one mutated file and nothing else.
        with _overlay(site_packages, scratch) as overlay:
            baseline = _run_pytest(python, site_packages, overlay, pytest_args)
        hang_after_s = _HANG_FACTOR * (time.monotonic() - started) + _HANG_MARGIN_S
        if baseline.returncode != _PASSED:
            raise HarnessError(
                f"the patch tests fail without any mutation (pytest exit "
                f"{baseline.returncode}), so a mutation run would prove nothing. "
                f"Fix the tests first:\n{proc.output_tail(baseline, _SHOWN_OUTPUT)}"
            )

        def run_one(mutation: Mutation) -> MutationResult:
            return _run_mutation(
                python,
                site_packages,
                scratch,
                mutation,
                texts[mutation.name],
                pytest_args,
                hang_after_s,
            )

        return _run_concurrently(mutations, run_one, jobs, started)


def format_table(results: list[MutationResult]) -> str:
    rows = [("mutation", "result", "first failing test")]
    for r in results:
        first = r.failed_tests[0].rsplit("/", 1)[-1] if r.failed_tests else "-"
        rows.append((r.name, "caught" if r.caught else "SURVIVED", first))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c}" for a, b, c in rows]
    lines.insert(1, "-" * max(len(line) for line in lines))
    caught = sum(r.caught for r in results)
    lines.append(f"{caught} of {len(results)} mutations caught")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m harness.patches.mutation",
        description="Remove each push-health mechanism in turn; every removal must "
        "make a patch test fail.",
    )
    parser.add_argument(
        "--site-packages",
        type=Path,
        help="site-packages with the series applied (default: the project's .venv)",
    )
    parser.add_argument(
        "--jobs",
        type=at_least_one,
        default=os.cpu_count() or 1,
        help="mutated test runs at a time (default: the number of CPUs, %(default)s)",
    )
    parser.add_argument(
        "pytest_args",
        nargs="*",
        help=f"passed to pytest (default: {', '.join(_PUSH_HEALTH_TESTS)} under "
        f"<site-packages>/{_PATCH_TESTS})",
    )
    args = parser.parse_args(argv)
    try:
        site = args.site_packages or venv.site_packages(VENV_DIR, fix="pass --site-packages")
        tests = sorted(
            str(p) for pattern in _PUSH_HEALTH_TESTS for p in (site / _PATCH_TESTS).glob(pattern)
        )
        if not args.pytest_args and not tests:
            raise HarnessError(
                f"no {' or '.join(_PUSH_HEALTH_TESTS)} under {site / _PATCH_TESTS}; run "
                f"`make apply-patches` first"
            )
        results = run_mutations(site, args.pytest_args or tests, jobs=args.jobs)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("mutation: interrupted; the installed Ray was never changed.", file=sys.stderr)
        sys.exit(130)
    print(format_table(results))
    if not all(r.caught for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
