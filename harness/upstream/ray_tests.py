"""Ray's own unit tests of the modules the series changes, run on the stock
tree and on the patched tree with the series' flags off and then on. A test
that passes on stock and does not pass patched is a regression: upstream does
not review a PR whose repository's own tests fail.

The project carries no Ray code, and the wheel ships no tests. The test files
live untracked under `build/upstream-tests/` (their paths inside Ray's
repository), fetched by the contributor; `ray-tests.toml` beside this module
names each one's source commit and sha256, so the set is the same everywhere.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.core import log
from harness.core.errors import HarnessError
from harness.core.git import git_output, run_git
from harness.core.paths import BUILD_DIR
from harness.core.wheels import sha256_file
from harness.patches.workspace import BASE_TAG, SOURCE_ROOT, build_workspace
from harness.upstream.testenv import TestEnv, TestRun, run_tests

_log = log.get(__name__)

MANIFEST = Path(__file__).with_name("ray-tests.toml")
FILES_DIR = BUILD_DIR / "upstream-tests"
UPSTREAM = "https://github.com/ray-project/ray"


@dataclass(frozen=True)
class UpstreamFile:
    """One file of Ray's repository the run needs: a test file, or a helper
    (a conftest, a fake) that the test files import."""

    path: str  # inside Ray's repository: python/ray/serve/tests/unit/test_x.py
    commit: str
    sha256: str
    covers: str  # what it tests, or what it is for
    run: bool  # a test file to run, not only a helper

    @property
    def site_path(self) -> str:
        """Its path relative to site-packages (`ray/serve/tests/...`)."""
        return self.path.removeprefix(f"{SOURCE_ROOT}/")

    def raw_url(self) -> str:
        return f"https://raw.githubusercontent.com/ray-project/ray/{self.commit}/{self.path}"


@dataclass(frozen=True)
class Manifest:
    files: list[UpstreamFile]
    # What Ray's tests import beyond the release (pinned), and the pytest
    # plugins they need loaded.
    requirements: list[str]
    plugins: list[str]


def load_manifest(path: Path = MANIFEST) -> Manifest:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise HarnessError(f"cannot read {path}: {exc}") from exc
    files = []
    for entry in data.get("file", []):
        try:
            files.append(
                UpstreamFile(
                    path=entry["path"],
                    commit=entry["commit"],
                    sha256=entry["sha256"],
                    covers=entry["covers"],
                    run=entry.get("run", True),
                )
            )
        except KeyError as exc:
            raise HarnessError(f"{path}: an entry has no {exc}: {entry}") from exc
    for item in files:
        if not item.site_path.startswith("ray/serve/tests/"):
            raise HarnessError(
                f"{path}: {item.path} is not under {SOURCE_ROOT}/ray/serve/tests/; "
                f"only Serve's tests are laid over the serve tree."
            )
    if not any(item.run for item in files):
        raise HarnessError(f"{path} names no test file to run.")
    environment = data.get("environment", {})
    requirements = list(environment.get("requirements", []))
    unpinned = [r for r in requirements if "==" not in r]
    if unpinned:
        raise HarnessError(f"{path}: pin every requirement (name==version): {unpinned}")
    return Manifest(files, requirements, list(environment.get("plugins", [])))


def problems(files: Sequence[UpstreamFile], root: Path = FILES_DIR) -> list[str]:
    """What is missing or different under `root`, one line per file."""
    found = []
    for item in files:
        local = root / item.path
        if not local.is_file():
            found.append(f"{item.path}: missing")
        elif sha256_file(local) != item.sha256:
            found.append(f"{item.path}: sha256 differs from {item.commit[:12]}'s")
    return found


def how_to_fetch(files: Sequence[UpstreamFile], root: Path = FILES_DIR) -> str:
    commits = sorted({item.commit for item in files})
    return (
        f"Ray's test files are fetched once into {root} (untracked). Either from a "
        f"clone of {UPSTREAM} that has commit{'s' if len(commits) > 1 else ''} "
        f"{', '.join(c[:12] for c in commits)}:\n"
        f"  python -m harness upstream tests --fetch-from /path/to/ray\n"
        f"or by hand, each file from its commit to {root}/<its path>, e.g.\n"
        f"  curl -fsSL --create-dirs -o {root}/{files[0].path} \\\n"
        f"    {files[0].raw_url()}\n"
        f"({MANIFEST.name} lists every file, its commit and sha256.)"
    )


def fetch_from_checkout(
    files: Sequence[UpstreamFile], checkout: Path, root: Path = FILES_DIR
) -> None:
    """Write each file as it is at its commit in `checkout` (a clone of Ray's
    repository), after checking every sha256; writes nothing if one differs."""
    if run_git(["rev-parse", "--git-dir"], checkout).returncode != 0:
        raise HarnessError(f"{checkout} is not a git repository: give a clone of {UPSTREAM}.")
    texts: dict[str, bytes] = {}
    for item in files:
        result = run_git(["cat-file", "blob", f"{item.commit}:{item.path}"], checkout)
        if result.returncode != 0:
            raise HarnessError(
                f"{checkout} has no {item.path} at {item.commit[:12]}: "
                f"`git -C {checkout} fetch origin {item.commit}` and run again. "
                f"Nothing was written."
            )
        data = result.stdout.encode()
        if hashlib.sha256(data).hexdigest() != item.sha256:
            raise HarnessError(
                f"{item.path} at {item.commit[:12]} in {checkout} does not have the sha256 "
                f"{MANIFEST.name} records. Nothing was written."
            )
        texts[item.path] = data
    for rel, data in texts.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


# ------------------------------------------------------------ the series' flags

# A boolean setting the series adds: `NAME = get_env_bool("NAME", "0")`, the
# call possibly wrapped over lines.
_BOOL_SETTING = re.compile(r'get_env_bool\(\s*"(RAY_SERVE_[A-Z0-9_]+)",\s*"([01])"\s*\)')


def series_flags(patches: Sequence[Path]) -> dict[str, str]:
    """Every boolean setting the series adds, with its default ("0" or "1")."""
    flags: dict[str, str] = {}
    for patch in patches:
        added = "\n".join(
            line[1:]
            for line in patch.read_text().splitlines()
            if line.startswith("+") and not line.startswith("+++")
        )
        for name, default in _BOOL_SETTING.findall(added):
            flags[name] = default
    return flags


# ------------------------------------------------------------ running


@dataclass(frozen=True)
class Configuration:
    name: str
    patched: bool
    env: Mapping[str, str]


def configurations(flags: Mapping[str, str]) -> list[Configuration]:
    off = {name: "0" for name in flags}
    return [
        # The stock tree knows none of the flags; they are set so that no
        # value from the caller's environment reaches any run.
        Configuration("stock", False, off),
        Configuration("patched, flags off", True, off),
        Configuration("patched, flags on", True, {name: "1" for name in flags}),
    ]


@dataclass
class RayTestsReport:
    files: list[UpstreamFile]
    flags: dict[str, str]
    runs: dict[str, TestRun] = field(default_factory=dict)

    def _passed(self, name: str) -> set[str]:
        return {t for t, outcome in self.runs[name].outcomes.items() if outcome == "passed"}

    def regressions(self) -> dict[str, list[str]]:
        """Per patched configuration: tests that pass on stock and not there."""
        baseline = self._passed("stock")
        return {
            name: sorted(t for t in baseline if run.outcomes.get(t) != "passed")
            for name, run in self.runs.items()
            if name != "stock"
        }

    @property
    def ok(self) -> bool:
        return not any(self.regressions().values())

    def format(self) -> str:
        lines = [
            "Ray's own unit tests, stock vs patched "
            f"(flags: {', '.join(sorted(self.flags)) or 'none'}):",
        ]
        width = max(len(name) for name in self.runs)
        for name, run in self.runs.items():
            lines.append(f"  {name:<{width}}  {run.counts([f.site_path for f in self.files])}")
        lines.append("  by file (stock / flags off / flags on, passed of collected):")
        for item in self.files:
            if not item.run:
                continue
            cells = []
            for run in self.runs.values():
                counts = run.by_file.get(item.site_path)
                cells.append(f"{counts.passed}/{counts.total}" if counts else "not collected")
            lines.append(f"    {item.site_path} ({item.commit[:12]}): {' / '.join(cells)}")
        for name, tests in self.regressions().items():
            if tests:
                lines.append(f"  {len(tests)} regression(s), {name}:")
                run = self.runs[name]
                lines.extend(f"    {t}: {run.outcomes.get(t, 'not run')}" for t in tests)
        if self.ok:
            lines.append("  no regressions: every test that passes on stock passes patched")
        return "\n".join(lines)


def run_ray_tests(
    env: TestEnv,
    wheel: Path,
    patches: list[Path],
    manifest: Manifest,
    root: Path = FILES_DIR,
) -> RayTestsReport:
    """Run the manifest's test files on the wheel's serve tree and on it with
    `patches` applied, flags off and on (`env` has the manifest's
    requirements)."""
    files = manifest.files
    flags = series_flags(patches)
    report = RayTestsReport(list(files), flags)
    tests = [item.site_path for item in files if item.run]
    with tempfile.TemporaryDirectory(prefix="ray-tests-") as tmp:
        scratch = Path(tmp)
        workspace = scratch / "ray-src"
        build_workspace(wheel, patches, workspace)
        stock = scratch / "stock"
        git_output(["worktree", "add", "--detach", "--quiet", str(stock), BASE_TAG], workspace)
        trees = {False: stock / SOURCE_ROOT, True: workspace / SOURCE_ROOT}
        for tree in trees.values():
            for item in files:
                target = tree / item.site_path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / item.path, target)
        for config in configurations(flags):
            started = time.monotonic()
            _log.info("Ray's tests: %s (%d files)", config.name, len(tests))
            run = run_tests(
                env,
                trees[config.patched] / "ray" / "serve",
                tests,
                scratch,
                extra_env=config.env,
                plugins=manifest.plugins,
            )
            report.runs[config.name] = run
            log.progress(_log, f"Ray's tests: {config.name}: {run.counts(tests)}", started)
            if not run.outcomes:
                raise HarnessError(
                    f"Ray's tests ran none on {config.name}; pytest said:\n{run.output}"
                )
    return report


def check_files(files: Sequence[UpstreamFile], root: Path = FILES_DIR) -> None:
    found = problems(files, root)
    if found:
        raise HarnessError(
            "Ray's test files are not all in place:\n  "
            + "\n  ".join(found)
            + f"\n{how_to_fetch(files, root)}"
        )
