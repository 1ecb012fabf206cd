"""A serve tree laid over an installed Ray without writing to it.

The overlay is a scratch folder holding a `ray` package whose entries are
symlinks into the installed `ray`, except `serve`, which is a copy of the tree
under test (optionally with some of its files replaced), and Serve's dashboard
panels, which the tree carries beside it (the series adds panels). Put first on
PYTHONPATH, it makes Ray's compiled core and every dependency exactly what is
installed and `ray.serve` exactly the copy; the installed tree is only ever
read. Each overlay is its own folder, so any number can be used at once.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from harness.core.errors import HarnessError
from harness.patches.workspace import SERVE_PANELS

_SERVE = PurePosixPath("ray/serve")


@contextmanager
def serve_overlay(
    site: Path,
    serve_tree: Path,
    scratch: Path | None = None,
    replacing: Mapping[str, str] | None = None,
    bytecode: bool = False,
) -> Iterator[Path]:
    """A new overlay folder under `scratch` (the system's temp folder if None):
    `serve_tree` as `ray.serve` over the `ray` installed in `site`. `replacing`
    maps site-packages-relative paths inside `ray/serve/` to the text their
    copy gets instead. `bytecode` copies the tree's `__pycache__` folders too,
    which spares every run compiling the unchanged files again. Yields the
    folder, which goes first on PYTHONPATH, and removes it on exit."""
    root = Path(tempfile.mkdtemp(prefix="overlay-", dir=scratch))
    try:
        package = root / "ray"
        package.mkdir()
        for entry in (site / "ray").iterdir():
            if entry.name != "serve":
                (package / entry.name).symlink_to(entry)
        shutil.copytree(
            serve_tree,
            package / "serve",
            symlinks=True,
            # A tree just edited (a workspace after `git am`) can hold a .pyc
            # written in the same second its source changed, which Python's
            # mtime check takes for current; only a caller that knows the
            # bytecode matches (an installed tree) asks for it. The copies keep
            # their sources' mtimes, so that check still holds for them.
            ignore=None if bytecode else shutil.ignore_patterns("__pycache__"),
        )
        panels = serve_tree.parent.parent / SERVE_PANELS
        if panels.is_file():
            _lay_file(root, site, PurePosixPath(SERVE_PANELS), panels)
        for rel, text in (replacing or {}).items():
            _replace(root, rel, text)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _lay_file(root: Path, site: Path, rel: PurePosixPath, source: Path) -> None:
    """`source` as `rel` (a file of the installed `ray` outside `serve`): each
    folder on its way becomes a folder of links to the installed one's entries,
    so only that file differs from what is installed."""
    installed, laid = site, root
    for part in rel.parts[:-1]:
        installed, laid = installed / part, laid / part
        if laid.is_symlink():
            laid.unlink()
            laid.mkdir()
            for entry in installed.iterdir():
                (laid / entry.name).symlink_to(entry)
    target = laid / rel.name
    target.unlink(missing_ok=True)
    shutil.copyfile(source, target)


def _replace(root: Path, rel: str, text: str) -> None:
    path = PurePosixPath(rel)
    if _SERVE not in path.parents or ".." in path.parts:
        raise HarnessError(
            f"{rel} is not inside {_SERVE}/: only the copied serve tree of an overlay "
            f"can be replaced, everything else is the installed Ray itself."
        )
    target = root / path
    if not target.is_file():
        raise HarnessError(
            f"{rel} is not a file of the serve tree being overlaid, so there is "
            f"nothing to replace. Check the path."
        )
    # A new file rather than a write into the copy: should the copy be a
    # symlink, the write must not go through it to the tree it points at.
    target.unlink()
    target.write_text(text, encoding="utf-8")
    # Its bytecode is of the text replaced: not left to the mtime check, which
    # a replacement of the same size written in the same second would pass.
    for compiled in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
        compiled.unlink()
