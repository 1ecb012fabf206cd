"""`upstream stacks` (run by `make check-patches`): each pull request of the
series stands where its message says it does. Applied to the pinned tree with
only the patches its "Stacked on" paragraph names (and what those are stacked
on; `branches.series_stacks`), it applies as written and its own tests pass. A
patch that names no stack must apply to the pin alone.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness.core import log
from harness.core.errors import listing
from harness.core.git import git_output, run_git
from harness.core.proc import output_tail
from harness.patches.workspace import wheel_repo
from harness.upstream.branches import patch_number, series_stacks
from harness.upstream.testenv import TestCounts, TestEnv, patch_tests, run_tests

_log = log.get(__name__)


@dataclass
class StackRow:
    patch: str
    stacked_on: list[str]  # patch numbers
    alone: bool  # applies to the pin with nothing under it
    applies: bool  # applies to the pin with its stack under it
    where: str = ""  # why it does not apply
    tests: TestCounts | None = None  # its own tests, on the pin with its stack
    tests_ok: bool = True
    output: str = ""  # pytest's output when a test failed

    @property
    def ok(self) -> bool:
        return self.applies and self.tests_ok


@dataclass
class StacksResult:
    rows: list[StackRow]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def format(self) -> str:
        # The widest stack and two spaces, so a long stack never runs into the next column.
        width = max([len("stacked on"), *(len(", ".join(r.stacked_on)) for r in self.rows)]) + 2
        lines = [
            "stacks: each patch on the pinned tree with only what its message says "
            "it is stacked on, and its own tests there",
            "",
            f"{'patch':<7}{'stacked on':<{width}}{'alone':<7}{'applies':<9}own tests",
        ]
        for row in self.rows:
            tests = "none" if row.tests is None else str(row.tests)
            lines.append(
                f"{row.patch:<7}{', '.join(row.stacked_on) or '-':<{width}}"
                f"{'yes' if row.alone else 'no':<7}{'yes' if row.applies else 'NO':<9}"
                f"{tests}{'' if row.tests_ok else '  FAILED'}"
            )
        for row in self.rows:
            if row.where:
                lines.append(f"{row.patch} does not apply: {row.where}")
            if not row.tests_ok:
                lines += [f"{row.patch}'s tests failed:", row.output]
        alone = sum(r.alone for r in self.rows)
        lines += ["", f"{alone} of {len(self.rows)} apply alone; {self.seconds:.0f} s"]
        return "\n".join(lines)


def _apply(repo: Path, patch: Path, check: bool = False) -> tuple[bool, str]:
    args: list[str | Path] = ["apply", "--check" if check else "--index", patch.resolve()]
    result = run_git(args, repo)
    return result.returncode == 0, "" if result.returncode == 0 else output_tail(result, 400)


def check_stacks(wheel: Path, patches: list[Path], env: TestEnv | None) -> StacksResult:
    """Apply each patch to the ray/serve tree of `wheel` with its stack under
    it, strictly (no fuzz, no 3-way), and run its own tests there (none when
    `env` is None). Works in a temporary repo; leaves nothing behind."""
    started = time.monotonic()
    stacks = series_stacks(patches)
    rows: list[StackRow] = []
    with tempfile.TemporaryDirectory(prefix="ray-stacks-") as tmp:
        scratch = Path(tmp)
        repo = wheel_repo(wheel, scratch / "repo")
        for patch, stack in zip(patches, stacks, strict=True):
            row = StackRow(patch_number(patch), [patch_number(p) for p in stack], False, False)
            rows.append(row)
            row.alone = _apply(repo, patch, check=True)[0]
            for below in [*stack, patch]:
                applied, why = _apply(repo, below)
                if not applied:
                    row.where = f"{below.name}: {why}"
                    break
            else:
                row.applies = True
                own = patch_tests(patch)
                if own and env is not None:
                    run = run_tests(env, repo / "python" / "ray" / "serve", own, scratch)
                    row.tests, row.tests_ok = run.counts(own), run.ok
                    row.output = "" if run.ok else run.output
            git_output(["reset", "--quiet", "--hard", "HEAD"], repo)
            git_output(["clean", "-fdxq"], repo)
            log.progress(
                _log,
                f"stacks: {patch.name}: on {listing(row.stacked_on) or 'the pin alone'}, "
                f"{'applies' if row.applies else 'does not apply'}; tests "
                f"{row.tests if row.tests is not None else 'none'}",
                started,
            )
    return StacksResult(rows, time.monotonic() - started)
