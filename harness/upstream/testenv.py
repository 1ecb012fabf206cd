"""The patches' own tests (`python/ray/serve/tests/**/test_*.py` in each
patch: unit tests, and tests that start a local Ray cluster), run against a
Ray release: the test venv of that release, the run
itself, and its JUnit report read back as counts per file.

The test venv is installed offline from the release's wheelhouse plus pytest and
cached under `build/test-venvs/`. The serve tree under test is laid over it
(`harness.patches.overlay`): Ray's compiled core and every dependency are exactly
the release's wheels, `ray.serve` is exactly the tree under test, and nothing
installed is ever written to.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.core import log, proc
from harness.core.errors import HarnessError
from harness.core.paths import BUILD_DIR, ROOT
from harness.core.pin import RayRelease, check_installed
from harness.core.proc import output_tail
from harness.core.venv import ensure_offline_venv, python_in, site_packages
from harness.core.wheels import ensure_requirement_wheelhouse
from harness.patches.overlay import serve_overlay
from harness.patches.patch_files import patch_paths

_log = log.get(__name__)

TEST_VENVS_DIR = BUILD_DIR / "test-venvs"
# A hung test must not hang the command; the whole series' tests take seconds.
_TEST_TIMEOUT_S = 900


def patch_tests(patch: Path) -> list[str]:
    """The test files a patch adds or changes, relative to site-packages
    (`ray/serve/tests/unit/test_x.py`, or `ray/serve/tests/test_x.py` for a
    test that starts a local Ray cluster)."""
    return [
        rel
        for rel in patch_paths(patch)
        if rel.startswith("ray/serve/tests/")
        and PurePosixPath(rel).name.startswith("test_")
        and rel.endswith(".py")
    ]


# ------------------------------------------------------------ test environment


@dataclass(frozen=True)
class TestEnv:
    """An interpreter with pytest and a Ray release's dependencies, and the
    site-packages whose installed `ray` the serve tree under test is laid over."""

    __test__ = False  # not a pytest class, despite the name

    python: Path
    site: Path


def _pytest_requirement() -> str:
    # The project pins its pytest in requirements.txt; the test venvs use the same.
    text = (ROOT / "requirements.txt").read_text()
    match = re.search(r"^\s*(pytest==[^\s#;]+)", text, re.M)
    if not match:
        raise HarnessError(
            "requirements.txt pins no `pytest==...`; the test venvs install "
            "that version. Add the pin and run again."
        )
    return match.group(1)


def _env_of(venv: Path) -> TestEnv:
    return TestEnv(python_in(venv), site_packages(venv, fix="remove it and run again"))


def ensure_test_env(release: RayRelease, house: Path, extra: Sequence[str] = ()) -> TestEnv:
    """The cached test venv of `release`: its wheelhouse installed offline plus
    pytest and the pinned requirements `extra` (what Ray's own tests import
    beyond the release: `httpx==0.28.1`), built once (about 30 s) and never
    modified afterwards. Each set of extras has a venv of its own."""
    requirement = _pytest_requirement()
    requirements = [requirement, *extra]
    stamp = {"ray": release.version, "wheel_sha256": release.sha256, "pytest": requirement}
    name = f"ray-{release.version}"
    if extra:
        stamp["extra"] = " ".join(extra)
        name += "-" + hashlib.sha256(stamp["extra"].encode()).hexdigest()[:8]
    venv = TEST_VENVS_DIR / name
    tools = [ensure_requirement_wheelhouse(r) for r in requirements]
    started = time.monotonic()
    _log.info("test venv: Ray %s and %s in %s", release.version, ", ".join(requirements), venv)
    ensure_offline_venv(
        venv,
        [release.requirement, *requirements],
        [house, *tools],
        stamp,
        verify=lambda built: check_installed(_env_of(built).site, release),
    )
    log.progress(_log, "test venv: ready", started)
    return _env_of(venv)


# ------------------------------------------------------------ running tests


@dataclass
class TestCounts:
    __test__ = False

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped

    def add(self, other: TestCounts) -> TestCounts:
        return TestCounts(
            self.passed + other.passed,
            self.failed + other.failed,
            self.errors + other.errors,
            self.skipped + other.skipped,
        )

    def __str__(self) -> str:
        errors = "error" if self.errors == 1 else "errors"  # as pytest words it
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.passed, "passed"),
                (self.failed, "failed"),
                (self.errors, errors),
                (self.skipped, "skipped"),
            )
            if n
        ]
        return ", ".join(parts) or "none ran"


@dataclass
class TestRun:
    __test__ = False

    by_file: dict[str, TestCounts]
    exit_code: int
    output: str
    # Each test's outcome ("passed", "failed", "error", "skipped") by its id,
    # `file::Class::name[params]`.
    outcomes: dict[str, str] = field(default_factory=dict)

    def counts(self, files: Sequence[str]) -> TestCounts:
        total = TestCounts()
        for rel in files:
            total = total.add(self.by_file.get(rel, TestCounts()))
        return total

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def _junit_results(report: Path) -> tuple[dict[str, TestCounts], dict[str, str]]:
    """Counts per file and each test's outcome, from pytest's JUnit report."""
    by_file: dict[str, TestCounts] = {}
    outcomes: dict[str, str] = {}
    if not report.is_file():
        return by_file, outcomes
    for case in ET.parse(report).iter("testcase"):
        file = case.get("file") or "?"
        counts = by_file.setdefault(file, TestCounts())
        tags = {child.tag for child in case}
        if "error" in tags:
            counts.errors += 1
            outcome = "error"
        elif "failure" in tags:
            counts.failed += 1
            outcome = "failed"
        elif "skipped" in tags:
            counts.skipped += 1
            outcome = "skipped"
        else:
            counts.passed += 1
            outcome = "passed"
        # xunit1 names the class by its dotted module path; the last part
        # that is not the module's is the test class, if any.
        classname = case.get("classname") or ""
        module = file.removesuffix(".py").replace("/", ".")
        inner = classname.removeprefix(module).lstrip(".")
        test_id = "::".join(part for part in (file, inner, case.get("name") or "?") if part)
        # A test that fails in its teardown is reported twice; the worse wins.
        if outcomes.get(test_id) not in ("failed", "error"):
            outcomes[test_id] = outcome
    return by_file, outcomes


def run_tests(
    env: TestEnv,
    serve_tree: Path,
    tests: Sequence[str],
    scratch: Path,
    extra_env: Mapping[str, str] | None = None,
    plugins: Sequence[str] = (),
) -> TestRun:
    """Run `tests` (site-packages-relative paths) with `serve_tree` as `ray.serve`
    over the Ray in `env`, through an overlay (`harness.patches.overlay`), with
    `extra_env` added to the environment and the pytest `plugins` loaded
    (plugins are never loaded on their own: the run must not depend on what
    else the venv has)."""
    with serve_overlay(env.site, serve_tree, scratch) as root:
        # An empty ini of our own: the test run must not pick up this project's
        # pytest settings, or any ini above the scratch folder.
        (root / "pytest.ini").write_text("[pytest]\n")
        report = root / "junit.xml"
        run_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
        run_env.update(
            PYTHONPATH=str(root),
            # No bytecode next to the copied tree or in the venv: a tree edited
            # within the same second could otherwise be run from stale .pyc.
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONNOUSERSITE="1",
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        )
        run_env.update(extra_env or {})
        # --disable-warnings: Ray's own deprecation warnings would bury the failures.
        cmd = [
            str(env.python),
            "-m",
            "pytest",
            "-q",
            "--tb=line",
            "--disable-warnings",
            "-c",
            str(root / "pytest.ini"),
            "--rootdir",
            str(root),
            "-p",
            "no:cacheprovider",
            # The tests' tmp_path inside the scratch folder, which is removed;
            # pytest would otherwise keep the last three under /tmp.
            f"--basetemp={root / 'tmp'}",
            "--continue-on-collection-errors",
            *(arg for plugin in plugins for arg in ("-p", plugin)),
            "-o",
            "junit_family=xunit1",
            f"--junitxml={report}",
            *tests,
        ]
        try:
            result = proc.run(cmd, cwd=root, env=run_env, timeout=_TEST_TIMEOUT_S)
        except proc.TimeoutExpired as exc:
            by_file, outcomes = _junit_results(report)
            return TestRun(
                by_file,
                -1,
                f"pytest did not finish within {_TEST_TIMEOUT_S}s:\n{(exc.output or '')[-3000:]}",
                outcomes,
            )
        # The scratch folder is gone when this is read; its paths only add noise.
        output = output_tail(result, 6000).replace(f"{root}/", "")
        by_file, outcomes = _junit_results(report)
        return TestRun(by_file, result.returncode, output, outcomes)


@dataclass
class PatchTests:
    """The tests run after one patch: its own test files, and those of the
    patches below it (a later patch must not break an earlier one's tests)."""

    __test__ = False

    own: TestCounts
    earlier: TestCounts
    run: TestRun | None  # None: the series has no test files up to this patch

    @property
    def ok(self) -> bool:
        return self.run is None or self.run.ok

    def __str__(self) -> str:
        if self.run is None:
            return "none in the series"
        text = f"own {self.own}"
        return text + (f"; earlier {self.earlier}" if self.earlier != TestCounts() else "")


def run_patch_tests(
    env: TestEnv, patches: Sequence[Path], index: int, tree: Path, scratch: Path
) -> PatchTests:
    """Run the tests of patches[:index + 1] that exist in `tree` (a folder
    holding `ray/serve`, with the patches up to `index` applied)."""
    own = [t for t in patch_tests(patches[index]) if (tree / t).is_file()]
    earlier = list(
        dict.fromkeys(
            t
            for p in patches[:index]
            for t in patch_tests(p)
            if t not in own and (tree / t).is_file()
        )
    )
    if not own + earlier:
        # pytest given no file collects everything under its root: all of Ray.
        return PatchTests(TestCounts(), TestCounts(), None)
    run = run_tests(env, tree / "ray" / "serve", own + earlier, scratch)
    return PatchTests(run.counts(own), run.counts(earlier), run)
