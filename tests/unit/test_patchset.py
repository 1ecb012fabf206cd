"""Unit tests for harness.patches (the site-packages apply and its journal, the
Ray checkout, the workspace and its export): small fake site-packages trees, small git
repos and a tiny fake wheel, all under tmp_path. No network, no docker."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from pinned_tree import COMMIT, RELEASE, REPLICA, ROUTER, isolate_git

from harness.core.errors import HarnessError
from harness.core.git import WORKSPACE_AUTHOR
from harness.core.paths import ROOT
from harness.core.pin import RayRelease, read_series
from harness.patches import journal, patch_files
from harness.patches.checkout import apply_to_checkout
from harness.patches.installed import (
    apply_to_site_packages,
    revert_site_packages,
    status_site_packages,
)
from harness.patches.workspace import (
    build_workspace,
    export_differences,
    export_workspace,
    fresh_export_differences,
)

CREATED_TEST = "ray/serve/tests/unit/test_drain.py"

SERVE_FILES = {
    "ray/serve/__init__.py": "from ray.serve.api import run\n",
    "ray/serve/api.py": "def run(app):\n    return app\n",
    REPLICA: "".join(f"line {i}\n" for i in range(1, 31)),
    ROUTER: "class Router:\n    def choose(self, replicas):\n        return replicas[0]\n",
}


@pytest.fixture(autouse=True)
def _git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tests' own git calls (and apply_to_checkout, which uses the user's
    # config) must not depend on whoever runs them.
    isolate_git(monkeypatch, date="2025-03-04T05:06:07+0100")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def tree_hash(root: Path) -> str:
    """sha256 over every relative path (directories too) and every file's bytes."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<dir>")
        digest.update(b"\0")
    return digest.hexdigest()


def write_files(root: Path, files: dict[str, str | None]) -> None:
    for rel, text in files.items():
        path = root / rel
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def replica_with(**lines: str) -> str:
    text = SERVE_FILES[REPLICA].splitlines(keepends=True)
    for key, value in lines.items():
        text[int(key.removeprefix("l")) - 1] = value
    return "".join(text)


def source_repo(root: Path) -> Path:
    """A git repo holding SERVE_FILES at python/ray/serve, tagged `base`."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    write_files(root / "python", dict(SERVE_FILES))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "tag", "base")
    return root


def commit(repo: Path, message: str, changes: dict[str, str | None]) -> None:
    write_files(repo / "python", changes)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


STEP_1 = (
    "[Serve] Drain replicas in two phases\n\nStop routing first, then stop the replica.\n",
    {
        REPLICA: replica_with(l5="line 5 # drain: stop routing\n"),
        CREATED_TEST: "def test_drain():\n    assert True\n",
    },
)
STEP_2 = (
    "[Serve] Router skips draining replicas\n",
    {
        ROUTER: "class Router:\n    def choose(self, replicas):\n"
        "        return [r for r in replicas if not r.draining][0]\n",
        REPLICA: replica_with(l5="line 5 # drain: stop routing\n", l25="line 25 # draining flag\n"),
    },
)
# Written against the base, it rewrites the line step 1 already changed.
CONFLICT = ("[Serve] Conflicting change\n", {REPLICA: replica_with(l5="line 5 # other\n")})


@pytest.fixture
def series(tmp_path: Path) -> list[Path]:
    """Three patches: two that apply in order, and a third that does not."""
    repo = source_repo(tmp_path / "src")
    for message, changes in (STEP_1, STEP_2):
        commit(repo, message, changes)
    good = export_workspace(repo, tmp_path / "patches")
    other = source_repo(tmp_path / "other")
    commit(other, *CONFLICT)
    (bad,) = export_workspace(other, tmp_path / "other-patches")
    third = tmp_path / "patches" / "0003-Serve-Conflicting-change.patch"
    third.write_bytes(bad.read_bytes())
    return [*good, third]


def fake_site(root: Path, version: str = "2.60.0", commit_id: str = COMMIT) -> Path:
    files = {
        "ray/__init__.py": "",
        "ray/_version.py": f'version = "{version}"\ncommit = "{commit_id}"\n',
        "ray/dashboard/app.py": "# not touched by the series\n",
        **SERVE_FILES,
    }
    write_files(root, dict(files))
    return root


# ------------------------------------------------------------- site-packages


def test_all_or_nothing_when_third_patch_fails(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site")
    before = tree_hash(site)
    with pytest.raises(HarnessError) as err:
        apply_to_site_packages(site, series, RELEASE)
    assert tree_hash(site) == before
    message = str(err.value)
    assert series[2].name in message
    assert REPLICA in message
    assert "Nothing was changed" in message


def test_failing_new_series_keeps_the_applied_one(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site")
    apply_to_site_packages(site, series[:1], RELEASE)
    applied = tree_hash(site)
    with pytest.raises(HarnessError, match=series[2].name):
        apply_to_site_packages(site, series, RELEASE)
    assert tree_hash(site) == applied
    assert status_site_packages(site, series[:1]).up_to_date


def test_apply_then_second_apply_is_noop(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site")
    first = apply_to_site_packages(site, series[:2], RELEASE)
    assert not first.already_applied
    assert set(first.changed) == {REPLICA, ROUTER, CREATED_TEST}
    assert (site / CREATED_TEST).is_file()
    assert "draining" in (site / ROUTER).read_text()
    applied = tree_hash(site)
    second = apply_to_site_packages(site, series[:2], RELEASE)
    assert second.already_applied
    assert "already applied" in second.format()
    assert tree_hash(site) == applied


def test_revert_restores_tree_exactly(
    tmp_path: Path, series: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    site = fake_site(tmp_path / "site")
    before = tree_hash(site)
    apply_to_site_packages(site, series[:2], RELEASE)
    assert tree_hash(site) != before
    reverted = revert_site_packages(site)
    assert set(reverted) == {REPLICA, ROUTER, CREATED_TEST}
    assert tree_hash(site) == before
    assert not (site / "ray/serve/tests").exists()
    assert revert_site_packages(site) == []
    assert "nothing is applied" in capsys.readouterr().out


def test_changed_series_swaps_to_exactly_the_new_one(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site")
    before = tree_hash(site)
    apply_to_site_packages(site, series[:2], RELEASE)
    swapped = apply_to_site_packages(site, series[:1], RELEASE)
    assert swapped.replaced == (series[0].name, series[1].name)
    fresh = fake_site(tmp_path / "fresh")
    apply_to_site_packages(fresh, series[:1], RELEASE)
    assert tree_hash(site) == tree_hash(fresh)
    revert_site_packages(site)
    assert tree_hash(site) == before


def test_edited_patch_is_reported_and_reapplied(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site")
    apply_to_site_packages(site, series[:2], RELEASE)
    text = series[1].read_text().replace("Router skips", "Router now skips")
    series[1].write_text(text)
    status = status_site_packages(site, series[:2])
    assert status.edited == (series[1].name,)
    assert not status.up_to_date
    assert "edited since they were applied" in status.format()
    result = apply_to_site_packages(site, series[:2], RELEASE)
    assert not result.already_applied
    assert status_site_packages(site, series[:2]).up_to_date


def test_status_reports_added_and_removed_patches(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site")
    assert not status_site_packages(site, series[:1]).recorded
    apply_to_site_packages(site, series[:1], RELEASE)
    assert status_site_packages(site, series[:2]).added == (series[1].name,)
    apply_to_site_packages(site, series[:2], RELEASE)
    status = status_site_packages(site, series[:1])
    assert status.removed == (series[1].name,)
    assert status.applied == (series[0].name, series[1].name)


def test_hand_edit_is_detected_and_protected(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site")
    before = tree_hash(site)
    apply_to_site_packages(site, series[:2], RELEASE)
    (site / ROUTER).write_text("# edited by hand\n")
    status = status_site_packages(site, series[:2])
    assert status.hand_edited == (ROUTER,)
    assert ROUTER in status.format()
    edited = tree_hash(site)
    with pytest.raises(HarnessError, match=ROUTER):
        apply_to_site_packages(site, series[:1], RELEASE)
    with pytest.raises(HarnessError, match=ROUTER):
        revert_site_packages(site)
    assert tree_hash(site) == edited
    revert_site_packages(site, force=True)
    assert tree_hash(site) == before


def test_wrong_ray_version_is_refused(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site", version="2.59.0")
    before = tree_hash(site)
    with pytest.raises(HarnessError) as err:
        apply_to_site_packages(site, series[:2], RELEASE)
    assert "2.59.0" in str(err.value) and "2.60.0" in str(err.value)
    assert tree_hash(site) == before


def test_empty_series_is_recorded(tmp_path: Path) -> None:
    site = fake_site(tmp_path / "site")
    before = tree_hash(site)
    result = apply_to_site_packages(site, [], RELEASE)
    assert result.changed == () and "empty" in result.format()
    assert status_site_packages(site, []).up_to_date
    assert apply_to_site_packages(site, [], RELEASE).already_applied
    assert revert_site_packages(site) == []
    assert tree_hash(site) == before


_KILL_DURING_COMMIT = """
import os, sys
from pathlib import Path
from harness.patches import installed, journal
from harness.core.pin import RayRelease

real_put, calls = journal._put_file, []

def dying_put(site, rel, source):
    calls.append(rel)
    if len(calls) == 2:
        os._exit(9)  # a kill: no handler, no finally, no rollback
    real_put(site, rel, source)

journal._put_file = dying_put
site, *patches = map(Path, sys.argv[1:])
release = RayRelease(version="2.60.0", wheel="ray.whl", sha256="0" * 64, commit=%r)
installed.apply_to_site_packages(site, patches, release)
"""


def test_killed_commit_is_rolled_back_next_time(tmp_path: Path, series: list[Path]) -> None:
    site = fake_site(tmp_path / "site")
    before = tree_hash(site)
    killed = subprocess.run(
        [sys.executable, "-c", _KILL_DURING_COMMIT % COMMIT, site, *series[:2]],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == 9, killed.stderr
    assert tree_hash(site) != before  # half-written, journal armed
    assert status_site_packages(site, series[:2]).interrupted
    result = apply_to_site_packages(site, series[:2], RELEASE)
    assert any("interrupted" in note for note in result.notes)
    fresh = fake_site(tmp_path / "fresh")
    apply_to_site_packages(fresh, series[:2], RELEASE)
    assert tree_hash(site) == tree_hash(fresh)
    revert_site_packages(site)
    assert tree_hash(site) == before


def test_failed_write_is_rolled_back_at_once(
    tmp_path: Path, series: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    site = fake_site(tmp_path / "site")
    before = tree_hash(site)
    real_put = journal._put_file
    calls = []

    def failing_put(site_: Path, rel: str, source: Path) -> None:
        calls.append(rel)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_put(site_, rel, source)

    monkeypatch.setattr(journal, "_put_file", failing_put)
    with pytest.raises(HarnessError, match="put back"):
        apply_to_site_packages(site, series[:2], RELEASE)
    assert tree_hash(site) == before


def test_sigint_is_deferred_during_commit() -> None:
    # Ctrl-C as an interactive run has it: a test run started with SIGINT
    # ignored (a background job) would pass that on, and nothing would raise.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    reached_end = False
    try:
        with pytest.raises(KeyboardInterrupt):
            with journal.signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                reached_end = True
    finally:
        signal.signal(signal.SIGINT, before)
    assert reached_end


def test_patch_paths_strip_to_site_packages(series: list[Path]) -> None:
    assert patch_files.patch_paths(series[0]) == [REPLICA, CREATED_TEST]


# ---------------------------------------------------------------- checkout


def ray_checkout(root: Path) -> tuple[Path, RayRelease]:
    repo = source_repo(root)
    head = git(repo, "rev-parse", "HEAD")
    release = RayRelease(version="2.60.0", wheel="ray.whl", sha256="0" * 64, commit=head)
    return repo, release


def test_checkout_refuses_wrong_head(tmp_path: Path, series: list[Path]) -> None:
    repo, _ = ray_checkout(tmp_path / "ray")
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(HarnessError) as err:
        apply_to_checkout(repo, series[:2], RELEASE)
    assert head in str(err.value) and COMMIT in str(err.value)
    assert git(repo, "rev-parse", "HEAD") == head


def test_checkout_refuses_dirty_tree(tmp_path: Path, series: list[Path]) -> None:
    repo, release = ray_checkout(tmp_path / "ray")
    (repo / "python" / ROUTER).write_text("# local change\n")
    with pytest.raises(HarnessError, match=f"python/{ROUTER}"):
        apply_to_checkout(repo, series[:2], release)
    assert git(repo, "rev-parse", "HEAD") == release.commit


def test_checkout_applies_cleanly(tmp_path: Path, series: list[Path]) -> None:
    repo, release = ray_checkout(tmp_path / "ray")
    apply_to_checkout(repo, series[:2], release)
    subjects = git(repo, "log", "--format=%s", f"{release.commit}..HEAD").splitlines()
    assert subjects == [
        "[Serve] Router skips draining replicas",
        "[Serve] Drain replicas in two phases",
    ]
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "python" / CREATED_TEST).is_file()


def test_checkout_commits_are_the_users_with_their_sign_off(
    tmp_path: Path, series: list[Path]
) -> None:
    repo, release = ray_checkout(tmp_path / "ray")
    apply_to_checkout(repo, series[:2], release)
    for commit in ("HEAD", "HEAD~1"):
        assert git(repo, "log", "-1", "--format=%an <%ae>", commit) == (
            "Zoë Developer <zoe@users.noreply.github.com>"
        )
        trailers = git(repo, "log", "-1", "--format=%(trailers:key=Signed-off-by)", commit)
        assert trailers.strip() == "Signed-off-by: Zoë Developer <zoe@users.noreply.github.com>"


@pytest.mark.parametrize(
    "email",
    [
        "zoe@example.com",
        "maintainers@users.noreply.a-seed-b411223f.example",
        "workspace@ray-patches.invalid",
        "zoe@mail.example.org",
        "zoe@localhost",
        "zoe",
    ],
)
def test_checkout_refuses_a_placeholder_identity(
    tmp_path: Path, series: list[Path], monkeypatch, email: str
) -> None:
    repo, release = ray_checkout(tmp_path / "ray")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", email)
    with pytest.raises(HarnessError, match="user.email") as err:
        apply_to_checkout(repo, series[:2], release)
    assert "Nothing was changed" in str(err.value)
    assert git(repo, "rev-parse", "HEAD") == release.commit
    assert git(repo, "status", "--porcelain") == ""


def test_an_address_that_only_ends_like_a_reserved_one_is_taken(
    tmp_path: Path, monkeypatch
) -> None:
    from harness.core.git import contributor_identity

    repo, _ = ray_checkout(tmp_path / "ray")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "zoe@notexample.com")
    assert contributor_identity(repo) == ("Zoë Developer", "zoe@notexample.com")


def test_checkout_failed_am_leaves_checkout_as_it_was(tmp_path: Path, series: list[Path]) -> None:
    repo, release = ray_checkout(tmp_path / "ray")
    with pytest.raises(HarnessError) as err:
        apply_to_checkout(repo, series, release)
    assert series[2].name in str(err.value)
    assert git(repo, "rev-parse", "HEAD") == release.commit
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git" / "rebase-apply").exists()


def standin(tmp_path: Path) -> tuple[Path, Path]:
    """The pinned wheel and a stand-in checkout built from it, as `python -m
    harness upstream standin` builds one."""
    from harness.upstream.branches import build_standin

    wheel = fake_wheel(tmp_path / "ray-2.60.0-py3-none-any.whl")
    return wheel, build_standin(wheel, tmp_path / "ray-standin")


def test_checkout_accepts_the_stand_in(tmp_path: Path, series: list[Path]) -> None:
    wheel, repo = standin(tmp_path)
    base = git(repo, "rev-parse", "HEAD")
    result = apply_to_checkout(repo, series[:2], RELEASE, wheel)
    assert not result.already and "stand-in" in result.why and result.base == base
    assert git(repo, "log", "--format=%s", f"{base}..HEAD").splitlines() == [
        "[Serve] Router skips draining replicas",
        "[Serve] Drain replicas in two phases",
    ]
    assert "2 patches applied" in result.format()


def test_checkout_without_the_wheel_is_not_taken_for_a_stand_in(
    tmp_path: Path, series: list[Path]
) -> None:
    _, repo = standin(tmp_path)
    with pytest.raises(HarnessError, match="upstream standin"):
        apply_to_checkout(repo, series[:2], RELEASE)


@pytest.mark.parametrize("kind", ["stand-in", "pinned commit"])
def test_checkout_second_apply_is_a_no_op(tmp_path: Path, series: list[Path], kind: str) -> None:
    if kind == "stand-in":
        wheel, repo = standin(tmp_path)
        release = RELEASE
    else:
        wheel, (repo, release) = None, ray_checkout(tmp_path / "ray")
    base = git(repo, "rev-parse", "HEAD")
    apply_to_checkout(repo, series[:2], release, wheel)
    head = git(repo, "rev-parse", "HEAD")
    again = apply_to_checkout(repo, series[:2], release, wheel)
    assert again.already and again.base == base and again.count == 2
    assert git(repo, "rev-parse", "HEAD") == head
    assert again.format().endswith("nothing to do")


def test_checkout_with_only_part_of_the_series_is_refused(
    tmp_path: Path, series: list[Path]
) -> None:
    wheel, repo = standin(tmp_path)
    apply_to_checkout(repo, series[:1], RELEASE, wheel)
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(HarnessError, match=f"is at {head}, which is neither"):
        apply_to_checkout(repo, series[:2], RELEASE, wheel)
    assert git(repo, "rev-parse", "HEAD") == head


def test_checkout_carrying_the_series_off_the_pin_is_refused(
    tmp_path: Path, series: list[Path]
) -> None:
    repo, release = ray_checkout(tmp_path / "ray")
    commit(repo, "upstream moved on", {"ray/serve/api.py": "def run(app):\n    return 1\n"})
    moved = git(repo, "rev-parse", "HEAD")
    apply_to_checkout(repo, series[:2], replace(release, commit=moved))
    with pytest.raises(HarnessError, match=f"series, but on {moved}"):
        apply_to_checkout(repo, series[:2], release)


def _patches_apply(monkeypatch, wheel: Path, repo: Path, series: list[Path]) -> int:
    """`RAY_SRC=repo python -m harness patches apply` with this series and wheel."""
    import signal

    import harness.cli as cli
    import harness.core.pin
    import harness.core.wheels

    monkeypatch.setenv("RAY_SRC", str(repo))
    monkeypatch.setattr(harness.core.pin, "read_series", lambda: series)
    monkeypatch.setattr(harness.core.wheels, "ensure_wheelhouse", lambda release: wheel.parent)
    monkeypatch.setattr(harness.core.wheels, "verify_ray_wheel", lambda house, release: wheel)
    before = signal.getsignal(signal.SIGTERM)
    try:
        return cli.main(["patches", "apply"])
    finally:
        signal.signal(signal.SIGTERM, before)


def test_make_apply_patches_on_the_stand_in_twice(
    monkeypatch, capsys, tmp_path: Path, series: list[Path]
) -> None:
    wheel, repo = standin(tmp_path)
    assert _patches_apply(monkeypatch, wheel, repo, series[:2]) == 0
    assert "2 patches applied" in capsys.readouterr().out
    head = git(repo, "rev-parse", "HEAD")
    assert _patches_apply(monkeypatch, wheel, repo, series[:2]) == 0
    assert "already carries the series" in capsys.readouterr().out
    assert git(repo, "rev-parse", "HEAD") == head


def test_make_apply_patches_with_a_bad_ray_src_is_2(
    monkeypatch, capsys, tmp_path: Path, series: list[Path]
) -> None:
    wheel = fake_wheel(tmp_path / "ray-2.60.0-py3-none-any.whl")
    assert _patches_apply(monkeypatch, wheel, tmp_path / "nowhere", series[:2]) == 2
    assert "does not exist; set RAY_SRC" in capsys.readouterr().err


# --------------------------------------------------------------- workspace


def fake_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for rel, text in SERVE_FILES.items():
            archive.writestr(rel, text)
        archive.writestr("ray/_version.py", 'version = "2.60.0"\n')
        archive.writestr("ray/dashboard/app.py", "# not serve\n")
        archive.writestr("ray-2.60.0.dist-info/METADATA", "Name: ray\n")
    return path


def edit_in_workspace(ws: Path) -> None:
    """Three realistic commits, made the way a developer would in the workspace."""
    commit(ws, *STEP_1)
    commit(ws, *STEP_2)
    commit(
        ws,
        "[Serve] Drop the run() shim\n\nThe API module now exports run directly.\n\n"
        "Signed-off-by: Zoë Developer <zoe@users.noreply.github.com>\n",
        {"ray/serve/api.py": None, "ray/serve/__init__.py": "def run(app):\n    return app\n"},
    )


def test_workspace_round_trip_is_byte_identical(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "ray-2.60.0-py3-none-any.whl")
    ws = tmp_path / "ws"
    build_workspace(wheel, [], ws)
    edit_in_workspace(ws)
    patches_dir = tmp_path / "patches"
    exported = export_workspace(ws, patches_dir)
    assert [p.name[:5] for p in exported] == ["0001-", "0002-", "0003-"]
    original = {p.name: p.read_bytes() for p in exported}
    series_text = (patches_dir / "series").read_text()

    ws2 = tmp_path / "ws2"
    build_workspace(wheel, exported, ws2)
    again = export_workspace(ws2, tmp_path / "patches2")
    assert {p.name: p.read_bytes() for p in again} == original

    # Rebuilding the original workspace over itself is allowed once exported,
    # and an export with no edits rewrites nothing.
    build_workspace(wheel, exported, ws)
    assert git(ws, "rev-parse", "HEAD") == git(ws2, "rev-parse", "HEAD")
    export_workspace(ws, patches_dir)
    assert {p.name: p.read_bytes() for p in patches_dir.glob("*.patch")} == original
    assert (patches_dir / "series").read_text() == series_text
    assert b"\n-- \n" not in original[exported[0].name]  # --no-signature
    # The files name the workspace as author and carry no one's Signed-off-by:
    # whoever takes the series upstream authors and signs off its commits.
    for text in original.values():
        assert b"\nFrom: " + WORKSPACE_AUTHOR.encode() + b"\nDate: " in text
        assert b"Zo" not in text.split(b"\ndiff --git ")[0]


def test_workspace_base_is_reproducible(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "ray.whl")
    build_workspace(wheel, [], tmp_path / "a")
    build_workspace(wheel, [], tmp_path / "b")
    assert git(tmp_path / "a", "rev-parse", "base") == git(tmp_path / "b", "rev-parse", "base")
    tracked = set(git(tmp_path / "a", "ls-files").splitlines())
    assert tracked == {f"python/{rel}" for rel in SERVE_FILES}


def test_build_workspace_refuses_unexported_work(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "ray.whl")
    ws = tmp_path / "ws"
    build_workspace(wheel, [], ws)
    (ws / "python" / ROUTER).write_text("# uncommitted\n")
    with pytest.raises(HarnessError, match=f"python/{ROUTER}"):
        build_workspace(wheel, [], ws)
    git(ws, "commit", "-q", "-am", "[Serve] Unsaved work")
    head = git(ws, "rev-parse", "HEAD")
    with pytest.raises(HarnessError, match="export-patches"):
        build_workspace(wheel, [], ws)
    assert git(ws, "rev-parse", "HEAD") == head


def test_build_workspace_with_failing_patch_keeps_old_one(
    tmp_path: Path, series: list[Path]
) -> None:
    wheel = fake_wheel(tmp_path / "ray.whl")
    ws = tmp_path / "ws"
    build_workspace(wheel, series[:1], ws)
    head = git(ws, "rev-parse", "HEAD")
    with pytest.raises(HarnessError, match=series[2].name):
        build_workspace(wheel, series, ws)
    assert git(ws, "rev-parse", "HEAD") == head
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".ws")) == []


def test_export_replaces_old_patch_files_and_keeps_series_header(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "ray.whl")
    ws = tmp_path / "ws"
    build_workspace(wheel, [], ws)
    commit(ws, *STEP_1)
    patches_dir = tmp_path / "patches"
    write_files(
        patches_dir,
        {
            "PIN": "[ray]\n",
            "series": "# Applied in order.\n\n0001-old.patch\n0002-gone.patch\n",
            "0001-old.patch": "old\n",
            "0002-gone.patch": "gone\n",
        },
    )
    (written,) = export_workspace(ws, patches_dir)
    assert {p.name for p in patches_dir.iterdir()} == {"PIN", written.name, "series"}
    assert (patches_dir / "series").read_text() == f"# Applied in order.\n{written.name}\n"
    assert written.name == "0001-Serve-Drain-replicas-in-two-phases.patch"


# ------------------------------------------------------------ export check


def tree_state(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file's bytes and mtime: a check that writes nothing keeps both."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the wheel, a workspace with three commits, the patches folder its export wrote)."""
    wheel = fake_wheel(tmp_path / "ray-2.60.0-py3-none-any.whl")
    ws = tmp_path / "ws"
    build_workspace(wheel, [], ws)
    edit_in_workspace(ws)
    patches_dir = tmp_path / "patches"
    write_files(patches_dir, {"PIN": "[ray]\n", "series": "# Applied in order.\n"})
    export_workspace(ws, patches_dir)
    return wheel, ws, patches_dir


def test_export_check_of_an_exported_workspace_finds_nothing(exported) -> None:
    wheel, ws, patches_dir = exported
    before = tree_state(patches_dir)
    assert export_differences(ws, patches_dir) == []
    assert fresh_export_differences(wheel, read_series(patches_dir / "series"), patches_dir) == []
    assert tree_state(patches_dir) == before


def test_export_check_names_every_file_an_export_would_change(exported) -> None:
    _, ws, patches_dir = exported
    first, second, third = read_series(patches_dir / "series")
    commit(ws, "[Serve] A fourth change\n", {ROUTER: "class Router:\n    pass\n"})
    first.write_bytes(first.read_bytes().replace(b"Stop routing first", b"Stop routing"))
    stray = patches_dir / "0009-Serve-Stray.patch"
    stray.write_text("stray\n")
    before = tree_state(patches_dir)
    differences = export_differences(ws, patches_dir)
    assert differences == [
        f"{first.name} (differs)",
        "0004-Serve-A-fourth-change.patch (missing)",
        f"{stray.name} (not in the export)",
        "series (differs)",
    ]
    assert second.name not in " ".join(differences) and third.name not in " ".join(differences)
    assert tree_state(patches_dir) == before


def test_fresh_export_check_catches_a_patch_the_export_would_not_write(exported) -> None:
    wheel, _, patches_dir = exported
    series = read_series(patches_dir / "series")
    # A signature is what `git format-patch` adds and the export leaves out
    # (--no-signature): git am ignores it, so only the bytes tell.
    series[1].write_bytes(series[1].read_bytes() + b"-- \n2.39.2\n\n")
    before = tree_state(patches_dir)
    assert fresh_export_differences(wheel, series, patches_dir) == [f"{series[1].name} (differs)"]
    assert tree_state(patches_dir) == before


def _export_check(monkeypatch, patches_dir: Path, ws: Path, wheel: Path, *flags: str) -> int:
    """`python -m harness patches export --check [--fresh]` on these folders."""
    import harness.cli as cli
    import harness.core.paths
    import harness.core.pin
    import harness.core.wheels

    monkeypatch.setattr(harness.core.paths, "PATCHES_DIR", patches_dir)
    monkeypatch.setattr(harness.core.paths, "WORKSPACE_DIR", ws)
    monkeypatch.setattr(
        harness.core.pin, "read_series", lambda: read_series(patches_dir / "series")
    )
    monkeypatch.setattr(harness.core.wheels, "ensure_wheelhouse", lambda release: wheel.parent)
    monkeypatch.setattr(harness.core.wheels, "verify_ray_wheel", lambda house, release: wheel)
    before = signal.getsignal(signal.SIGTERM)
    try:
        return cli.main(["patches", "export", "--check", *flags])
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("flags", [(), ("--fresh",)])
def test_export_check_exit_codes(monkeypatch, capsys, exported, flags) -> None:
    wheel, ws, patches_dir = exported
    assert _export_check(monkeypatch, patches_dir, ws, wheel, *flags) == 0
    assert "is exactly what an export" in capsys.readouterr().out
    # Comments after the first patch are not kept by an export.
    series = patches_dir / "series"
    series.write_text(series.read_text() + "# a note the export drops\n")
    assert _export_check(monkeypatch, patches_dir, ws, wheel, *flags) == 1
    err = capsys.readouterr().err
    assert "series (differs)" in err and "Nothing was written" in err


def test_export_check_without_a_workspace_is_2(monkeypatch, capsys, exported, tmp_path) -> None:
    wheel, _, patches_dir = exported
    before = tree_state(patches_dir)
    assert _export_check(monkeypatch, patches_dir, tmp_path / "no-ws", wheel) == 2
    assert "run `make workspace` first" in capsys.readouterr().err
    # With --fresh no workspace is needed: it builds its own from the wheel.
    assert _export_check(monkeypatch, patches_dir, tmp_path / "no-ws", wheel, "--fresh") == 0
    assert not (tmp_path / "no-ws").exists()
    assert tree_state(patches_dir) == before
