"""The record a site-packages keeps of the series applied to it, and the
journal that makes every change to it all or nothing.

It all lives in one place, `<site-packages>/.ray-patches/`:

    state.json      Ray it was applied to, patches (name + sha256), every touched file
                    (did it exist before, sha256 as written), directories the patches created
    originals/      pristine copies of the touched files that existed before
    journal/        present only while a commit is in flight (see `commit`)

`commit` writes files and state as one step; `recover` rolls back a commit a
killed process left armed. What to write is `harness.patches.installed`'s to
decide.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from harness.core.errors import HarnessError
from harness.core.wheels import sha256_file

STATE_DIR_NAME = ".ray-patches"
STATE_FORMAT = 1
_STATE_FILE = "state.json"
_ORIGINALS = "originals"
# The journal is prepared under _JOURNAL_PREP and armed by renaming it to
# _JOURNAL; a rename is atomic, so a half-written journal is never mistaken for one.
_JOURNAL_PREP = "journal.prep"
_JOURNAL = "journal"
_JOURNAL_DONE = "journal.done"
_TMP_SUFFIX = ".ray-patches-tmp"


def state_dir(site: Path) -> Path:
    return site / STATE_DIR_NAME


def originals_dir(site: Path) -> Path:
    """Where the pristine copies of the touched files that existed are kept."""
    return state_dir(site) / _ORIGINALS


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


def read_state(site: Path) -> dict | None:
    """The recorded state, None when nothing is applied."""
    state = _read_json(state_dir(site) / _STATE_FILE)
    if state is not None and state.get("format") != STATE_FORMAT:
        raise HarnessError(
            f"{state_dir(site)} was written by another version of the harness. Nothing was "
            f"changed. Reinstall Ray (remove .venv, `make setup`) and remove that folder."
        )
    return state


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def file_sha(path: Path) -> str | None:
    """A file's sha256, None when there is no such file."""
    return sha256_file(path) if path.is_file() else None


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
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


def ancestors(rel: str) -> list[str]:
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


def interrupted(site: Path) -> bool:
    """An apply or revert was killed in its commit: the journal is still armed."""
    return (state_dir(site) / _JOURNAL).is_dir()


def state_before_interruption(site: Path) -> dict | None:
    """The state the rollback of an armed journal will restore."""
    manifest = _read_json(state_dir(site) / _JOURNAL / "manifest.json") or {}
    return manifest.get("state")


def commit(
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
    `recover` rolls it back. The journal guards against interruption, not power
    loss, so nothing is fsync'ed.
    """
    try:
        _commit_steps(site, targets, remove_dirs, new_state)
    except BaseException as exc:
        recover(site)
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
    folder = state_dir(site)
    folder.mkdir(exist_ok=True)
    prep = folder / _JOURNAL_PREP
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
    dirs = {d for rel in targets for d in ancestors(rel)} | set(remove_dirs)
    manifest = {
        "files": files,
        "dirs_present": sorted(d for d in dirs if (site / d).is_dir()),
        "dirs_missing": sorted(d for d in dirs if not (site / d).is_dir()),
        "state": _read_json(folder / _STATE_FILE),
    }
    _write_json(prep / "manifest.json", manifest)
    with signals_deferred():
        os.rename(prep, folder / _JOURNAL)
        _write_targets(site, targets)
        _remove_dirs(site, remove_dirs)
        if new_state is None:
            (folder / _STATE_FILE).unlink(missing_ok=True)
        else:
            _write_json(folder / _STATE_FILE, new_state)
        # Renaming the journal away is the commit point.
        os.rename(folder / _JOURNAL, folder / _JOURNAL_DONE)
    shutil.rmtree(folder / _JOURNAL_DONE, ignore_errors=True)


def _rollback(site: Path) -> None:
    """Undo an armed journal. Idempotent, so an interrupted rollback is simply redone."""
    journal = state_dir(site) / _JOURNAL
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
    state_file = state_dir(site) / _STATE_FILE
    if manifest["state"] is None:
        state_file.unlink(missing_ok=True)
    else:
        _write_json(state_file, manifest["state"])
    os.rename(journal, state_dir(site) / _JOURNAL_DONE)
    shutil.rmtree(state_dir(site) / _JOURNAL_DONE, ignore_errors=True)


def recover(site: Path) -> list[str]:
    """Finish whatever an interrupted apply or revert left; returns what it did."""
    folder = state_dir(site)
    if not folder.is_dir():
        return []
    notes = []
    if (folder / _JOURNAL).is_dir():
        with signals_deferred():
            _rollback(site)
        notes.append(f"an earlier apply/revert in {site} was interrupted; it was rolled back.")
    for leftover in (_JOURNAL_PREP, _JOURNAL_DONE):
        shutil.rmtree(folder / leftover, ignore_errors=True)
    if not (folder / _STATE_FILE).exists():
        # A revert that finished, or a first apply that never committed.
        shutil.rmtree(folder, ignore_errors=True)
    return notes
