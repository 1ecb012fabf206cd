"""The series applied to an installed Ray's site-packages (the project's
.venv, or the scratch tree a patched image is built from): apply, revert and
status.

Applying is all or nothing: the whole series is first applied to a copy of
the files it touches, and site-packages is written only when every patch
applied, in one journaled commit (`harness.patches.journal`, which also keeps
the record of what was applied). The pin comes from `harness.core.pin`. Every
refusal is a `HarnessError` saying what happened, what was left untouched and
what to do.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.core import log
from harness.core.errors import HarnessError, listing
from harness.core.git import run_git
from harness.core.pin import RayRelease, check_installed, installed_ray
from harness.core.proc import output_tail
from harness.core.wheels import sha256_file
from harness.patches import journal
from harness.patches.patch_files import STRIP, patch_paths

_log = log.get(__name__)


@dataclass(frozen=True)
class PatchRecord:
    name: str
    sha256: str


def _records(patches: Sequence[Path]) -> list[PatchRecord]:
    return [PatchRecord(p.name, sha256_file(p)) for p in patches]


def _hand_edited(site: Path, state: dict) -> list[str]:
    """Touched files whose content is no longer what the patches wrote."""
    return sorted(
        rel
        for rel, entry in state["files"].items()
        if journal.file_sha(site / rel) != entry["patched_sha256"]
    )


def _check_same_ray(site: Path, state: dict) -> None:
    found = installed_ray(site)
    recorded = (state["ray"]["version"], state["ray"]["commit"])
    if found is not None and tuple(found) == recorded:
        return
    now = "no Ray" if found is None else f"Ray {found[0]} (commit {found[1]})"
    created = sorted(rel for rel, e in state["files"].items() if not e["existed"])
    leftovers = f" Files the patches created may remain: {listing(created)}." if created else ""
    folder = journal.state_dir(site)
    raise HarnessError(
        f"{folder} records patches applied to Ray {recorded[0]} (commit "
        f"{recorded[1]}), but {site} now holds {now}: Ray was reinstalled, which replaced "
        f"the patched files. Nothing was changed; restoring the recorded originals would mix "
        f"two Rays.{leftovers} Remove {folder} (and those files), then apply again."
    )


def _prune_originals(site: Path, state: dict) -> None:
    keep = {rel for rel, entry in state["files"].items() if entry["existed"]}
    root = journal.originals_dir(site)
    if not root.is_dir():
        return
    for path in sorted(root.rglob("*"), reverse=True):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel not in keep:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _drop_bytecode(site: Path, rels: Sequence[str]) -> None:
    # A .pyc is trusted when the source's mtime (whole seconds) and size match,
    # so a quick apply-then-revert could leave Python running stale bytecode.
    for rel in rels:
        path = site / rel
        if path.suffix == ".py":
            for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
                pyc.unlink(missing_ok=True)


@dataclass(frozen=True)
class ApplyResult:
    site_packages: Path
    patches: tuple[str, ...]
    changed: tuple[str, ...]
    already_applied: bool
    replaced: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def format(self) -> str:
        lines = [f"patches: {note}" for note in self.notes]
        where = self.site_packages
        if self.already_applied:
            lines.append(
                f"patches: already applied to {where} ({len(self.patches)} patches); "
                f"nothing changed."
            )
            return "\n".join(lines)
        if self.replaced:
            lines.append(f"patches: reverted the previous series ({', '.join(self.replaced)}).")
        if self.patches:
            lines.append(f"patches: applied {len(self.patches)} patches to {where}:")
            lines += [f"  {name}" for name in self.patches]
        else:
            lines.append(f"patches: the series is empty; recorded that in {where}.")
        lines.append(f"patches: {len(self.changed)} files changed.")
        return "\n".join(lines)


def _original_source(site: Path, old: dict | None, rel: str) -> Path | None:
    """Where the pristine copy of `rel` is now: the backup if a patch touches it
    today, else the file itself; None if it did not exist before any patch."""
    if old is not None and rel in old["files"]:
        if not old["files"][rel]["existed"]:
            return None
        return journal.originals_dir(site) / rel
    path = site / rel
    return path if path.is_file() else None


def _apply_in_stage(stage: Path, patch: Path, paths: Sequence[str]) -> None:
    result = run_git(
        ["apply", f"-p{STRIP}", "--whitespace=nowarn", patch.resolve()],
        stage,
        ceiling=stage.parent,
    )
    if result.returncode == 0:
        return
    output = output_tail(result)
    reported = [rel for rel in paths if rel in output] or list(paths)
    raise HarnessError(
        f"patch {patch.name} does not apply to {listing(reported)}:\n{output}\n"
        f"Nothing was changed: the series is tried on a copy first, and site-packages "
        f"still holds what it held before. Rebase {patch.name} in the workspace "
        f"(`make workspace`, fix, `make export-patches`) and run again."
    )


def apply_to_site_packages(
    site_packages: Path, patches: list[Path], release: RayRelease
) -> ApplyResult:
    """Apply the whole series to site-packages, or nothing; see the module docstring."""
    site = site_packages
    _, ray_commit = check_installed(site, release)
    notes = tuple(journal.recover(site))
    old = journal.read_state(site)
    series = _records(patches)
    if old is not None:
        _check_same_ray(site, old)
        edited = _hand_edited(site, old)
        if edited:
            raise HarnessError(
                f"these patched files in {site} were edited since the patches were applied: "
                f"{listing(edited)}. Nothing was changed. Move the edits into a patch "
                f"(workspace), or discard them with `python -m harness patches revert --force`, "
                f"then apply again."
            )
        applied = [PatchRecord(**p) for p in old["patches"]]
        if applied == series:
            return ApplyResult(site, tuple(p.name for p in series), (), True, notes=notes)
    per_patch = [patch_paths(p) for p in patches]
    touched = list(dict.fromkeys(rel for paths in per_patch for rel in paths))
    old_files: dict = old["files"] if old is not None else {}
    old_dirs: list[str] = old["created_dirs"] if old is not None else []

    with tempfile.TemporaryDirectory(prefix="ray-patches-") as tmp:
        # Stage the originals of every file the new series touches and apply the
        # series there; site-packages is not touched until all of it applied.
        stage = Path(tmp) / "site-packages"
        stage.mkdir()
        originals: dict[str, Path | None] = {}
        for rel in touched:
            original = originals[rel] = _original_source(site, old, rel)
            if original is not None:
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(original, stage / rel)
        for patch, paths in zip(patches, per_patch, strict=True):
            _apply_in_stage(stage, patch, paths)

        results: dict[str, Path | None] = {
            rel: (stage / rel if (stage / rel).is_file() else None) for rel in touched
        }
        for rel in old_files:
            if rel not in results:
                results[rel] = _original_source(site, old, rel)
        targets = {
            rel: source
            for rel, source in results.items()
            if (journal.file_sha(source) if source else None) != journal.file_sha(site / rel)
        }
        existing_before = {
            d
            for rel in touched
            for d in journal.ancestors(rel)
            if (site / d).is_dir() and d not in old_dirs
        }
        created_dirs = sorted(
            {
                d
                for rel in touched
                if results[rel] is not None and originals[rel] is None
                for d in journal.ancestors(rel)
                if d not in existing_before
            }
        )
        new_state = {
            "format": journal.STATE_FORMAT,
            "ray": {"version": release.version, "commit": ray_commit},
            "patches": [{"name": p.name, "sha256": p.sha256} for p in series],
            "files": {
                rel: {
                    "existed": originals[rel] is not None,
                    "patched_sha256": (
                        journal.file_sha(result) if (result := results[rel]) else None
                    ),
                }
                for rel in touched
            },
            "created_dirs": created_dirs,
        }
        # Back up originals before the journal is armed; the backups for files
        # the old series already touches are never rewritten.
        backups = journal.originals_dir(site)
        try:
            for rel in touched:
                original = originals[rel]
                if rel not in old_files and original is not None:
                    (backups / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(original, backups / rel)
        except BaseException:
            journal.recover(site)  # drops a state folder this very call created
            raise
        remove_dirs = [d for d in old_dirs if d not in created_dirs]
        journal.commit(site, targets, remove_dirs, new_state)
    _prune_originals(site, new_state)
    _drop_bytecode(site, sorted(targets))
    replaced = tuple(p["name"] for p in old["patches"]) if old and old["patches"] else ()
    return ApplyResult(
        site, tuple(p.name for p in series), tuple(sorted(targets)), False, replaced, notes
    )


def revert_site_packages(site_packages: Path, *, force: bool = False) -> list[str]:
    """Put back the original files, delete the ones the patches created, and drop
    the state. Returns the files restored or removed; prints one summary line."""
    site = site_packages
    # A recovery finished an interrupted apply or revert first: worth a word,
    # and the revert goes on.
    for note in journal.recover(site):
        _log.warning("patches: %s", note)
    state = journal.read_state(site)
    if state is None:
        print(f"patches: nothing is applied to {site}; nothing to revert.")
        return []
    _check_same_ray(site, state)
    edited = _hand_edited(site, state)
    if edited and not force:
        raise HarnessError(
            f"these patched files in {site} were edited since the patches were applied: "
            f"{listing(edited)}. Nothing was changed. Save the edits elsewhere if you need "
            f"them, then discard them with `python -m harness patches revert --force`."
        )
    targets = {rel: _original_source(site, state, rel) for rel in state["files"]}
    changed = sorted(
        rel
        for rel, source in targets.items()
        if (journal.file_sha(source) if source else None) != journal.file_sha(site / rel)
    )
    journal.commit(site, {rel: targets[rel] for rel in changed}, state["created_dirs"], None)
    shutil.rmtree(journal.state_dir(site), ignore_errors=True)
    _drop_bytecode(site, changed)
    names = [p["name"] for p in state["patches"]]
    print(
        f"patches: reverted {len(names)} patches in {site}; "
        f"{len(changed)} files restored or removed."
    )
    return changed


@dataclass(frozen=True)
class PatchStatus:
    site_packages: Path
    recorded: bool
    applied: tuple[str, ...]
    series: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    edited: tuple[str, ...]
    reordered: bool
    hand_edited: tuple[str, ...]
    interrupted: bool

    @property
    def series_differs(self) -> bool:
        return bool(self.added or self.removed or self.edited or self.reordered)

    @property
    def up_to_date(self) -> bool:
        return (
            self.recorded
            and not self.series_differs
            and not self.hand_edited
            and not self.interrupted
        )

    def format(self) -> str:
        where = self.site_packages
        lines = []
        if self.interrupted:
            lines.append(
                f"an apply/revert in {where} was interrupted; the next apply or revert "
                f"rolls it back. Shown below: the state before it."
            )
        if not self.recorded:
            lines.append(f"no patches are applied to {where}.")
        else:
            lines.append(f"{len(self.applied)} patches applied to {where}:")
            lines += [f"  {name}" for name in self.applied]
        for label, names in (
            ("in the series but not applied", self.added),
            ("applied but no longer in the series", self.removed),
            ("edited since they were applied", self.edited),
        ):
            if names:
                lines.append(f"{label}: {', '.join(names)}")
        if self.reordered:
            lines.append("the series order changed since it was applied.")
        if self.hand_edited:
            lines.append(f"patched files edited by hand since: {listing(list(self.hand_edited))}")
        if self.up_to_date:
            lines.append("site-packages matches the series.")
        elif self.series_differs or (not self.recorded and self.series):
            lines.append("run `make apply-patches` to bring it in line with the series.")
        return "\n".join(lines)


def status_site_packages(site_packages: Path, patches: list[Path]) -> PatchStatus:
    """Report without changing anything."""
    site = site_packages
    interrupted = journal.interrupted(site)
    if interrupted:
        # The files are mid-write: report the state the rollback will restore.
        state = journal.state_before_interruption(site)
    else:
        state = journal.read_state(site)
    series = _records(patches)
    applied = [PatchRecord(**p) for p in state["patches"]] if state else []
    applied_sha = {p.name: p.sha256 for p in applied}
    series_sha = {p.name: p.sha256 for p in series}
    common_applied = [p.name for p in applied if p.name in series_sha]
    common_series = [p.name for p in series if p.name in applied_sha]
    hand_edited = _hand_edited(site, state) if state and not interrupted else []
    return PatchStatus(
        site_packages=site,
        recorded=state is not None,
        applied=tuple(p.name for p in applied),
        series=tuple(p.name for p in series),
        added=tuple(p.name for p in series if p.name not in applied_sha),
        removed=tuple(p.name for p in applied if p.name not in series_sha),
        edited=tuple(n for n in common_series if applied_sha[n] != series_sha[n]),
        reordered=common_applied != common_series,
        hand_edited=tuple(hand_edited),
        interrupted=interrupted,
    )
