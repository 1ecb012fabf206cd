"""The patch series against Ray's `python/ray/serve`: applying it to a venv's
site-packages (all or nothing, recorded, revertible), applying it to a real Ray
checkout with `git am`, and the `build/ray-src` workspace it is edited in
(`build_workspace` imports the series as commits, `export_workspace` writes
them back as byte-stable `git format-patch` files).

Site-packages state lives in one place, `<site-packages>/.ray-patches/`:

    state.json      Ray it was applied to, patches (name + sha256), every touched file
                    (did it exist before, sha256 as written), directories the patches created
    originals/      pristine copies of the touched files that existed before
    journal/        present only while a commit is in flight (see `_commit`)

Patches are `git format-patch` files against Ray's repository, so their paths
start `a/python/`: `-p2` strips that, leaving paths relative to site-packages
(docs/architecture.md, "The patch workflow"). The pin comes from
`harness.core.pin`. Every refusal is a `HarnessError` saying what happened, what was
left untouched and what to do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import threading
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.core.errors import HarnessError
from harness.core.git import git_output, run_git
from harness.core.paths import PATCHES_DIR, SERIES_FILE, WORKSPACE_DIR
from harness.core.pin import RayRelease, check_installed, installed_ray, read_series
from harness.core.proc import output_tail
from harness.core.wheels import sha256_file

STATE_DIR_NAME = ".ray-patches"
_STATE_FORMAT = 1
_STATE_FILE = "state.json"
_ORIGINALS = "originals"
# The journal is prepared under _JOURNAL_PREP and armed by renaming it to
# _JOURNAL; a rename is atomic, so a half-written journal is never mistaken for one.
_JOURNAL_PREP = "journal.prep"
_JOURNAL = "journal"
_JOURNAL_DONE = "journal.done"
_TMP_SUFFIX = ".ray-patches-tmp"

# Paths in the patches are `a/python/ray/...`; site-packages holds `ray/...`.
_SOURCE_ROOT = "python"
# Where a Ray checkout (and the workspace, and a stand-in) keeps the serve tree.
SERVE = f"{_SOURCE_ROOT}/ray/serve"
_STRIP = 2

BASE_TAG = "base"
# A fixed identity and date make the workspace's commits, and so its hashes,
# the same on every machine and every rebuild.
_WORKSPACE_NAME = "Ray patch workspace"
_WORKSPACE_EMAIL = "workspace@ray-patches.invalid"
_WORKSPACE_DATE = "@946684800 +0000"
_MAX_LISTED = 20


# ------------------------------------------------------------------ messages


def listing(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


# -------------------------------------------------------------- reading patches


def _unquote(token: str) -> str:
    """Undo git's C-style quoting of unusual path names ("a/caf\\303\\251.py")."""
    if not (token.startswith('"') and token.endswith('"')):
        return token
    body, out, i = token[1:-1], bytearray(), 0
    simple = {
        "n": "\n",
        "t": "\t",
        '"': '"',
        "\\": "\\",
        "a": "\a",
        "b": "\b",
        "f": "\f",
        "r": "\r",
        "v": "\v",
    }
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in simple:
                out += simple[nxt].encode()
                i += 2
                continue
            if body[i + 1 : i + 4].isdigit():
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
        out += char.encode("utf-8", "surrogateescape")
        i += 1
    return out.decode("utf-8", "surrogateescape")


def _diff_git_paths(rest: str) -> list[str]:
    """Both names on a `diff --git a/X b/Y` line; unquoted names with spaces
    are only recoverable when X == Y, which is the case without ---/+++ lines."""
    if rest.startswith('"'):
        end = rest.find('"', 1)
        while end > 0 and rest[end - 1] == "\\":
            end = rest.find('"', end + 1)
        if end < 0:
            return []
        first, second = rest[: end + 1], rest[end + 1 :].strip()
        return [_unquote(first), _unquote(second)]
    mid = (len(rest) - 1) // 2
    if rest[mid] == " " and rest[:mid][2:] == rest[mid + 1 :][2:]:
        return [rest[:mid], rest[mid + 1 :]]
    return []


def patch_paths(patch: Path) -> list[str]:
    """Files a patch touches, relative to site-packages (`-p2`), in order."""
    try:
        lines = patch.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError as exc:
        raise HarnessError(f"cannot read patch {patch}: {exc}") from exc
    raw: list[str] = []
    in_header = False
    for line in lines:
        if line.startswith("diff --git "):
            in_header = True
            # Only a fallback: mode-only and binary changes have no ---/+++ lines.
            for name in _diff_git_paths(line[len("diff --git ") :]):
                raw.append(name.split("/", 1)[-1])
            continue
        if not in_header:
            continue
        if line.startswith("@@") or line.startswith("GIT binary patch"):
            # Hunk bodies follow; their lines could look like headers.
            in_header = False
        elif line.startswith(("--- ", "+++ ")):
            name = _unquote(line[4:].split("\t", 1)[0])
            if name != "/dev/null":
                raw.append(name.split("/", 1)[-1])
        elif line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            raw.append(_unquote(line.split(" ", 2)[2]))
    if not raw:
        raise HarnessError(
            f"{patch.name} contains no file changes git could read. Nothing was changed. "
            f"Regenerate it with `make export-patches` (an empty commit cannot be a patch)."
        )
    paths: list[str] = []
    for name in raw:
        parts = PurePosixPath(name).parts
        if len(parts) < _STRIP or parts[0] != _SOURCE_ROOT or ".." in parts:
            raise HarnessError(
                f"{patch.name} touches {name}, which is outside {_SOURCE_ROOT}/ and so has "
                f"no counterpart in site-packages. Nothing was changed. Keep the series to "
                f"{_SOURCE_ROOT}/ray/serve, or drop that file from the patch."
            )
        rel = "/".join(parts[1:])
        if rel not in paths:
            paths.append(rel)
    return paths


@dataclass(frozen=True)
class PatchRecord:
    name: str
    sha256: str


def _records(patches: Sequence[Path]) -> list[PatchRecord]:
    return [PatchRecord(p.name, sha256_file(p)) for p in patches]


# --------------------------------------------------------- state in site-packages


def _state_dir(site: Path) -> Path:
    return site / STATE_DIR_NAME


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise HarnessError(
            f"{path} is unreadable ({exc}); the record of applied patches is damaged. "
            f"Nothing was changed. Reinstall Ray (`make setup` after removing .venv) and "
            f"remove {path.parent}."
        ) from exc


def _read_state(site: Path) -> dict | None:
    state = _read_json(_state_dir(site) / _STATE_FILE)
    if state is not None and state.get("format") != _STATE_FORMAT:
        raise HarnessError(
            f"{_state_dir(site)} was written by another version of the harness. Nothing was "
            f"changed. Reinstall Ray (remove .venv, `make setup`) and remove that folder."
        )
    return state


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _file_sha(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() else None


def _hand_edited(site: Path, state: dict) -> list[str]:
    """Touched files whose content is no longer what the patches wrote."""
    return sorted(
        rel
        for rel, entry in state["files"].items()
        if _file_sha(site / rel) != entry["patched_sha256"]
    )


def _check_same_ray(site: Path, state: dict) -> None:
    found = installed_ray(site)
    recorded = (state["ray"]["version"], state["ray"]["commit"])
    if found is not None and tuple(found) == recorded:
        return
    now = "no Ray" if found is None else f"Ray {found[0]} (commit {found[1]})"
    created = sorted(rel for rel, e in state["files"].items() if not e["existed"])
    leftovers = f" Files the patches created may remain: {listing(created)}." if created else ""
    raise HarnessError(
        f"{_state_dir(site)} records patches applied to Ray {recorded[0]} (commit "
        f"{recorded[1]}), but {site} now holds {now}: Ray was reinstalled, which replaced "
        f"the patched files. Nothing was changed; restoring the recorded originals would mix "
        f"two Rays.{leftovers} Remove {_state_dir(site)} (and those files), then apply again."
    )


# -------------------------------------------------- signals, journal and commit


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM for the few copies of a commit and deliver them after,
    so Ctrl-C cannot stop site-packages half-written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for sig in dict.fromkeys(received):
            signal.raise_signal(sig)


def _ancestors(rel: str) -> list[str]:
    parents = PurePosixPath(rel).parents
    return [str(p) for p in parents if str(p) != "."]


def _put_file(site: Path, rel: str, source: Path) -> None:
    # Write beside the target, then rename: a reader never sees half a file.
    target = site / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + _TMP_SUFFIX)
    shutil.copyfile(source, tmp)
    shutil.copymode(source, tmp)
    os.replace(tmp, target)


def _drop_file(site: Path, rel: str) -> None:
    (site / rel).unlink(missing_ok=True)


def _remove_dirs(site: Path, dirs: Sequence[str]) -> None:
    # Deepest first; a directory someone put other files into is left alone.
    for rel in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
        path = site / rel
        shutil.rmtree(path / "__pycache__", ignore_errors=True)
        try:
            path.rmdir()
        except OSError:
            pass


def _write_targets(site: Path, targets: Mapping[str, Path | None]) -> None:
    for rel, source in sorted(targets.items()):
        if source is None:
            _drop_file(site, rel)
        else:
            _put_file(site, rel, source)


def _commit(
    site: Path,
    targets: Mapping[str, Path | None],
    remove_dirs: Sequence[str],
    new_state: dict | None,
) -> None:
    """Make site-packages hold `targets` (a file's new content, or None to delete
    it) and the state `new_state` (None: no state), as one step.

    Before anything is written, a journal records what every touched path held
    and the old state. If the commit fails, it is rolled back here; if the
    process is killed (which the deferred signals cannot hold off), the next
    `_recover` rolls it back. The journal guards against interruption, not power
    loss, so nothing is fsync'ed.
    """
    try:
        _commit_steps(site, targets, remove_dirs, new_state)
    except BaseException as exc:
        _recover(site)
        if isinstance(exc, Exception) and not isinstance(exc, HarnessError):
            raise HarnessError(
                f"writing the patched files into {site} failed ({exc}). Every file was put "
                f"back as it was. Fix the cause (disk space, permissions) and run again."
            ) from exc
        raise


def _commit_steps(
    site: Path,
    targets: Mapping[str, Path | None],
    remove_dirs: Sequence[str],
    new_state: dict | None,
) -> None:
    state_dir = _state_dir(site)
    state_dir.mkdir(exist_ok=True)
    prep = state_dir / _JOURNAL_PREP
    shutil.rmtree(prep, ignore_errors=True)
    (prep / "before").mkdir(parents=True)
    files: dict[str, bool] = {}
    for rel in targets:
        current = site / rel
        files[rel] = current.is_file()
        if files[rel]:
            backup = prep / "before" / rel
            backup.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(current, backup)
    dirs = {d for rel in targets for d in _ancestors(rel)} | set(remove_dirs)
    manifest = {
        "files": files,
        "dirs_present": sorted(d for d in dirs if (site / d).is_dir()),
        "dirs_missing": sorted(d for d in dirs if not (site / d).is_dir()),
        "state": _read_json(state_dir / _STATE_FILE),
    }
    _write_json(prep / "manifest.json", manifest)
    with signals_deferred():
        os.rename(prep, state_dir / _JOURNAL)
        _write_targets(site, targets)
        _remove_dirs(site, remove_dirs)
        if new_state is None:
            (state_dir / _STATE_FILE).unlink(missing_ok=True)
        else:
            _write_json(state_dir / _STATE_FILE, new_state)
        # Renaming the journal away is the commit point.
        os.rename(state_dir / _JOURNAL, state_dir / _JOURNAL_DONE)
    shutil.rmtree(state_dir / _JOURNAL_DONE, ignore_errors=True)


def _rollback(site: Path) -> None:
    """Undo an armed journal. Idempotent, so an interrupted rollback is simply redone."""
    journal = _state_dir(site) / _JOURNAL
    manifest = _read_json(journal / "manifest.json")
    if manifest is None:
        raise HarnessError(f"{journal} has no manifest; remove it by hand and run again.")
    for rel in manifest["dirs_present"]:
        (site / rel).mkdir(parents=True, exist_ok=True)
    for rel, existed in manifest["files"].items():
        target = site / rel
        target.with_name(target.name + _TMP_SUFFIX).unlink(missing_ok=True)
        if existed:
            _put_file(site, rel, journal / "before" / rel)
        else:
            _drop_file(site, rel)
    _remove_dirs(site, manifest["dirs_missing"])
    state_file = _state_dir(site) / _STATE_FILE
    if manifest["state"] is None:
        state_file.unlink(missing_ok=True)
    else:
        _write_json(state_file, manifest["state"])
    os.rename(journal, _state_dir(site) / _JOURNAL_DONE)
    shutil.rmtree(_state_dir(site) / _JOURNAL_DONE, ignore_errors=True)


def _recover(site: Path) -> list[str]:
    """Finish whatever an interrupted apply or revert left; returns what it did."""
    state_dir = _state_dir(site)
    if not state_dir.is_dir():
        return []
    notes = []
    if (state_dir / _JOURNAL).is_dir():
        with signals_deferred():
            _rollback(site)
        notes.append(f"an earlier apply/revert in {site} was interrupted; it was rolled back.")
    for leftover in (_JOURNAL_PREP, _JOURNAL_DONE):
        shutil.rmtree(state_dir / leftover, ignore_errors=True)
    if not (state_dir / _STATE_FILE).exists():
        # A revert that finished, or a first apply that never committed.
        shutil.rmtree(state_dir, ignore_errors=True)
    return notes


def _prune_originals(site: Path, state: dict) -> None:
    keep = {rel for rel, entry in state["files"].items() if entry["existed"]}
    root = _state_dir(site) / _ORIGINALS
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


# ----------------------------------------------------------------- applying


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
        return _state_dir(site) / _ORIGINALS / rel
    path = site / rel
    return path if path.is_file() else None


def _apply_in_stage(stage: Path, patch: Path, paths: Sequence[str]) -> None:
    result = run_git(
        ["apply", f"-p{_STRIP}", "--whitespace=nowarn", patch.resolve()],
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
    check_installed(site, release)
    notes = tuple(_recover(site))
    old = _read_state(site)
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
            originals[rel] = _original_source(site, old, rel)
            if originals[rel] is not None:
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(originals[rel], stage / rel)
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
            if (_file_sha(source) if source else None) != _file_sha(site / rel)
        }
        existing_before = {
            d
            for rel in touched
            for d in _ancestors(rel)
            if (site / d).is_dir() and d not in old_dirs
        }
        created_dirs = sorted(
            {
                d
                for rel in touched
                if results[rel] is not None and originals[rel] is None
                for d in _ancestors(rel)
                if d not in existing_before
            }
        )
        new_state = {
            "format": _STATE_FORMAT,
            "ray": {"version": release.version, "commit": installed_ray(site)[1]},
            "patches": [{"name": p.name, "sha256": p.sha256} for p in series],
            "files": {
                rel: {
                    "existed": originals[rel] is not None,
                    "patched_sha256": _file_sha(results[rel]) if results[rel] else None,
                }
                for rel in touched
            },
            "created_dirs": created_dirs,
        }
        # Back up originals before the journal is armed; the backups for files
        # the old series already touches are never rewritten.
        backups = _state_dir(site) / _ORIGINALS
        try:
            for rel in touched:
                if rel not in old_files and originals[rel] is not None:
                    (backups / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(originals[rel], backups / rel)
        except BaseException:
            _recover(site)  # drops a state folder this very call created
            raise
        remove_dirs = [d for d in old_dirs if d not in created_dirs]
        _commit(site, targets, remove_dirs, new_state)
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
    for note in _recover(site):
        print(f"patches: {note}")
    state = _read_state(site)
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
        if (_file_sha(source) if source else None) != _file_sha(site / rel)
    )
    _commit(site, {rel: targets[rel] for rel in changed}, state["created_dirs"], None)
    shutil.rmtree(_state_dir(site), ignore_errors=True)
    _drop_bytecode(site, changed)
    names = [p["name"] for p in state["patches"]]
    print(
        f"patches: reverted {len(names)} patches in {site}; "
        f"{len(changed)} files restored or removed."
    )
    return changed


# ------------------------------------------------------------------- status


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
    interrupted = (_state_dir(site) / _JOURNAL).is_dir()
    if interrupted:
        # The files are mid-write: report the state the rollback will restore.
        manifest = _read_json(_state_dir(site) / _JOURNAL / "manifest.json") or {}
        state = manifest.get("state")
    else:
        state = _read_state(site)
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


# ------------------------------------------------------- a real Ray checkout


def _operation_in_progress(repo: Path, isolated: bool) -> str | None:
    for name, what in (
        ("rebase-apply", "a `git am` or rebase"),
        ("rebase-merge", "a rebase"),
        ("MERGE_HEAD", "a merge"),
        ("CHERRY_PICK_HEAD", "a cherry-pick"),
    ):
        path = git_output(["rev-parse", "--git-path", name], repo, isolated=isolated).strip()
        if (repo / path).exists():
            return what
    return None


def _porcelain_status(repo: Path, isolated: bool) -> list[str]:
    out = git_output(["status", "--porcelain"], repo, isolated=isolated)
    return [line[3:] for line in out.splitlines() if line.strip()]


def _failed_patch(output: str, patches: Sequence[Path]) -> str:
    match = re.search(r"Patch failed at (\d+)", output)
    if match and 0 < int(match.group(1)) <= len(patches):
        index = int(match.group(1))
        return f"{patches[index - 1].name} (patch {index} of {len(patches)})"
    return "one of the patches"


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
    busy = _operation_in_progress(repo, isolated=False)
    if busy:
        raise HarnessError(
            f"{repo} is in the middle of {busy}. Nothing was changed. Finish or abort it "
            f"first (e.g. `git am --abort`), then run again."
        )
    return repo


def refuse_dirty(repo: Path) -> None:
    dirty = _porcelain_status(repo, isolated=False)
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
        extract_from_wheel(wheel, repo / _SOURCE_ROOT)
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
    am = ["am", "--3way", "--keep-cr", "--keep-non-patch", *(p.resolve() for p in patches)]
    try:
        result = run_git(am, repo, isolated=False)
    except KeyboardInterrupt:
        run_git(["am", "--abort"], repo, isolated=False)
        raise
    if result.returncode == 0:
        return CheckoutResult(repo, head, why, len(patches), already=False)
    output = output_tail(result)
    run_git(["am", "--abort"], repo, isolated=False)
    now = git_output(["rev-parse", "HEAD"], repo, isolated=False).strip()
    left = _porcelain_status(repo, isolated=False)
    if now == head and not left:
        untouched = f"`git am --abort` put {repo} back at {head}, clean."
    else:
        untouched = (
            f"WARNING: after `git am --abort`, {repo} is at {now} with changes in "
            f"{listing(left) or 'no files'}; check it by hand (original HEAD: {head})."
        )
    raise HarnessError(
        f"{_failed_patch(output, patches)} does not apply to {repo}:\n{output}\n{untouched} "
        f"Rebase that patch in the workspace, export, and run again."
    )


# ------------------------------------------------------------------ workspace


_SERVE_PREFIX = "ray/serve/"


def extract_from_wheel(wheel: Path, root: Path, prefixes: Sequence[str] = (_SERVE_PREFIX,)) -> int:
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


def _format_patches(workspace: Path, out_dir: Path) -> list[Path]:
    out = git_output([*_FORMAT_PATCH, "-o", out_dir, f"{BASE_TAG}..HEAD"], workspace)
    return [Path(line) for line in out.splitlines() if line.strip()]


def _check_workspace(workspace: Path, action: str) -> None:
    if not (workspace / ".git").exists():
        raise HarnessError(
            f"{workspace} exists but is not a patch workspace (no git repository). Nothing "
            f"was changed. Move it away, then {action} again."
        )
    busy = _operation_in_progress(workspace, isolated=True)
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
    dirty = _porcelain_status(workspace, isolated=True)
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
        unsaved = [_patch_subject(p) for p in exported if p.read_bytes() not in saved]
        if unsaved:
            raise HarnessError(
                f"{workspace} holds commits that patches/ does not: {listing(unsaved)}. "
                f"Nothing was changed. Run `make export-patches` to keep them, or delete "
                f"{workspace} to discard them, then run `make workspace` again."
            )


def _patch_subject(patch: Path) -> str:
    for line in patch.read_text(errors="replace").splitlines():
        if line.startswith("Subject: "):
            return line[len("Subject: ") :]
    return patch.name


def build_workspace(wheel: Path, patches: list[Path], workspace: Path = WORKSPACE_DIR) -> None:
    """(Re)create the workspace: commit 1 is the wheel's ray/serve tree at
    python/ray/serve (tagged `base`), then one commit per patch."""
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
        count = extract_from_wheel(wheel, fresh / _SOURCE_ROOT)
        git_output(["add", "--all"], fresh)
        message = (
            f"Import {_SOURCE_ROOT}/{_SERVE_PREFIX.rstrip('/')} from {wheel.name}\n\n"
            f"{count} files, as the wheel ships them.\n"
        )
        git_output(["commit", "--quiet", "--no-verify", "-m", message], fresh, identity=True)
        git_output(["tag", BASE_TAG], fresh)
        if patches:
            am = [
                "am",
                "--keep-cr",
                "--keep-non-patch",
                "--committer-date-is-author-date",
                *(p.resolve() for p in patches),
            ]
            result = run_git(am, fresh, identity=True)
            if result.returncode != 0:
                raise HarnessError(
                    f"{_failed_patch(output_tail(result), patches)} does not apply to the wheel's "
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


def export_workspace(
    workspace: Path = WORKSPACE_DIR, patches_dir: Path = PATCHES_DIR
) -> list[Path]:
    """Write base..HEAD as patch files into patches_dir and rewrite its series."""
    if not workspace.is_dir():
        raise HarnessError(f"{workspace} does not exist; run `make workspace` first.")
    _check_workspace(workspace, "export")
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
    patches_dir.mkdir(parents=True, exist_ok=True)
    series_file = patches_dir / SERIES_FILE.name
    old = {p for p in patches_dir.iterdir() if _NUMBERED.match(p.name)}
    try:
        old |= set(read_series(series_file))
    except HarnessError:
        pass  # a series naming missing files is exactly what the export rewrites
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="ray-patches-export-") as tmp:
        for fresh in _format_patches(workspace, Path(tmp)):
            target = patches_dir / fresh.name
            # Unchanged files keep their mtime, so make and editors see no change.
            if not target.is_file() or target.read_bytes() != fresh.read_bytes():
                shutil.copyfile(fresh, target)
            written.append(target)
    for stale in sorted(old - set(written)):
        stale.unlink(missing_ok=True)
    lines = _series_header(series_file) + [p.name for p in written]
    tmp_series = series_file.with_name(series_file.name + _TMP_SUFFIX)
    tmp_series.write_text("\n".join(lines) + "\n" if lines else "")
    os.replace(tmp_series, series_file)
    return written
