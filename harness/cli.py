"""`python -m harness VERB ...`: the command line. Each verb imports only what it
needs, so `wheelhouse` runs before the venv exists."""

from __future__ import annotations

import argparse
import faulthandler
import functools
import os
import signal
import sys
import time
from pathlib import Path

from harness.core.cliargs import at_least_one, worker_count


def cmd_wheelhouse(args) -> None:
    from harness.core import wheels
    from harness.core.pin import load_pin

    pin = load_pin()
    for version in args.versions or [pin.ray.version]:
        print(wheels.ensure_wheelhouse(pin.release(version)))


def cmd_setup(args) -> None:
    """Create .venv: the project's own requirements first, then the pinned Ray
    installed offline from the verified wheelhouse. With --without-ray, stop
    after the requirements: docker-py is then there, so the node images can
    start building while the wheelhouse downloads (CI does that)."""
    from harness.core import wheels
    from harness.core.paths import ROOT, VENV_DIR
    from harness.core.pin import load_pin
    from harness.core.venv import python_in

    release = load_pin().ray
    python = python_in(VENV_DIR)
    _setup_step([sys.executable, "-m", "venv", str(VENV_DIR)], not python.exists())
    requirements = ROOT / "requirements.txt"
    _setup_step([str(python), "-m", "pip", "install", "--quiet", "-r", str(requirements)])
    if args.without_ray:
        print(f"setup: {VENV_DIR} has the project's requirements; Ray is not installed yet")
        return
    house = wheels.ensure_wheelhouse(release)
    offline = ["--no-index", "--find-links", str(house)]
    _setup_step([str(python), "-m", "pip", "install", "--quiet", *offline, release.requirement])
    print(f"setup: {VENV_DIR} has Ray {release.version} and the project's requirements")


def _setup_step(cmd: list[str], needed: bool = True) -> None:
    from harness.core import proc
    from harness.core.errors import HarnessError
    from harness.core.paths import VENV_DIR

    # pip's own output goes to the terminal: an install takes a while.
    if needed and proc.run(cmd, capture=False).returncode != 0:
        raise HarnessError(
            f"`{' '.join(cmd)}` failed (see above). The venv at {VENV_DIR} "
            f"may be incomplete; run `make setup` again to finish it."
        )


def cmd_patches(args) -> None:
    from harness.core.errors import HarnessError
    from harness.core.paths import PATCHES_DIR, VENV_DIR, WORKSPACE_DIR
    from harness.core.pin import load_pin, read_series
    from harness.core.venv import site_packages
    from harness.patches import checkout, installed, workspace

    if args.check and args.action != "export":
        raise HarnessError(f"--check goes with `patches export`, not `patches {args.action}`.")
    if args.fresh and not args.check:
        raise HarnessError("--fresh goes with `patches export --check`.")
    pin = load_pin()
    site = Path(args.site_packages) if args.site_packages else None
    ray_src = os.environ.get("RAY_SRC")
    if args.action == "apply" and ray_src:
        from harness.core import wheels

        # The pinned wheel is what a stand-in checkout is recognised by.
        wheel = wheels.verify_ray_wheel(wheels.ensure_wheelhouse(pin.ray), pin.ray)
        print(checkout.apply_to_checkout(Path(ray_src), read_series(), pin.ray, wheel).format())
    elif args.action == "apply":
        result = installed.apply_to_site_packages(
            site or site_packages(VENV_DIR), read_series(), pin.ray
        )
        print(result.format())
    elif args.action == "revert":
        # It prints its own summary; the list of restored files is for callers.
        installed.revert_site_packages(site or site_packages(VENV_DIR), force=args.force)
    elif args.action == "status":
        print(
            installed.status_site_packages(site or site_packages(VENV_DIR), read_series()).format()
        )
    elif args.action == "workspace":
        from harness.core import wheels

        wheel = wheels.verify_ray_wheel(wheels.ensure_wheelhouse(pin.ray), pin.ray)
        workspace.build_workspace(wheel, read_series(), WORKSPACE_DIR)
        print(f"workspace ready: {WORKSPACE_DIR} (one commit per patch on top of `base`)")
    elif args.action == "export" and args.check:
        _check_export(args.fresh)
    elif args.action == "export":
        for path in workspace.export_workspace(WORKSPACE_DIR, PATCHES_DIR):
            print(f"wrote {path.relative_to(PATCHES_DIR.parent)}")


def _check_export(fresh: bool) -> None:
    """`patches export --check`: exit 1 naming the files when patches/ is not
    exactly what an export writes; nothing is written."""
    from harness.core.errors import VerdictFailed, listing
    from harness.core.paths import PATCHES_DIR, WORKSPACE_DIR
    from harness.core.pin import load_pin, read_series
    from harness.patches import workspace

    if fresh:
        from harness.core import wheels

        pin = load_pin()
        wheel = wheels.verify_ray_wheel(wheels.ensure_wheelhouse(pin.ray), pin.ray)
        source = f"a workspace built from {wheel.name} and patches/series"
        differences = workspace.fresh_export_differences(wheel, read_series(), PATCHES_DIR)
        fix = (
            "The committed patch files are not what the export writes (edited by hand, or "
            "written by another tool): run `make workspace` and `make export-patches`, then "
            "commit the result."
        )
    else:
        source = str(WORKSPACE_DIR)
        differences = workspace.export_differences(WORKSPACE_DIR, PATCHES_DIR)
        fix = (
            "If the workspace holds the newer work, run `make export-patches` to write it "
            "to patches/; if patches/ does (a pull, an edit), run `make workspace` to "
            "rebuild the workspace from it."
        )
    if differences:
        raise VerdictFailed(
            f"patches/ differs from what an export of {source} writes: "
            f"{listing(differences)}. Nothing was written. {fix}"
        )
    print(f"patches: patches/ is exactly what an export of {source} writes; nothing was written")


def cmd_images(args) -> None:
    from harness.cluster import images
    from harness.core.pin import load_pin

    specs = [images.ImageSpec.parse(s) for s in args.specs] or images.default_images(load_pin())
    started = time.monotonic()
    for spec, tag in images.ensure_images(specs).items():
        print(f"{spec}: {tag}")
    print(f"images ready in {time.monotonic() - started:.0f}s")


def _run_help(format_help) -> str:
    """`run --help` with the scenarios listed; built only when asked for, since
    listing them imports every scenario."""
    from harness.scenarios import scenario_list

    return (
        format_help()
        + "\nscenarios (what each exercises; the images it compares by default):\n"
        + scenario_list()
        + "\n"
    )


def cmd_run(args) -> None:
    import inspect

    from harness.cluster import clusterfile, images
    from harness.core.errors import HarnessError
    from harness.scenarios import run_scenario, scenario_named

    scenario_class = scenario_named(args.scenario)
    specs = [images.ImageSpec.parse(s) for s in args.image] or None
    options = {}
    if args.scale is not None:
        if "scale" not in inspect.signature(scenario_class).parameters:
            raise HarnessError(
                f"{args.scenario} runs no timeout ladder, so --scale does not apply to it"
            )
        options["scale"] = args.scale
    cluster_file = clusterfile.load(Path(args.cluster)) if args.cluster else None
    if cluster_file and args.parallel > 1:
        raise HarnessError("--parallel does not apply with --cluster: one cluster, one run")
    scenario = scenario_class(**options)
    _print_outcome(run_scenario(scenario, specs, parallel=args.parallel, cluster_file=cluster_file))


def cmd_scenarios(args) -> None:
    """The scenario list `run --help` ends with, alone (`make help` prints it);
    with --env, the node settings one scenario starts its clusters with."""
    from harness.scenarios import node_env, scenario_list, scenario_named

    if args.env is None:
        print(scenario_list())
        return
    for name, value in node_env(scenario_named(args.env)()).items():
        print(f"{name}={value}")


def cmd_analyze(args) -> None:
    from harness.scenarios.analyze import analyze

    out = Path(args.out) if args.out else None
    _print_outcome(analyze(Path(args.path), out, merge=args.merge))


def cmd_load(args) -> None:
    """The open loop from this host against an ingress, its history saved
    where `analyze --merge` finds it beside other hosts' (README.md, "Load from
    more than one process")."""
    import asyncio
    import socket

    from harness.cluster.clusterfile import http_address
    from harness.experiment.history import History, history_name
    from harness.experiment.load import LoadSpec, Mix, open_loop_processes

    host, port = http_address(args.ingress, "--ingress")
    label = args.name or f"load from {socket.gethostname()}"
    out = Path(args.out) / history_name(label)
    if out.exists():
        from harness.core.errors import HarnessError

        raise HarnessError(f"{out} exists; give this host's load another --name, or move it")
    history = History({"label": label, "title": "Load from several hosts", "claim": True})
    spec = LoadSpec(
        rate=args.rate,
        duration_s=args.seconds,
        connections=args.connections,
        mix=Mix(short_path=args.path),
        timeout_s=args.timeout,
    )
    if args.start is not None and args.start < time.time():
        from harness.core.errors import HarnessError

        raise HarnessError(
            f"--start {args.start:.0f} is in the past; give a time all hosts will reach"
        )
    asyncio.run(open_loop_processes(host, port, spec, history, args.processes, start=args.start))
    history.save(out)
    failed = sum(not r.ok for r in history.requests)
    print(f"{len(history.requests):,} requests, {failed:,} failed; history: {out}")


def _print_outcome(outcome) -> None:
    """A scenario's report, and exit 1 unless it came out as the scenario claims."""
    from harness.core.errors import VerdictFailed

    print(outcome.report["md"].read_text())
    took = f"  ({outcome.wall_s:.0f}s)" if outcome.wall_s else ""
    print(f"report: {outcome.report['md'].parent}{took}")
    if not outcome.as_expected:
        raise VerdictFailed(
            f"{outcome.name}: the outcome is not what the scenario claims: "
            + "; ".join(outcome.findings)
        )


def _spreads_ms(text: str) -> tuple[float, ...]:
    try:
        spreads = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not comma-separated numbers of ms, e.g. 0,1,5,20,100,1000"
        ) from None
    if len(spreads) < 2 or min(spreads) < 0 or spreads[0] != 0 or len(set(spreads)) < len(spreads):
        raise argparse.ArgumentTypeError(
            "at least two different spreads, none negative, the first 0 (the baseline the "
            "others are compared with)"
        )
    return spreads


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if len(sizes) < 2 or min(sizes) < 1:
        raise argparse.ArgumentTypeError("at least two sizes, each at least 1, so the slope shows")
    return sizes


def cmd_bench_load(args) -> None:
    from harness.bench import load as bench_load

    bench_load.print_load(bench_load.bench_load())


def cmd_bench_health(args) -> None:
    from harness.bench import health as bench_health
    from harness.core.errors import HarnessError

    if args.detect_again:
        if args.sizes is not None or args.window is not None or args.cost_only:
            raise HarnessError(
                "--detect-again measures at the saved run's middle size and "
                "takes only --repeats; drop --sizes, --window and --cost-only."
            )
        bench_health.print_health(
            bench_health.detect_again(
                **({"repeats": args.repeats} if args.repeats is not None else {})
            )
        )
        return
    options = {
        key: value
        for key, value in (
            ("sizes", args.sizes),
            ("repeats", args.repeats),
            ("window_s", args.window),
        )
        if value is not None
    }
    bench_health.print_health(bench_health.bench_health(**options, cost_only=args.cost_only))


def cmd_bench_membership(args) -> None:
    from harness.bench import membership as bench_membership

    result = bench_membership.bench_membership(
        args.rounds, args.sizes, tuple(args.parts or bench_membership.PARTS)
    )
    bench_membership.print_membership(result)


def cmd_bench_keepalive(args) -> None:
    from harness.bench import keepalive as bench_keepalive

    bench_keepalive.print_keepalive(bench_keepalive.bench_keepalive())


def cmd_bench_controller_loop(args) -> None:
    from harness.bench import controller_loop
    from harness.core.errors import HarnessError

    if args.repeats < 1:
        raise HarnessError(f"--repeats must be at least 1, not {args.repeats}.")
    if args.spread_ms is not None:
        controller_loop.print_slot_spread(
            controller_loop.measure_slot_spread(args.spread_ms, rounds=args.repeats)
        )
        return
    controller_loop.print_controller_loop(
        controller_loop.bench_controller_loop(args.sizes, args.repeats)
    )


def cmd_bench_stop(args) -> None:
    from harness.bench import stop as bench_stop

    bench_stop.print_stop(bench_stop.bench_stop())


def cmd_up(args) -> None:
    from harness.cluster import appconfigs, engine, images
    from harness.cluster.cluster import METRICS_PORT, Cluster, ClusterConfig

    leftovers = engine.labelled_containers(args.name)
    if leftovers and sys.stdin.isatty():
        names = ", ".join(sorted(c.name for c in leftovers))
        answer = input(
            f"a cluster named {args.name!r} is already there ({names}). "
            f"Remove it and start a new one? [y/N] "
        )
        if answer.strip().lower() in ("y", "yes"):
            engine.remove_labelled(args.name)
    if args.cluster_file and not os.access(Path(args.cluster_file).resolve().parent, os.W_OK):
        from harness.core.errors import HarnessError

        raise HarnessError(
            f"cannot write the cluster file {args.cluster_file}: its folder is not writable"
        )
    tag = images.ensure_node_image(images.ImageSpec.parse(args.image))
    # Detached: the cluster outlives this process, so the reaper leaves it alone.
    cluster = Cluster(
        ClusterConfig(
            image=tag,
            name=args.name,
            workers=args.workers,
            lb_port=args.port or None,
            detached=True,
            # What `run --cluster` needs of a cluster: its dashboard, the "w"
            # resource on workers, and metrics to read.
            dashboard=bool(args.cluster_file),
            worker_resources={"w": 10} if args.cluster_file else {},
            metrics_port=METRICS_PORT if args.cluster_file else None,
        )
    )
    try:
        cluster.up()
        if not args.no_app:
            # One replica per node, so that every node runs a Serve proxy.
            nodes = args.workers + 1
            cluster.deploy(appconfigs.deploy_config(appconfigs.echo_app(num_replicas=nodes)))
            cluster.wait_lb_ready()
    except BaseException:
        from harness.core import log

        log.get(__name__).warning("cluster: start-up did not finish; removing what was created")
        cluster.down()
        raise
    print(
        f"cluster {args.name!r} is up: {cluster.url}  "
        f"(`python -m harness down --name {args.name}` removes it)"
    )
    if args.cluster_file:
        Path(args.cluster_file).write_text(cluster.cluster_file_text())
        print(
            f"its cluster file: {args.cluster_file} "
            f"(`python -m harness run spot_preemption --cluster {args.cluster_file}`)"
        )


def cmd_down(args) -> None:
    from harness.cluster import engine, runs

    started = time.monotonic()
    if args.all or args.name:
        containers, networks = engine.remove_labelled(None if args.all else args.name)
        whose = ""
    else:
        containers, networks = runs.reap()
        whose = " left by runs whose process is gone"
    print(
        f"removed {containers} containers and {networks} networks{whose} "
        f"in {time.monotonic() - started:.1f}s"
    )


def cmd_status(args) -> None:
    from harness.cluster import engine, runs

    containers = engine.labelled_containers(None if args.all else args.name)
    if not containers:
        print("no harness containers are running")
        return
    for c in sorted(containers, key=lambda c: c.name):
        print(
            f"{c.name:40} {c.status:10} {c.labels.get(engine.ROLE_LABEL, ''):7} "
            f"{runs.owner_summary(c.labels):14} {c.image}  {c.published}"
        )


def cmd_soak(args) -> None:
    from harness.bench import soak
    from harness.cluster import clusterfile
    from harness.core.errors import VerdictFailed

    if args.find_rate or args.volume:
        cmd_volume(args)
        return
    cluster_file = clusterfile.load(Path(args.cluster)) if args.cluster else None
    results = soak.soak(
        args.runs, args.minutes, args.interval, parallel=args.parallel, cluster_file=cluster_file
    )
    soak.print_soak(results)
    # The ladder is the claim; Ray's defaults are the comparison, reported only.
    failed = [v.label for v in results[soak.LADDER_CONFIG] if not v.passed]
    if failed:
        raise VerdictFailed(
            f"soak: {', '.join(failed)} failed the spot-notice acceptance threshold (0.01%)"
        )


def cmd_volume(args) -> None:
    from harness.bench import volume
    from harness.core.errors import HarnessError, VerdictFailed

    if args.find_rate and args.volume:
        raise HarnessError("soak: --find-rate and --volume are separate runs; give one")
    if args.cluster:
        raise HarnessError(
            "soak --volume and --find-rate run on the harness's own clusters; --cluster "
            "is for the spot-notice soak"
        )
    if args.find_rate:
        print(f"sustained rate: {volume.find_rate():g}/s")
        return
    if args.rate is None:
        raise HarnessError(
            "soak --volume needs --rate: the highest rate this host sustains, which "
            "`python -m harness soak --find-rate` measures"
        )
    if args.rate <= 0 or args.requests <= 0:
        raise HarnessError(
            f"soak --volume needs a positive --rate and --requests (got {args.rate:g} "
            f"and {args.requests:,})"
        )
    results = volume.volume_soak(args.rate, args.requests, args.interval)
    volume.print_volume(results, args.rate)
    # The patched configurations are the claim; stock is the comparison.
    flavors = {c.label: c.flavor for c in volume.CONFIGS}
    failed = [
        label for label, r in results.items() if flavors[label] != "stock" and not r.verdict.passed
    ]
    if failed:
        raise VerdictFailed(
            f"volume soak: {', '.join(failed)} failed the spot-notice acceptance threshold (0.01%)"
        )


def cmd_ladder(args) -> None:
    from harness.core.errors import VerdictFailed, VerdictUnknown
    from harness.ladder.description import check_file

    result = check_file(Path(args.file))
    print(result.render())
    # The report above names the orderings and their arithmetic; these say what to do.
    if result.exit_code == 1:
        raise VerdictFailed(
            f"ladder check: {args.file}: the ladder fails (the `failing:` "
            f"orderings above); change the values their rows name and "
            f"check again"
        )
    if result.exit_code == 3:
        raise VerdictUnknown(
            f"ladder check: {args.file}: no ordering fails, but the "
            f"`unknown` ones above need values the file does not give; "
            f"add them to get a verdict"
        )


def cmd_upstream(args) -> None:
    """The series as upstream pull requests: branches, descriptions, and a
    check against another Ray release."""
    from harness.core import wheels
    from harness.core.errors import HarnessError, VerdictFailed
    from harness.core.pin import load_pin, read_series
    from harness.patches.patch_files import SERVE
    from harness.upstream import branches, prbody, rebase, testenv

    pin = load_pin()
    if args.action == "body":
        from harness.core.paths import RESULTS_DIR

        print(prbody.pr_body(args.patch, read_series(), RESULTS_DIR), end="")
        return
    if args.action == "rebase-check":
        # Checked before any download: a release PIN does not know is bad input.
        try:
            release = pin.release(args.version)
        except HarnessError as exc:
            raise HarnessError(
                f"{exc} Every wheel is checked against the sha256 that "
                f"patches/PIN records, so only those releases can be "
                f"checked."
            ) from exc
    if args.action == "tests":
        from harness.upstream import ray_tests

        # The files are checked before anything is downloaded or built.
        manifest = ray_tests.load_manifest()
        if args.fetch_from:
            ray_tests.fetch_from_checkout(manifest.files, Path(args.fetch_from))
            print(f"fetched {len(manifest.files)} files into {ray_tests.FILES_DIR}")
        ray_tests.check_files(manifest.files)
    pinned_house = wheels.ensure_wheelhouse(pin.ray)
    pinned_wheel = wheels.verify_ray_wheel(pinned_house, pin.ray)
    # Each action below gets the result of its own kind.
    result: branches.BranchesResult | rebase.RebaseResult
    if args.action == "standin":
        # Resolved, so the path printed for RAY_SRC works from wherever make runs.
        dest = branches.build_standin(
            pinned_wheel, Path(args.dest).resolve() if args.dest else branches.STANDIN_DIR
        )
        print(
            f"stand-in ready: {dest} (its {SERVE} is {pinned_wheel.name}'s); "
            f"`make pr-branches RAY_SRC={dest}` and `make apply-patches RAY_SRC={dest}` "
            f"accept it as a checkout at the pin"
        )
    elif args.action == "branches":
        env = testenv.ensure_test_env(pin.ray, pinned_house)
        result = branches.pr_branches(
            Path(args.ray_src), read_series(), pin.ray, pinned_wheel, env, force=args.force
        )
        print(result.format())
        if result.failed:
            raise VerdictFailed(
                f"tests failed on {', '.join(r.name for r in result.failed)} "
                f"(see above); the branches were created. Fix the patch in "
                f"the workspace, export it, and run again with --force."
            )
    elif args.action == "tests":
        env = testenv.ensure_test_env(pin.ray, pinned_house, manifest.requirements)
        tests_report = ray_tests.run_ray_tests(env, pinned_wheel, read_series(), manifest)
        print(tests_report.format())
        if not tests_report.ok:
            raise VerdictFailed(
                "upstream tests: a test of Ray's that passes on stock does not pass "
                "on the patched tree (listed above). Fix the patch in the workspace "
                "(make workspace), export it (make export-patches) and run again."
            )
    elif args.action == "stacks":
        from harness.upstream import ray_tests, stacks

        # With the requirements Serve's own tests import (httpx, which
        # `ray.serve._private.test_utils` needs), so no patch test skips here.
        requirements = ray_tests.load_manifest().requirements
        env = testenv.ensure_test_env(pin.ray, pinned_house, requirements)
        stacks_report = stacks.check_stacks(pinned_wheel, read_series(), env)
        print(stacks_report.format())
        if not stacks_report.ok:
            raise VerdictFailed(
                "stacks: a patch does not apply to the pin with only what its message "
                "says it is stacked on, or its own tests fail there (listed above). "
                'Fix the patch or its "Stacked on" paragraph in the workspace, export '
                "it and run again. It ran in a temporary repo; nothing was changed."
            )
    elif args.action == "lint":
        from harness.upstream import lint

        report = lint.lint_series(pinned_wheel, read_series())
        print(report.format())
        if not report.ok:
            raise VerdictFailed(
                "upstream lint: the series does not pass Ray's lint (the findings "
                "are above). Fix them in the workspace (make workspace), export "
                "(make export-patches) and run again. Nothing was changed."
            )
    elif args.action == "rebase-check":
        house = wheels.ensure_wheelhouse(release)
        wheel = wheels.verify_ray_wheel(house, release)
        env = testenv.ensure_test_env(release, house)
        result = rebase.rebase_check(wheel, release.version, pinned_wheel, read_series(), env)
        print(result.format())
        if not result.ok:
            raise VerdictFailed(
                f"rebase-check: a patch does not apply to, or fails its "
                f"tests on, Ray {release.version}; the rows above name it and "
                f"where. It ran in a temporary repo; nothing was changed."
            )


EXIT_CODES = """\
exit codes (every verb):
  0    pass: the command did what it says, and its verdict, if it gives one, is pass
  1    the verdict failed: a scenario's checks or expectation, the soak's threshold,
       a ladder ordering, a patch that does not apply or whose tests fail
       (rebase-check, upstream branches)
  2    bad usage or input, or a precondition not met (no venv, no Docker daemon):
       nothing was judged; the message says what to fix
  3    unknown: no verdict. `ladder check` when no ordering fails but some need
       values the file does not give; any verb when the harness itself fails
       unexpectedly (a bug: the traceback is printed)
  130  interrupted (Ctrl-C or SIGTERM); what was being created has been removed
Through make, 0 stays 0 but every failure is make's own 2 (GNU make exits 2
whenever a recipe fails); the make targets print the harness's code, and a
script that needs it runs .venv/bin/python -m harness VERB instead.
"""


def build_parser() -> argparse.ArgumentParser:
    # Raw, so the exit-code table keeps its lines; __doc__ is wrapped by hand.
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description=__doc__,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    volume = parser.add_mutually_exclusive_group()
    volume.add_argument(
        "-v",
        "--verbose",
        action="store_const",
        const=1,
        dest="verbosity",
        default=0,
        help="also log every command run and every poll (DEBUG)",
    )
    volume.add_argument(
        "-q",
        "--quiet",
        action="store_const",
        const=-1,
        dest="verbosity",
        help="no progress lines: warnings, errors and the verb's own output only",
    )
    sub = parser.add_subparsers(dest="verb", required=True)

    p = sub.add_parser("wheelhouse", help="download the wheels of a Ray release once")
    p.add_argument("versions", nargs="*", help="default: the pinned version")
    p.set_defaults(func=cmd_wheelhouse)

    p = sub.add_parser("setup", help="create .venv: the project's requirements, the pinned Ray")
    p.add_argument(
        "--without-ray",
        action="store_true",
        help="only the project's requirements (docker-py among them): enough to build "
        "the node images while Ray's wheels download; run setup again to add Ray",
    )
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("patches", help="apply, revert, inspect or edit the patch series")
    p.add_argument("action", choices=["apply", "revert", "status", "workspace", "export"])
    p.add_argument("--site-packages", help="default: the project's .venv")
    p.add_argument("--force", action="store_true", help="revert even over hand edits")
    p.add_argument(
        "--check",
        action="store_true",
        help="export: write nothing; exit 1 naming the files if patches/ differs from "
        "what the export would write, 0 if not",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="export --check: export a workspace built in a temporary folder from the "
        "pinned wheel and the series, not build/ray-src (a clean clone, CI)",
    )
    p.set_defaults(func=cmd_patches)

    p = sub.add_parser("images", help="build the node images (only what changed)")
    p.add_argument("specs", nargs="*", help="e.g. 2.60.0-patched; default: all three")
    p.set_defaults(func=cmd_images)

    p = sub.add_parser("run", help="run a scenario on images side by side")
    # The list is built when help is asked for, not with every parser.
    setattr(p, "format_help", functools.partial(_run_help, p.format_help))  # noqa: B010
    p.add_argument("scenario", help="one of the scenarios below")
    p.add_argument(
        "--parallel",
        type=at_least_one,
        default=1,
        help="run this many of its runs at once, each on its own cluster (default: 1, one "
        "after the other, each with the host to itself)",
    )
    p.add_argument(
        "--image",
        action="append",
        default=[],
        help="repeat; the last is the one under test (default: the scenario's own; "
        "most run the pinned Ray stock, then patched)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=None,
        help="scale the timeout ladder (spot_preemption): 1 is the spot-notice "
        "ladder's own times (the default), 0.5 halves every one of them",
    )
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="run once on a Ray cluster the harness did not start, described by FILE "
        "(its dashboard, its ingress, and commands that act on a node; see README.md, "
        "'Your own cluster'). Its Serve apps are replaced by the scenario's",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "scenarios",
        help="list the scenarios: what each exercises and the images it compares by default",
    )
    p.add_argument(
        "--env",
        metavar="SCENARIO",
        help="print instead the environment SCENARIO starts every node of its clusters with "
        "(patched, its flags on): what your own cluster's nodes need for `run --cluster`",
    )
    p.set_defaults(func=cmd_scenarios)

    p = sub.add_parser(
        "analyze",
        help="judge a saved run again from its histories, with no cluster",
        description="Rebuild the scenario a results directory (or one history file) was "
        "recorded by, judge its histories again, and write the report to "
        "PATH/analysis/ (or --out). Exit 0 if the outcome is what the scenario "
        "claims, 1 if not, 2 if PATH is not a saved run.",
    )
    p.add_argument(
        "path",
        help="a history-*.jsonl file or a results directory, e.g. build/results/spot_preemption",
    )
    p.add_argument("--out", help="where to write the report (default: PATH/analysis)")
    p.add_argument(
        "--merge",
        action="store_true",
        help="judge the histories as one record (the load of several hosts, `load`)",
    )
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser(
        "load",
        help="send the open loop from this host to an ingress and save its history",
        description="Load from this host's cores (one process each with --processes), "
        "as one of several hosts: start each with the same --start, collect the "
        "histories in one folder, and judge them as one record with `analyze --merge`.",
    )
    p.add_argument("--ingress", required=True, help="http://HOST[:PORT] of the load balancer")
    p.add_argument("--rate", type=float, required=True, help="requests/s from this host")
    p.add_argument("--seconds", type=float, required=True, help="how long to schedule")
    p.add_argument("--processes", type=at_least_one, default=os.cpu_count() or 1)
    p.add_argument("--connections", type=at_least_one, default=64)
    p.add_argument("--path", default="/", help="the path every request asks for")
    p.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    p.add_argument(
        "--start", type=float, help="when the first request is due (epoch seconds; default: now)"
    )
    p.add_argument("--out", default=".", help="the folder the history goes to")
    p.add_argument("--name", help="this load's name in the record (default: 'load from HOSTNAME')")
    p.set_defaults(func=cmd_load)

    p = sub.add_parser("bench", help="benchmarks, printed side by side as ratios")
    benches = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    b = benches.add_parser("load", help="generator capacity vs the cluster's rate")
    b.set_defaults(func=cmd_bench_load)
    b = benches.add_parser(
        "health", help="controller cost of health checks, pull vs push, at several sizes"
    )
    b.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        help="replica counts per app, comma-separated (default 16,32,48)",
    )
    b.add_argument(
        "--repeats", type=int, default=None, help="runs of every mode per size (default 3)"
    )
    b.add_argument(
        "--window", type=float, default=None, help="seconds measured per run (default 30)"
    )
    b.add_argument(
        "--cost-only",
        action="store_true",
        help="measure only the controller's cost per size (no stock cross-check, ingest or "
        "detection)",
    )
    b.add_argument(
        "--detect-again",
        action="store_true",
        help="measure only the times to detect again (--repeats samples), into the finished "
        "run saved in build/results/bench-health.json",
    )
    b.set_defaults(func=cmd_bench_health)
    b = benches.add_parser(
        "membership", help="what a replica change costs HAProxy, stock vs runtime servers"
    )
    b.add_argument(
        "--rounds", type=int, default=20, help="replicas added and removed per configuration"
    )
    b.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        help="servers in the backend, comma-separated (default 16,64,256)",
    )
    b.add_argument(
        "--part",
        dest="parts",
        choices=("controller", "sizes"),
        action="append",
        default=None,
        help="run only this part (repeatable; default both)",
    )
    b.set_defaults(func=cmd_bench_membership)
    b = benches.add_parser(
        "keepalive", help="what closing after streamed responses costs keep-alive clients"
    )
    b.set_defaults(func=cmd_bench_keepalive)
    b = benches.add_parser(
        "controller-loop",
        help="the controller's deployment-state update at fleet size, pull vs push "
        "(Ray's calls faked, their measured cost added)",
    )
    b.add_argument(
        "--sizes",
        type=_sizes,
        default=(1000, 4000, 8000),
        help="replicas, comma-separated (default 1000,4000,8000)",
    )
    b.add_argument("--repeats", type=int, default=3, help="runs of every mode per size")
    b.add_argument(
        "--spread-ms",
        type=_spreads_ms,
        default=None,
        help="instead of the loop: Ray's receive cost per batch when a send-grid slot's "
        "batches are spread over each of these many ms (comma-separated, the first the "
        "baseline, e.g. 0,1,5,20,100,1000); --repeats rounds; --sizes does not apply",
    )
    b.set_defaults(func=cmd_bench_controller_loop)
    b = benches.add_parser("stop", help="how long an idle ingress replica takes to stop")
    b.set_defaults(func=cmd_bench_stop)

    p = sub.add_parser(
        "soak",
        help="spot preemptions under sustained load, spot-notice "
        "ladder vs Ray's defaults, as the spot-notice "
        "acceptance table",
    )
    p.add_argument("--runs", type=int, default=3, help="runs per configuration")
    p.add_argument("--minutes", type=float, default=10.0, help="length of each run")
    p.add_argument(
        "--interval",
        type=float,
        default=180.0,
        help="seconds between spot notices (each notice lasts 120 s)",
    )
    p.add_argument(
        "--parallel",
        type=at_least_one,
        default=2,
        help="run this many at once, each on its own cluster (default: 2, each run number's "
        "two configurations side by side; 1: one after the other)",
    )
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="the spot-notice ladder's runs, one after the other, on a Ray cluster the "
        "harness did not start (README.md, 'Your own cluster'); FILE must give the "
        "terminate and add commands",
    )
    p.add_argument(
        "--volume",
        action="store_true",
        help="the volume soak: --requests per configuration (stock, patched at its defaults, "
        "patched with push health, runtime servers and master-worker) at --rate, one "
        "after the other",
    )
    p.add_argument("--rate", type=float, default=None, help="--volume: requests per second")
    p.add_argument(
        "--requests", type=int, default=1_000_000, help="--volume: requests per configuration"
    )
    p.add_argument(
        "--find-rate",
        action="store_true",
        help="measure the highest rate this host sustains through the front LB, for --rate",
    )
    p.set_defaults(func=cmd_soak)

    p = sub.add_parser("ladder", help="check a service's timeout ladder (orderings A-J)")
    ladder = p.add_subparsers(dest="action", required=True)
    c = ladder.add_parser(
        "check",
        help="check the ladder of a YAML service description",
        description="Check every ordering A-J of the timeout ladder (how Serve's, HAProxy's, "
        "the load balancer's and the clients' timeouts must nest inside the spot "
        "notice so a node retires without cutting a request) on a YAML service "
        "description; examples/ladder/ has three. Exit 0: every "
        "ordering holds; 1: one fails; 2: the file is wrong; 3: none fails but "
        "some need values the file does not give.",
    )
    c.add_argument("file", help="e.g. examples/ladder/spot-notice-ladder.yaml")
    p.set_defaults(func=cmd_ladder)

    p = sub.add_parser(
        "upstream",
        help="the series as upstream PRs: branches, descriptions, "
        "and a check against another Ray release",
    )
    upstream = p.add_subparsers(dest="action", required=True)
    c = upstream.add_parser(
        "branches",
        help="one branch per patch, on what it is stacked on, on a Ray checkout at the pin, tested",
        description="On a clean Ray checkout at the pinned commit (or a stand-in whose "
        "python/ray/serve is the pinned wheel's), create one branch per patch, "
        "each the pin plus the patches its message says it is stacked on plus that "
        "patch (git am), and run each branch's "
        "tests. Creates all branches or none.",
    )
    c.add_argument("ray_src", help="the Ray checkout")
    c.add_argument("--force", action="store_true", help="move branches that already exist")
    c = upstream.add_parser("body", help="a patch's PR description with the latest results")
    c.add_argument("patch", help="its number, e.g. 0001")
    c = upstream.add_parser(
        "rebase-check",
        help="does each patch apply to, and pass on, another Ray release",
        description="Apply the series, patch by patch, to another release's ray/serve (from "
        "its wheel) and run each patch's tests against that release. Exit 1 if "
        "a patch does not apply or a test fails.",
    )
    c.add_argument("version", help="a release patches/PIN knows, e.g. 2.59.0")
    upstream.add_parser(
        "stacks",
        help="each patch on the pin with only what its message says it is stacked on: "
        "applies, and its own tests pass",
        description="Apply each patch of the series to the pinned wheel's serve tree with "
        'only the patches its "Stacked on" paragraph names under it (and theirs), '
        "strictly (no fuzz, no 3-way), and run its own test files there. Prints which "
        "patches apply to the pin alone. Exit 1 if one does not apply on its stack or "
        "its tests fail.",
    )
    upstream.add_parser(
        "lint",
        help="Ray's own lint (ruff, black, pydoclint, docstyle, the pytest trailer) over "
        "every file the series adds or changes",
        description="Apply the series to the pinned wheel's serve tree in a temporary "
        "workspace and lint what it adds or changes as Ray's CI would: ruff and black at "
        "Ray's pins and settings, pydoclint (only violations the pinned file does not "
        "already have count), Ray's docstyle rule and the pytest trailer. Exit 1 on any "
        "finding.",
    )
    c = upstream.add_parser(
        "tests",
        help="Ray's own unit tests of the files the series changes, stock vs patched "
        "with the series' flags off and on",
        description="Run Ray's own test files (harness/upstream/ray-tests.toml names "
        "each, with its upstream commit and sha256; they live untracked in "
        "build/upstream-tests/) on the pinned wheel's serve tree, then on it with the "
        "series applied, with every boolean setting the series adds off, then on. "
        "Exit 1 if a test that passes on stock does not pass patched; exit 2 if the "
        "files are missing (the message says how to get them).",
    )
    c.add_argument(
        "--fetch-from",
        metavar="RAY_CLONE",
        help="first copy the files from a clone of Ray's repository (each at its "
        "commit, sha256-checked)",
    )
    c = upstream.add_parser(
        "standin",
        help="a git repo standing in for a Ray checkout at the pin, built from the pinned wheel",
    )
    c.add_argument("dest", nargs="?", help="where (default: build/ray-standin)")
    p.set_defaults(func=cmd_upstream)

    for verb, func, text in (
        ("up", cmd_up, "start a cluster and deploy the echo app"),
        ("down", cmd_down, "remove what runs that are gone left, a cluster, or --all"),
        ("status", cmd_status, "list the harness's containers"),
    ):
        p = sub.add_parser(verb, help=text)
        if verb == "down":
            p.add_argument(
                "--name",
                help="remove this cluster, every run of it (default: only the containers "
                "and networks of runs whose process is gone, on this host)",
            )
        else:
            p.add_argument("--name", default="rayspot", help="cluster name (default: rayspot)")
        p.set_defaults(func=func)
        if verb == "up":
            p.add_argument("--image", default="2.60.0-patched")
            p.add_argument(
                "--workers",
                type=worker_count,
                default=2,
                help="worker nodes beside the head (default: 2); the echo app gets "
                "one replica on each node",
            )
            p.add_argument(
                "--port", type=int, default=18000, help="front LB port on 127.0.0.1 (0: a free one)"
            )
            p.add_argument("--no-app", action="store_true", help="do not deploy the echo app")
            p.add_argument(
                "--cluster-file",
                metavar="FILE",
                help="also run Ray's dashboard on the head's address and write FILE, a "
                "cluster file that reaches this cluster as `run --cluster` reaches your own",
            )
        else:
            p.add_argument("--all", action="store_true", help="every harness cluster")
    return parser


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The exit code, by EXIT_CODES: each HarnessError carries its own."""
    import traceback

    from harness.core import log
    from harness.core.errors import HarnessError

    args = build_parser().parse_args(argv)
    log.set_verbosity(args.verbosity)
    # A SIGTERM (CI timeout, `kill`) unwinds like Ctrl-C, so cleanup code runs.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # `kill -USR1 PID` prints every thread's stack to stderr and carries on:
    # what a run that seems stuck is waiting for. (The process's own stderr:
    # under pytest's capture, sys.stderr has no file descriptor.)
    if sys.__stderr__ is not None:
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    try:
        args.func(args)
    except HarnessError as exc:
        print(f"{exc.label}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "interrupted: what was being created has been removed; "
            "`python -m harness status` shows anything left.",
            file=sys.stderr,
        )
        return 130
    except Exception:
        # A bug, not a verdict: Python's own exit 1 would read as "failed".
        traceback.print_exc()
        print(
            f"error: `python -m harness {args.verb}` failed unexpectedly (the traceback "
            f"above is a bug in the harness), so there is no verdict: exit 3. Nothing "
            f"was judged; report the traceback.",
            file=sys.stderr,
        )
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
