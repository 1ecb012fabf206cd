"""The series as pull-request branches: each patch's number and commit
message, what it is stacked on (its message says), the branch name made from
its subject, `pr-branches` (branch k is the pin plus patch k's stack plus patch
k, each tested), and the stand-in for a Ray checkout at the pin that
`python -m harness upstream standin` builds from the wheel.

Applying and reading patches belong to `harness.patches`; this module only
arranges those steps per patch and reports on them.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.core import log
from harness.core.errors import HarnessError, listing
from harness.core.git import contributor_identity, git_output, run_git
from harness.core.paths import BUILD_DIR
from harness.core.pin import RayRelease
from harness.core.proc import output_tail
from harness.patches.checkout import apply_to_checkout, at_the_pin, checkout_top, refuse_dirty
from harness.patches.patch_files import SERVE, patch_paths
from harness.patches.workspace import build_workspace, extract_from_wheel
from harness.upstream.testenv import PatchTests, TestEnv, run_patch_tests

_log = log.get(__name__)

STANDIN_DIR = BUILD_DIR / "ray-standin"


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
            result = run_git(["mailinfo", "-k", msg, diff], Path(tmp), stdin=mbox)
        if result.returncode != 0:
            raise HarnessError(
                f"git cannot read {patch.name} as a patch mail "
                f"({result.stderr.strip()}). Regenerate it with "
                f"`make workspace` and `make export-patches`."
            )
        headers = result.stdout
        subject = next(
            (
                line[len("Subject: ") :]
                for line in headers.splitlines()
                if line.startswith("Subject: ")
            ),
            patch.name,
        )
        return subject, msg.read_text(encoding="utf-8", errors="replace").strip()


_STACKED_ON = re.compile(r"^Stacked on (.+)$", re.S)
_TAG = re.compile(r"^\[[^\]]+\]\s*")


def _one_line(text: str) -> str:
    return " ".join(text.split())


# A patch names the patches it is stacked on in its message, as a paragraph of
# its own, each by its subject without the [tag], in double quotes:
#
#     Stacked on "HAProxy: master-worker mode, reloads through the master
#     confirmed by pid" and "HAProxy: compile the config templates once per
#     process".
#
# A patch without such a paragraph applies to the pin alone.


def stack_paragraph(message: str) -> str | None:
    """The text after "Stacked on" in a commit message, on one line; None when
    it names no stack. The paragraph may wrap over several lines."""
    for paragraph in re.split(r"\n\s*\n", message):
        match = _STACKED_ON.match(_one_line(paragraph))
        if match:
            return match.group(1)
    return None


def _untagged(subject: str) -> str:
    return _one_line(_TAG.sub("", subject))


def series_stacks(patches: Sequence[Path]) -> list[list[Path]]:
    """For each patch, the earlier patches it needs, in series order: those its
    message names and, in turn, theirs. A subject is named in double quotes
    (it may hold quotes of its own). Raises when the paragraph names anything
    that is not an earlier patch's subject."""
    subjects: list[str] = []
    stacks: list[list[Path]] = []
    for patch in patches:
        subject, body = patch_message(patch)
        named = stack_paragraph(body)
        needed: set[int] = set()
        if named is not None:
            rest = named
            for j, earlier in enumerate(subjects):
                if f'"{earlier}"' in rest:
                    rest = rest.replace(f'"{earlier}"', "")
                    needed.add(j)
                    needed.update(patches.index(p) for p in stacks[j])
            if not needed or '"' in rest:
                raise HarnessError(
                    f"{patch.name} says it is stacked on {named!r}; each subject "
                    f"must be an earlier patch's, in double quotes and without its "
                    f"[tag]. Earlier subjects: {listing(subjects) or 'none'}. Fix "
                    f"the message in the workspace and export again."
                )
        stacks.append([patches[j] for j in sorted(needed)])
        subjects.append(_untagged(subject))
    return stacks


# Words that make a branch name longer without telling branches apart.
_STOP_WORDS = frozenset("a an and at by for from in into of on or the to with".split())
_MAX_SLUG = 60


def branch_name(subject: str) -> str:
    """`[Serve] Size the ingress force-kill budget to the request timeout` ->
    `serve/size-ingress-force-kill-budget-request-timeout`: the subject's tag,
    lowercased, as the folder; the rest lowercased, a possessive's `'s`
    dropped, every run of other characters a `-`, small words dropped, cut at a
    word to 60 characters."""
    tag = re.match(r"\s*\[([^\]]+)\]\s*", subject)
    folder = "-".join(re.findall(r"[a-z0-9]+", tag.group(1).lower())) if tag else ""
    rest = subject[tag.end() :] if tag else subject
    slug = ""
    for word in re.findall(r"[a-z0-9]+", re.sub(r"(?<=\w)'s\b", "", rest.lower())):
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
            f"pr-branches: {len(self.rows)} branches (each on its stack) in {self.repo} on "
            f"{self.base[:12]} ({self.why})",
            "",
        ]
        width = max(len(r.name) for r in self.rows)
        lines.append(f"{'branch':{width}}  commit        applies  tests (own; its stack's)")
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
            # Failed means the tests ran (PatchTests is ok when there were none).
            assert r.tests is not None and r.tests.run is not None
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
    result = run_git(
        ["update-ref", "-m", "pr-branches", "--stdin"],
        repo,
        isolated=False,
        input="\n".join(lines) + "\n",
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
    """On a clean Ray checkout at the pin, make branch k = the pin + the patches
    patch k is stacked on + patch k (`git am`), for every patch, and run each
    branch's tests (patch k's own, and its stack's) over the pinned Ray in
    `env` (None: no tests).

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
    # Before the worktree: each patch's commit is made as this identity.
    contributor_identity(repo)
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
        _log.warning(
            "pr-branches: note: the tests see the wheel's copy of %s; "
            "only %s is laid over the installed Ray.",
            listing(outside),
            SERVE,
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
        stacks = series_stacks(patches)
        for i, (patch, name) in enumerate(zip(patches, names, strict=True)):
            git_output(["checkout", "--quiet", "--detach", base], worktree, isolated=False)
            stack = stacks[i]
            try:
                apply_to_checkout(worktree, stack, replace(release, commit=base))
                parent = git_output(["rev-parse", "HEAD"], worktree, isolated=False).strip()
                strict = run_git(["apply", "--check", patch.resolve()], worktree, isolated=False)
                apply_to_checkout(worktree, [patch], replace(release, commit=parent))
            except HarnessError as exc:
                under = listing([p.name for p in stack]) or "the pin alone"
                raise HarnessError(
                    f"{patch.name} does not apply on {under}. No branch was created and "
                    f"{repo} was not changed (the patches were applied in a temporary "
                    f"worktree, now removed).\n{exc}"
                ) from exc
            commit = git_output(["rev-parse", "HEAD"], worktree, isolated=False).strip()
            rows.append(
                BranchRow(name, patch.name, commit, "clean" if strict.returncode == 0 else "3-way")
            )
            if env is not None:
                snapshots.append(scratch / f"tree-{i + 1}")
                _snapshot(pristine, worktree, base, snapshots[-1])
            log.progress(
                _log,
                f"pr-branches: [{i + 1}/{len(patches)}] {name}: {patch.name} applied "
                f"({rows[-1].applies})",
                started,
            )
        applied_at = time.monotonic()
        if env is not None:
            for i, row in enumerate(rows):
                own_stack = [*stacks[i], patches[i]]
                row.tests = run_patch_tests(
                    env, own_stack, len(own_stack) - 1, snapshots[i], scratch
                )
                log.progress(
                    _log,
                    f"pr-branches: [{i + 1}/{len(rows)}] tests on {row.name}: {row.tests}",
                    started,
                )
        tested_at = time.monotonic()
        _update_refs(repo, [(r.name, r.commit, existing.get(r.name)) for r in rows])
    finally:
        if added:
            removed = run_git(["worktree", "remove", "--force", worktree], repo, isolated=False)
            if removed.returncode != 0:
                _log.warning(
                    "pr-branches: warning: could not remove the temporary worktree "
                    "%s (%s); run `git -C %s worktree prune` after deleting it.",
                    worktree,
                    output_tail(removed),
                    repo,
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
