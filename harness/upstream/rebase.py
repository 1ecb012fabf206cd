"""`rebase-check`: whether the series still applies to, and passes on, another
Ray release. Each patch is applied, on top of the ones before it, to the
ray/serve tree of that release's wheel in a temporary repo (clean, with fuzz,
3-way, or not at all, naming the hunks), and the tests of the patches so far
run against that release's test venv.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.core import log
from harness.core.git import git_output, run_git
from harness.core.proc import output_tail
from harness.patches.patch_files import SERVE
from harness.patches.workspace import extract_from_wheel, wheel_repo
from harness.upstream.branches import patch_number
from harness.upstream.testenv import PatchTests, TestEnv, run_patch_tests

_log = log.get(__name__)


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
            run = r.tests.run if r.tests is not None else None
            if run is not None and not run.ok:
                lines.append(
                    f"\ntests after {r.patch} (pytest exit {run.exit_code}):\n{run.output}"
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
            # A header without a start line is malformed; git refuses the patch anyway.
            hunk = re.match(r"@@ -(\d+)", line)
            if hunk:
                starts.setdefault(current, []).append(int(hunk.group(1)))
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
    args: list[str | Path] = ["apply", "--index", patch.resolve()]
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
        repo = wheel_repo(pinned_wheel, scratch / "repo")
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
                log.progress(_log, f"rebase-check: {patch.name}: does not apply", started)
                continue
            git_output(["commit", "--quiet", "--no-verify", "-m", patch.name], repo, identity=True)
            if env is None:
                row.not_run = "no test environment"
            else:
                row.tests = run_patch_tests(env, patches, i, repo / "python", scratch)
            log.progress(
                _log, f"rebase-check: {patch.name}: {applies}; tests {row.tests_text}", started
            )
    return RebaseResult(version, target_wheel.name, rows, notes, time.monotonic() - started)
