"""The overlay lays the tree's dashboard panels over the installed Ray too: a
patch's panel test must see the panels it patched, not the installed ones."""

from pathlib import Path

from harness.patches.overlay import serve_overlay
from harness.patches.workspace import SERVE_PANELS

DASHBOARDS = Path(SERVE_PANELS).parent


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _installed(site: Path) -> None:
    _write(site / "ray" / "__init__.py", "")
    _write(site / "ray" / "serve" / "__init__.py", "")
    _write(site / SERVE_PANELS, "PANELS = 'installed'\n")
    _write(site / DASHBOARDS / "other_panels.py", "OTHER = 1\n")
    _write(site / "ray" / "dashboard" / "__init__.py", "")


def test_the_trees_panels_are_laid_over_and_nothing_else_changes(tmp_path: Path) -> None:
    site, tree = tmp_path / "site", tmp_path / "tree" / "python"
    _installed(site)
    _write(tree / "ray" / "serve" / "__init__.py", "")
    _write(tree / SERVE_PANELS, "PANELS = 'patched'\n")

    with serve_overlay(site, tree / "ray" / "serve", tmp_path) as root:
        assert (root / SERVE_PANELS).read_text() == "PANELS = 'patched'\n"
        assert not (root / SERVE_PANELS).is_symlink()
        # Its neighbours, and the rest of the dashboard, are the installed ones.
        other = root / DASHBOARDS / "other_panels.py"
        assert other.readlink() == site / DASHBOARDS / "other_panels.py"
        init = root / "ray" / "dashboard" / "__init__.py"
        assert init.readlink() == site / "ray" / "dashboard" / "__init__.py"
    assert (site / SERVE_PANELS).read_text() == "PANELS = 'installed'\n"


def test_a_tree_without_panels_keeps_the_installed_dashboard(tmp_path: Path) -> None:
    site, tree = tmp_path / "site", tmp_path / "tree" / "python"
    _installed(site)
    _write(tree / "ray" / "serve" / "__init__.py", "")

    with serve_overlay(site, tree / "ray" / "serve", tmp_path) as root:
        assert (root / "ray" / "dashboard").readlink() == site / "ray" / "dashboard"
