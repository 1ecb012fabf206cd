"""The `build/ray-src` workspace the series is edited in: `build_workspace`
imports the files of the pinned wheel the series may change (Serve's tree and
its Grafana panels) as a commit tagged `base` and the series
on top as one commit per patch; `export_workspace` writes base..HEAD back to
patches/ as byte-stable `git format-patch` files and rewrites the series;
`export_differences` says, writing nothing, what such an export would change.

Every git run here is isolated (`harness.core.git`), so an export is the same
bytes on every machine.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.core.errors import HarnessError, listing
from harness.core.git import (
    WORKSPACE_AUTHOR,
    git_output,
    operation_in_progress,
    run_git,
    uncommitted_paths,
)
from harness.core.paths import PATCHES_DIR, SERIES_FILE, WORKSPACE_DIR
from harness.core.pin import read_series
from harness.core.proc import output_tail
from harness.patches.patch_files import SOURCE_ROOT, failed_patch, patch_subject

BASE_TAG = "base"
# Where the serve tree is inside the wheel (and inside site-packages).
SERVE_PREFIX = "ray/serve/"
# Serve's Grafana panels live in the dashboard's package; the series adds panels
# for the metrics it adds.
SERVE_PANELS = "ray/dashboard/modules/metrics/dashboards/serve_dashboard_panels.py"
# Every file of the wheel the series may change, by path prefix.
TREE_PREFIXES = (SERVE_PREFIX, SERVE_PANELS)
# The series file is rewritten beside itself and renamed into place.
_TMP_SUFFIX = ".ray-patches-tmp"


def extract_from_wheel(wheel: Path, root: Path, prefixes: Sequence[str] = TREE_PREFIXES) -> int:
    """Write the wheel's files whose names start with one of `prefixes` under
    `root`, keeping their wheel paths (`ray/serve/...`); returns the file count.

    The workspace extracts into `<repo>/python`, the patched image into a
    scratch site-packages."""
    count = 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                name = info.filename
                if not name.startswith(tuple(prefixes)) or name.endswith("/"):
                    continue
                parts = PurePosixPath(name).parts
                if ".." in parts or name.startswith("/"):
                    raise HarnessError(f"{wheel} holds an unsafe path {name}; not extracting.")
                target = root.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(info))
                # Git records only the executable bit, so that is all that is kept.
                target.chmod(0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
                count += 1
    except (OSError, zipfile.BadZipFile) as exc:
        raise HarnessError(f"cannot read the wheel {wheel}: {exc}") from exc
    if count == 0:
        raise HarnessError(f"{wheel} has no {', '.join(prefixes)} files; is it a Ray wheel?")
    return count


_FORMAT_PATCH = (
    "format-patch",
    "--keep-subject",
    "--zero-commit",
    "--no-signature",
    "--full-index",
    "--binary",
    "--no-stat",
    "--no-renames",
    "--diff-algorithm=myers",
    "--unified=3",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--no-relative",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "-O/dev/null",
    "--no-notes",
    "--no-thread",
    "--no-cover-letter",
    "--no-base",
    "--no-to",
    "--no-cc",
    "--no-add-header",
    "--no-signoff",
    "--no-attach",
    "--encode-email-headers",
    "--suffix=.patch",
    "--filename-max-length=64",
)


def wheel_repo(wheel: Path, repo: Path) -> Path:
    """A new git repo at `repo` (a folder it creates) whose one commit, on
    branch `pinned`, holds the wheel's files the series may change under
    `python/`, where the patches expect them: the tree patches are applied to
    in a temporary folder. Returns `repo`."""
    repo.mkdir()
    git_output(["init", "--quiet", "--initial-branch=pinned", repo], repo)
    extract_from_wheel(wheel, repo / "python")
    git_output(["add", "--all"], repo)
    git_output(["commit", "--quiet", "--no-verify", "-m", wheel.name], repo, identity=True)
    return repo


def _format_patches(workspace: Path, out_dir: Path) -> list[Path]:
    out = git_output([*_FORMAT_PATCH, "-o", out_dir, f"{BASE_TAG}..HEAD"], workspace)
    files = [Path(line) for line in out.splitlines() if line.strip()]
    for path in files:
        path.write_bytes(without_personal_identity(path.read_bytes()))
    return files


_SIGNED_OFF = re.compile(rb"^Signed-off-by: .*\n", re.MULTILINE)
_MIME_HEADERS = re.compile(
    rb"^MIME-Version: 1\.0\nContent-Type: text/plain; charset=UTF-8\n"
    rb"Content-Transfer-Encoding: 8bit\n",
    re.MULTILINE,
)


def without_personal_identity(patch: bytes) -> bytes:
    """A format-patch file with the workspace as its author and no
    Signed-off-by in its message: whoever commits in the workspace, the file
    is the same, and the person who takes the series upstream authors and
    signs off its commits there (patches/checkout.py)."""
    head, sep, rest = patch.partition(b"\nDate: ")
    lines = head.split(b"\n")
    author = next(i for i, line in enumerate(lines) if line.startswith(b"From: "))
    head = b"\n".join([*lines[:author], b"From: " + WORKSPACE_AUTHOR.encode()])
    # With --no-stat the message ends at the blank line before the first diff.
    message, diff_sep, diff = rest.partition(b"\n\ndiff --git ")
    # Without its trailers the message ends where its text does, as git would
    # store it after `git am`, so exporting that commit again gives these bytes.
    message = _SIGNED_OFF.sub(b"", message + b"\n").rstrip(b"\n")
    if message.isascii():
        # format-patch declares UTF-8 only for a message that needs it, and a
        # removed trailer may have been the only non-ASCII text in it.
        message = _MIME_HEADERS.sub(b"", message, count=1)
    return head + sep + message + diff_sep + diff


def _check_workspace(workspace: Path, action: str) -> None:
    if not (workspace / ".git").exists():
        raise HarnessError(
            f"{workspace} exists but is not a patch workspace (no git repository). Nothing "
            f"was changed. Move it away, then {action} again."
        )
    busy = operation_in_progress(workspace, isolated=True)
    if busy:
        raise HarnessError(
            f"{workspace} is in the middle of {busy}. Nothing was changed. Finish it "
            f"(`git am --continue`, `git rebase --continue`) or abort it, then {action} again."
        )
    if run_git(["rev-parse", "--verify", "--quiet", f"refs/tags/{BASE_TAG}"], workspace).returncode:
        raise HarnessError(
            f"{workspace} has no `{BASE_TAG}` tag, so its patches cannot be told from Ray's "
            f"tree. Nothing was changed. Recreate the tag on the wheel's commit, or move the "
            f"folder away and run `make workspace`."
        )
    dirty = uncommitted_paths(workspace, isolated=True)
    if dirty:
        raise HarnessError(
            f"{workspace} has uncommitted changes: {listing(dirty)}. Nothing was changed. "
            f"Commit them (then `make export-patches`) or discard them, and {action} again."
        )


def _check_workspace_disposable(workspace: Path, patches: Sequence[Path]) -> None:
    """Refuse to rebuild over work that `patches` does not already hold."""
    if not workspace.is_dir():
        raise HarnessError(f"{workspace} exists and is not a folder; move it away.")
    if not any(workspace.iterdir()):
        return
    _check_workspace(workspace, "run `make workspace`")
    stray = git_output(["rev-list", "--all", "--not", "HEAD"], workspace).split()
    if stray:
        raise HarnessError(
            f"{workspace} has {len(stray)} commits on other branches, tags or stashes that "
            f"are not on HEAD. Nothing was changed. Bring them onto HEAD and run `make "
            f"export-patches`, or delete the workspace to discard them."
        )
    with tempfile.TemporaryDirectory(prefix="ray-patches-export-") as tmp:
        exported = _format_patches(workspace, Path(tmp))
        saved = {p.read_bytes() for p in patches}
        unsaved = [patch_subject(p) for p in exported if p.read_bytes() not in saved]
        if unsaved:
            raise HarnessError(
                f"{workspace} holds commits that patches/ does not: {listing(unsaved)}. "
                f"Nothing was changed. Run `make export-patches` to keep them, or delete "
                f"{workspace} to discard them, then run `make workspace` again."
            )


def build_workspace(wheel: Path, patches: list[Path], workspace: Path = WORKSPACE_DIR) -> None:
    """(Re)create the workspace: commit 1 is the wheel's files the series may
    change (`TREE_PREFIXES`) under python/ (tagged `base`), then one commit per
    patch."""
    # git runs inside the new tree and is also given its path: a relative one
    # would be read relative to itself.
    workspace = workspace.resolve()
    if workspace.exists():
        _check_workspace_disposable(workspace, patches)
    workspace.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the old one and swapped in at the end, so a patch that fails
    # to import leaves the existing workspace as it was.
    fresh = Path(tempfile.mkdtemp(prefix=f".{workspace.name}.new-", dir=workspace.parent))
    try:
        git_output(["init", "--quiet", "--initial-branch=main", fresh], fresh)
        count = extract_from_wheel(wheel, fresh / SOURCE_ROOT)
        git_output(["add", "--all"], fresh)
        message = (
            f"Import {SOURCE_ROOT}/{SERVE_PREFIX.rstrip('/')} and Serve's dashboard panels "
            f"from {wheel.name}\n\n"
            f"{count} files, as the wheel ships them.\n"
        )
        git_output(["commit", "--quiet", "--no-verify", "-m", message], fresh, identity=True)
        git_output(["tag", BASE_TAG], fresh)
        if patches:
            am: list[str | Path] = [
                "am",
                "--keep-cr",
                "--keep-non-patch",
                "--committer-date-is-author-date",
                *(p.resolve() for p in patches),
            ]
            result = run_git(am, fresh, identity=True)
            if result.returncode != 0:
                raise HarnessError(
                    f"{failed_patch(output_tail(result), patches)} does not apply to the wheel's "
                    f"tree:\n{output_tail(result)}\nThe existing workspace (if any) was not "
                    f"changed. Fix the patch file, or rebuild without it and redo the change."
                )
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    if workspace.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{workspace.name}.old-", dir=workspace.parent))
        os.replace(workspace, old / "ws")
        os.replace(fresh, workspace)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(fresh, workspace)


def _series_header(series_file: Path) -> list[str]:
    """Leading comment lines of the series file, kept across exports."""
    if not series_file.is_file():
        return []
    header = []
    for line in series_file.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        header.append(line)
    while header and not header[-1].strip():
        header.pop()
    return header


_NUMBERED = re.compile(r"^\d{4}-.*\.patch$")


@dataclass(frozen=True)
class _Export:
    """What an export of a workspace writes into a patches folder, worked out
    without writing anything."""

    patches: dict[str, bytes]  # file name -> content, in series order
    stale: tuple[Path, ...]  # files in the folder that the export removes
    series: bytes  # the series file it writes


def _plan_export(workspace: Path, patches_dir: Path, action: str) -> _Export:
    if not workspace.is_dir():
        hint = (
            " (or `make check-patches`, which checks patches/ against a workspace it "
            "builds from the pinned wheel)"
            if action == "check"
            else ""
        )
        raise HarnessError(f"{workspace} does not exist; run `make workspace` first{hint}.")
    _check_workspace(workspace, action)
    base_ok = run_git(["merge-base", "--is-ancestor", BASE_TAG, "HEAD"], workspace)
    if base_ok.returncode != 0:
        raise HarnessError(
            f"HEAD in {workspace} does not descend from `{BASE_TAG}`. Nothing was exported. "
            f"Rebase your branch onto `{BASE_TAG}` and run again."
        )
    merges = git_output(["rev-list", "--merges", f"{BASE_TAG}..HEAD"], workspace).split()
    if merges:
        raise HarnessError(
            f"{workspace} has merge commits after `{BASE_TAG}` ({listing(merges)}), which "
            f"a patch series cannot express. Nothing was exported. Rebase to a linear history."
        )
    series_file = patches_dir / SERIES_FILE.name
    old = (
        {p for p in patches_dir.iterdir() if _NUMBERED.match(p.name)}
        if patches_dir.is_dir()
        else set()
    )
    try:
        old |= set(read_series(series_file))
    except HarnessError:
        pass  # a series naming missing files is exactly what the export rewrites
    with tempfile.TemporaryDirectory(prefix="ray-patches-export-") as tmp:
        patches = {p.name: p.read_bytes() for p in _format_patches(workspace, Path(tmp))}
    lines = _series_header(series_file) + list(patches)
    return _Export(
        patches=patches,
        stale=tuple(sorted(p for p in old if p.name not in patches)),
        series=("\n".join(lines) + "\n" if lines else "").encode(),
    )


def export_workspace(
    workspace: Path = WORKSPACE_DIR, patches_dir: Path = PATCHES_DIR
) -> list[Path]:
    """Write base..HEAD as patch files into patches_dir and rewrite its series."""
    plan = _plan_export(workspace, patches_dir, "export")
    patches_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, content in plan.patches.items():
        target = patches_dir / name
        # Unchanged files keep their mtime, so make and editors see no change.
        if not target.is_file() or target.read_bytes() != content:
            target.write_bytes(content)
        written.append(target)
    for stale in plan.stale:
        stale.unlink(missing_ok=True)
    series_file = patches_dir / SERIES_FILE.name
    tmp_series = series_file.with_name(series_file.name + _TMP_SUFFIX)
    tmp_series.write_bytes(plan.series)
    os.replace(tmp_series, series_file)
    return written


def export_differences(
    workspace: Path = WORKSPACE_DIR, patches_dir: Path = PATCHES_DIR
) -> list[str]:
    """The files in patches_dir that `export_workspace(workspace, patches_dir)`
    would write, rewrite or remove, each with why; empty when an export would
    change nothing. Writes nothing (the export is made in a temporary folder)."""
    plan = _plan_export(workspace, patches_dir, "check")
    found = []
    for name, content in plan.patches.items():
        target = patches_dir / name
        if not target.is_file():
            found.append(f"{name} (missing)")
        elif target.read_bytes() != content:
            found.append(f"{name} (differs)")
    found += [f"{p.name} (not in the export)" for p in plan.stale if p.exists()]
    series_file = patches_dir / SERIES_FILE.name
    if not series_file.is_file() or series_file.read_bytes() != plan.series:
        found.append(f"{series_file.name} (differs)")
    return found


def fresh_export_differences(
    wheel: Path, patches: list[Path], patches_dir: Path = PATCHES_DIR
) -> list[str]:
    """`export_differences` for a workspace built from `wheel` and `patches`
    in a temporary folder: whether the committed patch files are exactly what
    an export writes, on a clean clone with no build/ray-src."""
    with tempfile.TemporaryDirectory(prefix="ray-patches-check-") as tmp:
        workspace = Path(tmp) / "ray-src"
        build_workspace(wheel, patches, workspace)
        return export_differences(workspace, patches_dir)
