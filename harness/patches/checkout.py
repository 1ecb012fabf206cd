"""The series applied to a real Ray checkout (or a stand-in built from the
pinned wheel) with `git am`, one commit per patch, as upstream will see it;
and how a checkout is recognised as being at the pin.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import HarnessError, listing
from harness.core.git import (
    contributor_identity,
    git_output,
    operation_in_progress,
    run_git,
    uncommitted_paths,
)
from harness.core.pin import RayRelease
from harness.core.proc import output_tail
from harness.patches.patch_files import SERVE, SOURCE_ROOT, failed_patch
from harness.patches.workspace import extract_from_wheel


def checkout_top(ray_src: Path, point_at: str) -> Path:
    """The top of the git checkout `ray_src` is in, with no `git am`, rebase,
    merge or cherry-pick in progress; refuses otherwise. `point_at` says what
    RAY_SRC should name instead."""
    if not ray_src.is_dir():
        raise HarnessError(f"{ray_src} does not exist; set RAY_SRC to a Ray git checkout.")
    top_result = run_git(["rev-parse", "--show-toplevel"], ray_src, isolated=False)
    if top_result.returncode != 0:
        raise HarnessError(
            f"{ray_src} is not a git checkout of Ray. Nothing was changed. Point RAY_SRC at "
            f"{point_at}."
        )
    repo = Path(top_result.stdout.strip())
    busy = operation_in_progress(repo, isolated=False)
    if busy:
        raise HarnessError(
            f"{repo} is in the middle of {busy}. Nothing was changed. Finish or abort it "
            f"first (e.g. `git am --abort`), then run again."
        )
    return repo


def refuse_dirty(repo: Path) -> None:
    dirty = uncommitted_paths(repo, isolated=False)
    if dirty:
        raise HarnessError(
            f"{repo} has uncommitted or untracked files: {listing(dirty)}. Nothing was "
            f"changed. Commit, stash or remove them, then run again."
        )


def wheel_serve_tree(wheel: Path) -> str:
    """The git tree id the wheel's ray/serve would have at python/ray/serve.

    Equal tree ids mean equal names, bytes and executable bits, which is how a
    stand-in checkout built from the pinned wheel is recognised."""
    with tempfile.TemporaryDirectory(prefix="ray-serve-tree-") as tmp:
        repo = Path(tmp)
        git_output(["init", "--quiet", repo], repo)
        extract_from_wheel(wheel, repo / SOURCE_ROOT)
        git_output(["add", "--all"], repo)
        return git_output(["write-tree", f"--prefix={SERVE}/"], repo).strip()


def at_the_pin(
    repo: Path, release: RayRelease, wheel: Path | None, rev: str = "HEAD"
) -> tuple[str, str]:
    """(the commit `rev` names, why it counts as the pin), or a refusal.

    A real checkout is at the pin when HEAD is the pinned commit. There is no
    Ray clone on every machine, so with the pinned `wheel` a stand-in also
    counts: a repo whose python/ray/serve is the wheel's tree byte for byte. No
    real Ray commit matches that (its tree has BUILD files and tests the wheel
    lacks), so the two cases cannot be confused."""
    head = git_output(["rev-parse", "--verify", f"{rev}^{{commit}}"], repo, isolated=False).strip()
    if release.commit and head == release.commit:
        return head, f"HEAD is Ray {release.version}'s commit"
    if wheel is not None:
        found = run_git(
            ["rev-parse", "--verify", "--quiet", f"{head}:{SERVE}"], repo, isolated=False
        )
        if found.returncode == 0 and found.stdout.strip() == wheel_serve_tree(wheel):
            return head, f"a stand-in: its {SERVE} is {wheel.name}'s ray/serve, byte for byte"
    stand_in = f" nor a tree whose {SERVE} is {wheel.name}'s" if wheel is not None else ""
    raise HarnessError(
        f"{repo} is at {head}, which is neither Ray {release.version}'s commit "
        f"{release.commit}{stand_in}. Nothing was changed. Run `git -C {repo} switch "
        f"--detach {release.commit}` (or build a stand-in with `python -m harness upstream "
        f"standin`) and run again."
    )


def _patch_id(diff: str, repo: Path) -> str | None:
    """git's id of a change, the same for a patch file and the commit it made
    (line numbers and whitespace do not count); None for no change."""
    result = run_git(["patch-id", "--stable"], repo, input=diff)
    return result.stdout.split()[0] if result.returncode == 0 and result.stdout else None


def _carries_series(repo: Path, patches: Sequence[Path]) -> str | None:
    """The commit below HEAD's last len(patches) commits when those are the
    series, in order (by patch id); None otherwise."""
    base = run_git(
        ["rev-parse", "--verify", "--quiet", f"HEAD~{len(patches)}^{{commit}}"],
        repo,
        isolated=False,
    )
    if not patches or base.returncode != 0:
        return None
    for i, patch in enumerate(patches):
        commit = f"HEAD~{len(patches) - 1 - i}"
        shown = run_git(["show", "--format=", "--no-color", "--no-ext-diff", commit], repo)
        try:
            text = patch.read_text(errors="replace")
        except OSError:
            return None
        if shown.returncode != 0 or _patch_id(shown.stdout, repo) != _patch_id(text, repo):
            return None
    return base.stdout.strip()


def _make_contributors(repo: Path, base: str) -> None:
    """Make the commits after `base` the user's own: authored by them (a patch
    file's author is the workspace's, not a person) and with their
    Signed-off-by, which Ray's contribution rules require of every commit."""
    amend = "git commit --amend --quiet --no-edit --no-verify --reset-author --signoff"
    result = run_git(["rebase", "--quiet", "--exec", amend, base], repo, isolated=False)
    if result.returncode != 0:
        run_git(["rebase", "--abort"], repo, isolated=False)
        raise HarnessError(
            f"the series applied to {repo}, but making its commits yours (author and "
            f"Signed-off-by) failed; the commits are there as the patch files author "
            f"them:\n{output_tail(result)}"
        )


@dataclass(frozen=True)
class CheckoutResult:
    repo: Path
    base: str  # the pinned commit (or stand-in) the series is on
    why: str  # why `base` counts as the pin
    count: int
    already: bool  # the checkout carried the series before: nothing was done

    def format(self) -> str:
        where = f"on {self.base[:12]} ({self.why})"
        if self.already:
            return (
                f"patches: {self.repo} already carries the series, {self.count} commits "
                f"{where}; nothing to do"
            )
        return (
            f"patches: {self.count} patches applied to {self.repo} with git am, one "
            f"commit each, {where}"
        )


def apply_to_checkout(
    ray_src: Path, patches: list[Path], release: RayRelease, wheel: Path | None = None
) -> CheckoutResult:
    """`git am --3way` the series onto a clean Ray checkout at the pin: the pinned
    commit or, with the pinned `wheel`, a stand-in (`at_the_pin`, the check
    pr-branches makes). A checkout whose last commits already are the series, on
    the pin, is left as it is.

    Runs with the user's own git config: the commits are theirs, for upstream.
    """
    if not release.commit:
        raise HarnessError(
            f"patches/PIN names no commit for Ray {release.version}, so a checkout cannot be "
            f"checked against it. Nothing was changed. Add `commit = ...` under [ray]."
        )
    repo = checkout_top(
        ray_src,
        "a clone of https://github.com/ray-project/ray, or a stand-in "
        "(`python -m harness upstream standin`)",
    )
    try:
        head, why = at_the_pin(repo, release, wheel)
    except HarnessError:
        # Applied before (a second `make apply-patches`): not a checkout off the pin.
        base = _carries_series(repo, patches)
        if base is None:
            raise
        try:
            base, why = at_the_pin(repo, release, wheel, rev=base)
        except HarnessError:
            raise HarnessError(
                f"{repo}'s last {len(patches)} commits are the series, but on {base}, which "
                f"is neither Ray {release.version}'s commit {release.commit} nor a stand-in "
                f"at the pin. Nothing was changed."
            ) from None
        return CheckoutResult(repo, base, why, len(patches), already=True)
    refuse_dirty(repo)
    if not patches:
        return CheckoutResult(repo, head, why, 0, already=False)
    contributor_identity(repo)
    am: list[str | Path] = [
        "am",
        "--3way",
        "--keep-cr",
        "--keep-non-patch",
        *(p.resolve() for p in patches),
    ]
    try:
        result = run_git(am, repo, isolated=False)
    except KeyboardInterrupt:
        run_git(["am", "--abort"], repo, isolated=False)
        raise
    if result.returncode == 0:
        _make_contributors(repo, head)
        return CheckoutResult(repo, head, why, len(patches), already=False)
    output = output_tail(result)
    run_git(["am", "--abort"], repo, isolated=False)
    now = git_output(["rev-parse", "HEAD"], repo, isolated=False).strip()
    left = uncommitted_paths(repo, isolated=False)
    if now == head and not left:
        untouched = f"`git am --abort` put {repo} back at {head}, clean."
    else:
        untouched = (
            f"WARNING: after `git am --abort`, {repo} is at {now} with changes in "
            f"{listing(left) or 'no files'}; check it by hand (original HEAD: {head})."
        )
    raise HarnessError(
        f"{failed_patch(output, patches)} does not apply to {repo}:\n{output}\n{untouched} "
        f"Rebase that patch in the workspace, export, and run again."
    )
